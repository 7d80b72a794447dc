/*
 * TensorNet's CPU evaluation with NNP_PRECISION_SINGLE (radial tables, SIMD linears; what OpenMM's
 * CPU platform runs) against the exact double-precision evaluation (which the Python tests compare
 * with torchmd-net itself), for the converted test checkpoints given on the command line: one
 * molecule, 12 molecules with total charges −1/0/+1, every AceFF element, a periodic box, a dense
 * batch, one ensemble member; every instruction set this CPU runs (AVX2 and AVX-512F the same bits);
 * thread counts 1, 2 and 3 the same bits; energy alone equal to energy with forces; and the tables
 * made by two plans evaluating at once on two threads.
 *   test_tensornet_cpu MODEL.nnpm...
 */
#include "test.h"
#include "tensornet_systems.h"

#include <pthread.h>

/* Agreement with the double evaluation: each batch's energy relative to itself (an ensemble mean:
   relative to the mean of its members' |batch energy|, as each member's rounding scales with its own
   energy and the members' energies may cancel), and the relative RMS of the forces (the targets of
   the CPU platform: 1e-8 and 1e-5). */
#define BATCH_ENERGY 1e-8
#define FORCES 1e-5

typedef struct result {
    double e, *f, *b;
} result;

static result evaluate(nnp_model* model, const system_t* s, int32_t member, nnp_precision precision,
                       nnp_cpu_simd simd, int32_t threads, int forces) {
    nnp_plan* p = make_plan(model, s, member);
    CHECK_OK(nnp_plan_set_cpu_precision(p, precision));
    if (precision == NNP_PRECISION_SINGLE) CHECK_OK(nnp_plan_set_cpu_simd(p, simd));
    CHECK_OK(nnp_plan_set_num_threads(p, threads));
    result r = {0, calloc(3 * (size_t)s->n, sizeof(double)), calloc((size_t)s->n_batches + 1, sizeof(double))};
    CHECK_OK(nnp_evaluate_cpu(p, s->pos, s->periodic ? s->box : NULL, &r.e, r.b, forces ? r.f : NULL));
    nnp_plan_free(p);
    return r;
}

static void free_result(result* r) { free(r->f), free(r->b); }

static int same_bits(const result* a, const result* b, const system_t* s) {
    return a->e == b->e && memcmp(a->f, b->f, sizeof(double) * 3 * (size_t)s->n) == 0 &&
           memcmp(a->b, b->b, sizeof(double) * (size_t)s->n_batches) == 0;
}

static const char* simd_name(nnp_cpu_simd simd) {
    return simd == NNP_CPU_SIMD_AVX512 ? "AVX-512F" : simd == NNP_CPU_SIMD_AVX2 ? "AVX2" : "baseline";
}

