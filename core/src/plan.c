/* The plan: atoms with an element and a batch each, and the sizes cached from them. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

nnp_status nnp_plan_create(const nnp_model* model, nnp_plan** out) {
    if (model == NULL || out == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_plan_create: NULL argument");
    nnp_plan* plan = calloc(1, sizeof *plan);
    if (plan == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    plan->model = model;
    plan->member = -1;
    plan->units = NNP_UNITS_ANGSTROM_HARTREE;
    plan->cuda_dirty = 1;
    plan->cpu_precision = NNP_PRECISION_DOUBLE;
    plan->cpu_simd = NNP_CPU_SIMD_AUTO;
    nnp_cuda_tuning_defaults(&plan->cuda_tuning);
    *out = plan;
    return NNP_OK;
}

static void free_atoms(nnp_plan* plan) {
    free(plan->atomic_numbers);
    free(plan->elements);
    free(plan->batches);
    free(plan->order);
    free(plan->batch_start);
    free(plan->pos);
    free(plan->particles);
    free(plan->batch_charges);
    plan->batch_charges = NULL;
    plan->particles = NULL;
    plan->atomic_numbers = plan->elements = plan->batches = plan->order = plan->batch_start = NULL;
    plan->pos = NULL;
}

void nnp_plan_free(nnp_plan* plan) {
    if (plan == NULL) return;
    nnp_cuda_release(plan);
    free_atoms(plan);
    free(plan);
}

nnp_status nnp_plan_set_atoms(nnp_plan* plan, int32_t n_atoms, const int32_t* atomic_numbers,
                              const int32_t* batches) {
    if (plan == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_plan_set_atoms: plan is NULL");
    if (n_atoms < 0) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_plan_set_atoms: n_atoms is %d", n_atoms);
    if (n_atoms > 0 && (atomic_numbers == NULL || batches == NULL))
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_plan_set_atoms: %s is NULL",
                        atomic_numbers == NULL ? "atomic_numbers" : "batches");
    const nnp_model* model = plan->model;
    int32_t max_batch = -1;
    for (int32_t i = 0; i < n_atoms; i++) {
        if (model->family->element_index(model, atomic_numbers[i]) < 0) {
            const char* sym = nnp_element_symbol(atomic_numbers[i]);
            return nnp_fail(NNP_ERR_ELEMENT, "atom %d: element %s (atomic number %d) is not in %s model "
                            "'%s'", i, sym ? sym : "?", atomic_numbers[i], model->family->name, model->name);
        }
        if (batches[i] < 0)
            return nnp_fail(NNP_ERR_BATCH, "atom %d: batch index %d is negative", i, batches[i]);
        if (batches[i] > max_batch) max_batch = batches[i];
    }
    if (max_batch >= NNP_MAX_BATCHES)
        return nnp_fail(NNP_ERR_BATCH, "batch index %d is too large (at most %d)", max_batch,
                        NNP_MAX_BATCHES - 1);
    int32_t n_batches = max_batch + 1;
    size_t n = (size_t)n_atoms;
    int32_t* z = malloc((n + 1) * sizeof *z);
    int32_t* el = malloc((n + 1) * sizeof *el);
    int32_t* b = malloc((n + 1) * sizeof *b);
    int32_t* order = malloc((n + 1) * sizeof *order);
    int32_t* start = calloc((size_t)n_batches + 2, sizeof *start);
    double* pos = malloc((3 * n + 1) * sizeof *pos);
    int32_t* charges = calloc((size_t)n_batches + 1, sizeof *charges);
    if (!z || !el || !b || !order || !start || !pos || !charges) {
        free(z), free(el), free(b), free(order), free(start), free(pos), free(charges);
        return nnp_fail(NNP_ERR_MEMORY, "out of memory for %d atoms in %d batches", n_atoms, n_batches);
    }
    for (int32_t i = 0; i < n_atoms; i++) {
        z[i] = atomic_numbers[i];
        el[i] = model->family->element_index(model, z[i]);
        b[i] = batches[i];
        start[b[i] + 1]++;
    }
    for (int32_t k = 0; k < n_batches; k++) start[k + 1] += start[k];
    /* Counting sort by batch, stable: within a batch, atoms keep their index order. */
    int32_t* fill = malloc(((size_t)n_batches + 1) * sizeof *fill);
    if (fill == NULL) {
        free(z), free(el), free(b), free(order), free(start), free(pos), free(charges);
        return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    }
    memcpy(fill, start, ((size_t)n_batches + 1) * sizeof *fill);
    for (int32_t i = 0; i < n_atoms; i++) order[fill[b[i]]++] = i;
    free(fill);
    /* Charges of the batches that remain are kept. */
    for (int32_t k = 0; plan->batch_charges != NULL && k < n_batches && k < plan->n_batches; k++)
        charges[k] = plan->batch_charges[k];
    free_atoms(plan);
    plan->batch_charges = charges;
    plan->atomic_numbers = z;
    plan->elements = el;
    plan->batches = b;
    plan->order = order;
    plan->batch_start = start;
    plan->pos = pos;
    plan->n_atoms = n_atoms;
    plan->n_batches = n_batches;
    plan->cuda_dirty = 1;
    return NNP_OK;
}

int32_t nnp_plan_num_atoms(const nnp_plan* plan) { return plan ? plan->n_atoms : -1; }
int32_t nnp_plan_num_batches(const nnp_plan* plan) { return plan ? plan->n_batches : -1; }
int32_t nnp_plan_member(const nnp_plan* plan) { return plan ? plan->member : -2; }

