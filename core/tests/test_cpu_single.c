/*
 * The CPU evaluation in float32 (nnp_plan_set_cpu_precision single: float32 networks, the AEV by
 * aev_simd.h) against the double one: ANI-2x on drug-like molecules and copies with S, F and Cl
 * (every element), and ANI-1x (a whole ζ) on the same molecules, free and in a
 * periodic box; per-batch energies within 1e-8 relative, forces within 1e-5 relative RMS; 1, 2 and
 * all threads give the same bits; energy alone equals the energy with forces. Each instruction set
 * this CPU runs (nnp_plan_set_cpu_simd: the baseline, AVX2, AVX-512F) is checked so, whatever the
 * widest is, and AVX-512F gives AVX2's bits (both fuse multiply-adds; the baseline does not); AUTO equals the widest; a wider one than the CPU runs is
 * refused.
 */
#include "test.h"

#define NMOL 12

static double rms_relative(const double* ref, const double* x, int n) {
    double num = 0, den = 0;
    for (int k = 0; k < n; k++) num += (x[k] - ref[k]) * (x[k] - ref[k]), den += ref[k] * ref[k];
    return sqrt(num / den);
}

/* One model on the drug-like set; every_element: copies with F, S and Cl (ANI-2x). */
static void check_model(const char* rel_model, int every_element) {
    nnp_model* model = load_model_or_die(rel_model);
    printf("%s\n", nnp_model_name(model));
    int32_t n = 0, *z = NULL, *batch = NULL;
    double* pos = NULL;
    for (int k = 1; k <= NMOL; k++) {
        const int32_t added = append_druglike(k, k - 1, 0, &n, &z, &batch, &pos);
        int swapped = 0;
        for (int32_t a = n - added; a < n; a++) /* every element */
            if (every_element && k % 3 == 0 && z[a] == 1 && swapped < 3) z[a] = (int32_t[]){9, 16, 17}[swapped++];
    }
    const int32_t nb = NMOL;
    const nnp_cpu_simd widest = nnp_cpu_simd_available();
    static const char* const simd_names[] = {"auto", "baseline", "AVX2", "AVX-512F"};
    printf("widest instruction set of this CPU and build: %s\n", simd_names[widest]);
    for (int periodic = 0; periodic < 2; periodic++) {
        const double box[9] = {40, 0, 0, 0, 40, 0, 0, 0, 40};
        nnp_plan* dbl;
        CHECK_OK(nnp_plan_create(model, &dbl));
        CHECK_OK(nnp_plan_set_atoms(dbl, n, z, batch));
        double e_d, *b_d = malloc(sizeof(double) * nb), *f_d = malloc(sizeof(double) * 3 * n);
        double *f_s = malloc(sizeof(double) * 3 * n), *f_t = malloc(sizeof(double) * 3 * n), *f_w = malloc(sizeof(double) * 3 * n);
        double *b_s = malloc(sizeof(double) * nb), e_w = 0, e_b = 0, *f_b = malloc(sizeof(double) * 3 * n);
        double e_v = 0, *f_v = malloc(sizeof(double) * 3 * n); /* AVX2's */
        CHECK_OK(nnp_evaluate_cpu(dbl, pos, periodic ? box : NULL, &e_d, b_d, f_d));
        for (int simd = NNP_CPU_SIMD_AUTO; simd <= (int)widest; simd++) {
            nnp_plan* sgl;
            CHECK_OK(nnp_plan_create(model, &sgl));
            CHECK_OK(nnp_plan_set_atoms(sgl, n, z, batch));
            CHECK_OK(nnp_plan_set_cpu_precision(sgl, NNP_PRECISION_SINGLE));
            CHECK_OK(nnp_plan_set_cpu_simd(sgl, (nnp_cpu_simd)simd));
            double e_s;
            CHECK_OK(nnp_evaluate_cpu(sgl, pos, periodic ? box : NULL, &e_s, b_s, f_s));
            double worst = 0;
            for (int b = 0; b < nb; b++) worst = fmax(worst, fabs(b_s[b] - b_d[b]) / fabs(b_d[b]));
            const double frms = rms_relative(f_d, f_s, 3 * n);
            printf("%d atoms in %d batches%s, %s: float32 networks against double: worst batch %.2e, forces rel RMS %.2e\n", n, nb,
                   periodic ? ", periodic" : "", simd_names[simd], worst, frms);
            CHECK(worst <= 1e-8);
            CHECK(frms <= 1e-5);
            CHECK(frms > 0); /* it is float32 */
            for (int threads = 1; threads <= 3; threads++) { /* 3: all cores */
                CHECK_OK(nnp_plan_set_num_threads(sgl, threads == 3 ? 0 : threads));
                double e_t;
                CHECK_OK(nnp_evaluate_cpu(sgl, pos, periodic ? box : NULL, &e_t, NULL, f_t));
                CHECK(e_t == e_s && memcmp(f_t, f_s, sizeof(double) * 3 * n) == 0);
                CHECK_OK(nnp_evaluate_cpu(sgl, pos, periodic ? box : NULL, &e_t, NULL, NULL));
                CHECK(e_t == e_s);
            }
            if (simd == NNP_CPU_SIMD_AUTO) {
                e_w = e_s;
                memcpy(f_w, f_s, sizeof(double) * 3 * n);
            } else if (simd == NNP_CPU_SIMD_BASELINE) {
                e_b = e_s;
                memcpy(f_b, f_s, sizeof(double) * 3 * n);
            } else if (simd == NNP_CPU_SIMD_AVX2) { /* the baseline's sums without fusing: float32 rounding apart */
                CHECK(fabs(e_s - e_b) <= 1e-9 * fabs(e_b));
                CHECK(rms_relative(f_b, f_s, 3 * n) <= 1e-6);
                e_v = e_s;
                memcpy(f_v, f_s, sizeof(double) * 3 * n);
            } else { /* fused multiply-adds as AVX2, each atom's sums in one order: AVX2's bits */
                CHECK(e_s == e_v && memcmp(f_s, f_v, sizeof(double) * 3 * n) == 0);
            }
            if (simd == (int)widest) CHECK(e_s == e_w && memcmp(f_s, f_w, sizeof(double) * 3 * n) == 0); /* AUTO: the widest */
            CHECK_FAILS(nnp_plan_set_cpu_precision(sgl, (nnp_precision)7), NNP_ERR_INVALID_ARGUMENT, "unknown precision");
            CHECK_FAILS(nnp_plan_set_cpu_simd(sgl, (nnp_cpu_simd)7), NNP_ERR_INVALID_ARGUMENT, "unknown CPU instruction set");
            if (widest < NNP_CPU_SIMD_AVX512)
                CHECK_FAILS(nnp_plan_set_cpu_simd(sgl, (nnp_cpu_simd)(widest + 1)), NNP_ERR_UNSUPPORTED, "does not run");
            nnp_plan_free(sgl);
        }
        free(b_d), free(b_s), free(f_d), free(f_s), free(f_t), free(f_w), free(f_b), free(f_v);
        nnp_plan_free(dbl);
    }
    free(z), free(batch), free(pos);
    nnp_model_free(model);
}

int main(void) {
    check_model("models/ani-model-zoo/ani-2x_8x.info", 1); /* ζ = 14.1: pow by exp and log */
    check_model("models/ani-model-zoo/ani-1x_8x.info", 0); /* ζ = 32: pow by repeated squaring */
    return test_finish("test_cpu_single");
}