static void compare(const char* model_name, nnp_model* model, const system_t* s, int32_t member) {
    if (!has_elements(model, s)) {
        printf("%s, %s: skipped (the model lacks some of its elements)\n", model_name, s->name);
        return;
    }
    result ref = evaluate(model, s, member, NNP_PRECISION_DOUBLE, NNP_CPU_SIMD_AUTO, 2, 1);
    double* scale = calloc((size_t)s->n_batches + 1, sizeof(double)); /* what each batch's error is relative to */
    const int32_t members = member < 0 ? nnp_model_num_members(model) : 1;
    for (int32_t k = 0; k < members; k++) {
        result m = members > 1 ? evaluate(model, s, k, NNP_PRECISION_DOUBLE, NNP_CPU_SIMD_AUTO, 2, 0) : ref;
        for (int b = 0; b < s->n_batches; b++) scale[b] += fabs(m.b[b]) / members;
        if (members > 1) free_result(&m);
    }
    result wide = {0, NULL, NULL};
    for (nnp_cpu_simd simd = NNP_CPU_SIMD_BASELINE; simd <= nnp_cpu_simd_available(); simd++) {
        result r = evaluate(model, s, member, NNP_PRECISION_SINGLE, simd, 2, 1);
        double worst = 0;
        for (int b = 0; b < s->n_batches; b++) worst = fmax(worst, fabs(r.b[b] - ref.b[b]) / fmax(scale[b], 1e-300));
        const double frms = rms_relative(ref.f, r.f, 3 * s->n);
        printf("%s, %s, %d atoms in %d batches, member %d, %s: energy double %.12g single %.12g, worst batch %.2e%s, "
               "forces rel RMS %.2e\n", model_name, s->name, s->n, s->n_batches, member, simd_name(simd), ref.e, r.e,
               worst, members > 1 ? " (of the members' mean |batch energy|)" : "", frms);
        CHECK(worst <= BATCH_ENERGY);
        CHECK(frms <= FORCES);
        if (simd == NNP_CPU_SIMD_AVX2) wide = r; /* AVX-512F gives the same bits */
        else if (simd == NNP_CPU_SIMD_AVX512 && wide.f) CHECK(same_bits(&r, &wide, s));
        if (simd != NNP_CPU_SIMD_AVX2) free_result(&r);
    }
    if (wide.f) free_result(&wide);
    free(scale);
    /* the thread count and forces on or off change nothing */
    result one = evaluate(model, s, member, NNP_PRECISION_SINGLE, NNP_CPU_SIMD_AUTO, 1, 1);
    result three = evaluate(model, s, member, NNP_PRECISION_SINGLE, NNP_CPU_SIMD_AUTO, 3, 1);
    result two = evaluate(model, s, member, NNP_PRECISION_SINGLE, NNP_CPU_SIMD_AUTO, 2, 0);
    CHECK(same_bits(&one, &three, s));
    CHECK(two.e == one.e && memcmp(two.b, one.b, sizeof(double) * (size_t)s->n_batches) == 0);
    free_result(&one), free_result(&three), free_result(&two), free_result(&ref);
}

/* Two plans on one freshly loaded model, evaluated at once: the first evaluations make the tables. */
typedef struct job {
    nnp_model* model;
    const system_t* s;
    result r;
} job;

static void* run_job(void* p) {
    job* j = p;
    j->r = evaluate(j->model, j->s, -1, NNP_PRECISION_SINGLE, NNP_CPU_SIMD_AUTO, 1, 1);
    return NULL;
}

static void concurrent_first_use(const char* path, const system_t* s) {
    nnp_model* model = NULL;
    CHECK_OK(nnp_model_load(path, &model));
    if (model == NULL || !has_elements(model, s)) {
        nnp_model_free(model);
        return;
    }
    job jobs[2] = {{.model = model, .s = s}, {.model = model, .s = s}};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, run_job, &jobs[1]) == 0);
    run_job(&jobs[0]);
    pthread_join(t, NULL);
    result again = evaluate(model, s, -1, NNP_PRECISION_SINGLE, NNP_CPU_SIMD_AUTO, 1, 1);
    CHECK(same_bits(&jobs[0].r, &jobs[1].r, s) && same_bits(&jobs[0].r, &again, s));
    printf("%s: two plans making the tables at once agree with a later evaluation\n", path);
    free_result(&jobs[0].r), free_result(&jobs[1].r), free_result(&again);
    nnp_model_free(model);
}

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_tensornet_cpu MODEL.nnpm...\n");
        return 2;
    }
    FILE* first = fopen(argv[1], "rb");
    if (first == NULL) {
        printf("test_tensornet_cpu: skipped: no %s (the converted test checkpoints come from the Python module's "
               "python.convert_tensornet_fixtures)\n", argv[1]);
        return 77;
    }
    fclose(first);
    for (int a = 1; a < argc; a++) {
        nnp_model* model = load_model_file_or_die(argv[a]);
        const char* name = strrchr(argv[a], '/') ? strrchr(argv[a], '/') + 1 : argv[a];
        CHECK(strcmp(nnp_model_family_name(model), "tensornet") == 0);
        system_t sys[N_SYSTEMS];
        make_systems(sys);
        concurrent_first_use(argv[a], &sys[1]);
        for (int k = 0; k < N_SYSTEMS; k++) compare(name, model, &sys[k], -1);
        compare(name, model, &sys[1], 0); /* one member */
        for (int k = 0; k < N_SYSTEMS; k++) free_system(&sys[k]);
        nnp_model_free(model);
    }
    return test_finish("test_tensornet_cpu");
}
