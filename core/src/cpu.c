/*
 * The CPU evaluation's generic part: input checks, unit conversion, the thread count, the family's
 * evaluation and the per-batch sums. The families' own CPU code is in core/models/<family>/.
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ input checks */

nnp_status nnp_check_box(const double* box, double cutoff, double to_angstrom) {
    for (int k = 0; k < 9; k++)
        if (!isfinite(box[k])) return nnp_fail(NNP_ERR_NONFINITE, "box vector component %d is not finite", k);
    if (box[1] != 0 || box[2] != 0 || box[5] != 0)
        return nnp_fail(NNP_ERR_BOX, "box must be in reduced form: a = (ax,0,0), b = (bx,by,0), c = (cx,cy,cz)");
    double ax = box[0], by = box[4], cz = box[8];
    if (!(ax > 0 && by > 0 && cz > 0)) return nnp_fail(NNP_ERR_BOX, "box has a non-positive width");
    if (fabs(box[3]) > 0.5 * ax * (1 + 1e-6) || fabs(box[6]) > 0.5 * ax * (1 + 1e-6) ||
        fabs(box[7]) > 0.5 * by * (1 + 1e-6))
        return nnp_fail(NNP_ERR_BOX, "box is not reduced: need |bx|, |cx| <= ax/2 and |cy| <= by/2");
    double min_width = fmin(ax, fmin(by, cz)) * to_angstrom;
    if (min_width < 2 * cutoff)
        return nnp_fail(NNP_ERR_BOX, "periodic box width %g Å is smaller than twice the model's cutoff "
                        "(2 × %g Å); minimum image would miss interactions", min_width, cutoff);
    return NNP_OK;
}

static int32_t default_threads(void) {
    const char* env = getenv("NNP_NUM_THREADS");
    long n = env && env[0] ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > NNP_MAX_THREADS ? NNP_MAX_THREADS : (int32_t)n;
}

int32_t nnp_plan_threads(const nnp_plan* plan) { return plan->n_threads > 0 ? plan->n_threads : default_threads(); }

nnp_status nnp_plan_set_num_threads(nnp_plan* plan, int32_t n_threads) {
    if (plan == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_plan_set_num_threads: plan is NULL");
    if (n_threads < 0 || n_threads > NNP_MAX_THREADS)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "thread count %d is not in 0..%d", n_threads, NNP_MAX_THREADS);
    plan->n_threads = n_threads;
    return NNP_OK;
}

/* Energy and length factors from the model's units to the plan's. */
void nnp_plan_units(const nnp_plan* plan, double* energy_factor, double* length_angstrom) {
    const nnp_model* model = plan->model;
    double e_unit = plan->units == NNP_UNITS_NM_KJMOL ? 1.0
                    : plan->units == NNP_UNITS_MODEL  ? model->energy_to_kjmol
                                                      : NNP_HARTREE_TO_KJMOL;
    *energy_factor = e_unit == model->energy_to_kjmol ? 1.0 : model->energy_to_kjmol / e_unit;
    *length_angstrom = plan->units == NNP_UNITS_NM_KJMOL ? 10.0
                       : plan->units == NNP_UNITS_MODEL  ? model->length_to_angstrom
                                                         : 1.0;
}

nnp_status nnp_evaluate_cpu(nnp_plan* plan, const double* positions, const double* box, double* energy,
                            double* batch_energies, double* forces) {
    if (plan == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_evaluate_cpu: plan is NULL");
    int32_t n = plan->n_atoms;
    if (n > 0 && positions == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_evaluate_cpu: positions is NULL");
    const nnp_model* model = plan->model;
    double energy_unit, to_angstrom;
    nnp_plan_units(plan, &energy_unit, &to_angstrom);
    /* plan length unit → model length unit */
    const double to_model = to_angstrom == model->length_to_angstrom ? 1.0 : to_angstrom / model->length_to_angstrom;
    for (int32_t i = 0; i < 3 * n; i++)
        if (!isfinite(positions[i]))
            return nnp_fail(NNP_ERR_NONFINITE, "coordinate %c of atom %d is not finite (%g)", "xyz"[i % 3], i / 3,
                            positions[i]);
    double box_m[9];
    if (box != NULL) {
        nnp_status st = nnp_check_box(box, model->family->cutoff(model) * model->length_to_angstrom, to_angstrom);
        if (st != NNP_OK) return st;
        for (int k = 0; k < 9; k++) box_m[k] = box[k] * to_model;
    }
    for (int32_t i = 0; i < 3 * n; i++) plan->pos[i] = positions[i] * to_model;
    double* atom_e = calloc((size_t)n + 1, sizeof *atom_e);
    double* per_batch = calloc((size_t)plan->n_batches + 1, sizeof *per_batch);
    double* grad = forces ? calloc((size_t)3 * n + 1, sizeof *grad) : NULL;
    if (atom_e == NULL || per_batch == NULL || (forces && grad == NULL)) {
        free(atom_e), free(per_batch), free(grad);
        return nnp_fail(NNP_ERR_MEMORY, "out of memory for %d atoms", n);
    }
    nnp_status st = model->family->evaluate_cpu(plan, plan->pos, box ? box_m : NULL, atom_e, per_batch, grad);
    /* Per-batch reduction, in atom index order: E_b = (batch terms) + Σ atom energies; E = Σ_b E_b. */
    double total = 0;
    for (int32_t i = 0; i < n; i++) per_batch[plan->batches[i]] += atom_e[i];
    for (int32_t b = 0; b < plan->n_batches; b++) total += (per_batch[b] *= energy_unit);
    int finite = isfinite(total);
    for (int32_t i = 0; grad && finite && i < 3 * n; i++) finite = isfinite(grad[i]);
    if (st == NNP_OK && !finite)
        st = nnp_fail(NNP_ERR_NONFINITE, "the model gave a non-finite energy or force for these coordinates");
    if (st == NNP_OK) {
        if (energy != NULL) *energy = total;
        if (batch_energies != NULL) memcpy(batch_energies, per_batch, (size_t)plan->n_batches * sizeof *per_batch);
        if (forces != NULL)
            for (int32_t i = 0; i < 3 * n; i++) forces[i] = -grad[i] * energy_unit * to_model;
    }
    free(atom_e), free(per_batch), free(grad);
    return st;
}