nnp_status nnp_plan_set_batch_charges(nnp_plan* plan, int32_t n_batches, const int32_t* charges) {
    if (plan == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_plan_set_batch_charges: plan is NULL");
    if (n_batches < 0 || n_batches > plan->n_batches)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_plan_set_batch_charges: %d charges for a plan of %d batches",
                        n_batches, plan->n_batches);
    if (n_batches > 0 && charges == NULL)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_plan_set_batch_charges: charges is NULL");
    for (int32_t k = 0; k < n_batches; k++) {
        if (charges[k] < -1000 || charges[k] > 1000)
            return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "batch %d: total charge %d is not in -1000..1000", k, charges[k]);
        nnp_status st = plan->model->family->check_charge(plan->model, k, charges[k]);
        if (st != NNP_OK) return st;
    }
    for (int32_t k = 0; k < plan->n_batches; k++) {
        int32_t q = k < n_batches ? charges[k] : 0;
        if (plan->batch_charges[k] != q) plan->cuda_dirty = 1;
        plan->batch_charges[k] = q;
    }
    return NNP_OK;
}

int32_t nnp_plan_batch_charge(const nnp_plan* plan, int32_t batch) {
    if (plan == NULL || batch < 0 || batch >= plan->n_batches || plan->batch_charges == NULL) return 0;
    return plan->batch_charges[batch];
}

nnp_status nnp_plan_set_member(nnp_plan* plan, int32_t member) {
    if (plan == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_plan_set_member: plan is NULL");
    if (member < -1 || member >= plan->model->n_members)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "ensemble member %d is not valid: use -1 (mean) or "
                        "0..%d", member, plan->model->n_members - 1);
    if (plan->member != member) plan->cuda_dirty = 1;
    plan->member = member;
    return NNP_OK;
}

nnp_status nnp_plan_set_units(nnp_plan* plan, nnp_units units) {
    if (plan == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_plan_set_units: plan is NULL");
    if (units != NNP_UNITS_ANGSTROM_HARTREE && units != NNP_UNITS_NM_KJMOL && units != NNP_UNITS_MODEL)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "unknown units %d", (int)units);
    if (plan->units != units) plan->cuda_dirty = 1;
    plan->units = units;
    return NNP_OK;
}

nnp_status nnp_plan_set_particles(nnp_plan* plan, const int32_t* particles) {
    if (plan == NULL || (particles == NULL && plan->n_atoms > 0))
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_plan_set_particles: NULL argument");
    for (int32_t i = 0; i < plan->n_atoms; i++)
        if (particles[i] < 0)
            return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "atom %d: particle index %d is negative", i, particles[i]);
    int32_t* copy = malloc(((size_t)plan->n_atoms + 1) * sizeof *copy);
    if (copy == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    memcpy(copy, particles, (size_t)plan->n_atoms * sizeof *copy);
    free(plan->particles);
    plan->particles = copy;
    plan->cuda_dirty = 1;
    return NNP_OK;
}

nnp_status nnp_plan_set_cpu_precision(nnp_plan* plan, nnp_precision precision) {
    if (plan == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_plan_set_cpu_precision: plan is NULL");
    if (precision != NNP_PRECISION_SINGLE && precision != NNP_PRECISION_DOUBLE)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "unknown precision %d", (int)precision);
    plan->cpu_precision = precision;
    return NNP_OK;
}

nnp_status nnp_plan_set_cpu_simd(nnp_plan* plan, nnp_cpu_simd simd) {
    if (plan == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_plan_set_cpu_simd: plan is NULL");
    if (simd < NNP_CPU_SIMD_AUTO || simd > NNP_CPU_SIMD_AVX512)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "unknown CPU instruction set %d", (int)simd);
    static const char* const names[] = {"auto", "baseline", "AVX2", "AVX-512F"};
    if (simd > nnp_cpu_simd_available())
        return nnp_fail(NNP_ERR_UNSUPPORTED, "this CPU (or this build) does not run %s; the widest it runs is %s", names[simd],
                        names[nnp_cpu_simd_available()]);
    plan->cpu_simd = simd;
    return NNP_OK;
}

nnp_status nnp_plan_set_cuda_precision(nnp_plan* plan, nnp_precision precision) {
    if (plan == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_plan_set_cuda_precision: plan is NULL");
    if (precision != NNP_PRECISION_SINGLE && precision != NNP_PRECISION_DOUBLE)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "unknown precision %d", (int)precision);
    if (plan->cuda_precision != (int)precision) plan->cuda_dirty = 1;
    plan->cuda_precision = precision;
    return NNP_OK;
}

nnp_status nnp_plan_set_cuda_profiling(nnp_plan* plan, int enabled) {
    if (plan == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_plan_set_cuda_profiling: plan is NULL");
    plan->cuda_profile = enabled != 0;
    return NNP_OK;
}

nnp_status nnp_plan_set_cuda_tuning_internal(nnp_plan* plan, const nnp_cuda_tuning* tuning) {
    if (plan == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_plan_set_cuda_tuning_internal: plan is NULL");
    if (tuning == NULL) nnp_cuda_tuning_defaults(&plan->cuda_tuning);
    else plan->cuda_tuning = *tuning;
    plan->cuda_dirty = 1;
    return NNP_OK;
}

nnp_status nnp_plan_get_cuda_tuning_internal(const nnp_plan* plan, nnp_cuda_tuning* tuning) {
    if (plan == NULL || tuning == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_plan_get_cuda_tuning_internal: NULL argument");
    *tuning = plan->cuda_tuning;
    return NNP_OK;
}
