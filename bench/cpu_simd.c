/*
 * The CPU evaluation's speed per instruction set: energy and forces of the first N drug-like
 * molecules (one batch each, ANI-2x or MODEL), float64 (as Reference) and float32 networks on each
 * instruction set this CPU runs (nnp_plan_set_cpu_simd), all threads; mean of 5 after a warm-up.
 * Also says whether AVX-512F gives AVX2's bits (both fuse multiply-adds; the baseline does not).
 *   bench_cpu_simd [N (8)] [MODEL]   (NNP_SHARED_DIR: the molecules; built with the C tests)
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "test.h"

#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char** argv) {
    const int count = argc > 1 ? atoi(argv[1]) : 8;
    nnp_model* model = argc > 2 ? load_model_file_or_die(argv[2]) : load_model_or_die("models/ani-model-zoo/ani-2x_8x.info");
    int32_t n = 0, nb = 0, *z = NULL, *batch = NULL;
    double* pos = NULL;
    for (int k = 1; nb < count && k < 10000; k++)
        if (append_druglike(k, nb, 0, &n, &z, &batch, &pos) > 0) nb++;
    static const char* const names[] = {"float32, auto", "float32, baseline", "float32, AVX2", "float32, AVX-512F"};
    double *f = malloc(sizeof(double) * 3 * n), *f_base = malloc(sizeof(double) * 3 * n), e_base = 0;
    printf("%d molecules, %d atoms, %s, all threads, energy and forces:\n", nb, n, nnp_model_name(model));
    for (int level = -1; level <= (int)nnp_cpu_simd_available(); level++) {
        if (level == NNP_CPU_SIMD_AUTO) continue;
        nnp_plan* p;
        CHECK_OK(nnp_plan_create(model, &p));
        CHECK_OK(nnp_plan_set_atoms(p, n, z, batch));
        if (level >= 0) {
            CHECK_OK(nnp_plan_set_cpu_precision(p, NNP_PRECISION_SINGLE));
            CHECK_OK(nnp_plan_set_cpu_simd(p, (nnp_cpu_simd)level));
        }
        double e;
        CHECK_OK(nnp_evaluate_cpu(p, pos, NULL, &e, NULL, f));
        const double t = now();
        for (int r = 0; r < 5; r++) CHECK_OK(nnp_evaluate_cpu(p, pos, NULL, &e, NULL, f));
        const double ms = (now() - t) / 5 * 1e3;
        if (level == NNP_CPU_SIMD_AVX2) e_base = e, memcpy(f_base, f, sizeof(double) * 3 * n);
        const int same = level > NNP_CPU_SIMD_AVX2 && e == e_base && memcmp(f, f_base, sizeof(double) * 3 * n) == 0;
        printf("  %-18s %8.2f ms%s\n", level < 0 ? "float64" : names[level], ms,
               level > NNP_CPU_SIMD_AVX2 ? (same ? "  (AVX2's bits)" : "  (bits differ from AVX2)") : "");
        nnp_plan_free(p);
    }
    free(f), free(f_base), free(z), free(batch), free(pos);
    nnp_model_free(model);
    return test_finish("bench_cpu_simd");
}
