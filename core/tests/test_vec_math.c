/*
 * The float32 evaluation's vector maths (core/models/ani/vec_math.h: exp, log, pow without library
 * calls) against the C library's, on every instruction set this build compiles and this CPU runs:
 * exp within 2 ulp over [-708, 0] and exactly 0 below, log within 2 ulp over every binade of the
 * normal numbers up to 4, pow for the AEV's ζ − 1: by exp and log within 4 ulp · (1 + |n log base|),
 * by repeated squaring (a whole n) within 1 ulp · (1 + n), 0 where the true value is below 1e-300.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;
#define EPS 2.220446049250313e-16

/* the worst of |got − want| / (|want| · EPS · scale) seen so far, and whether any went over the limit */
typedef struct {
    double worst;
    int over;
} ulps;
static void record(ulps* u, double got, double want, double scale, double limit) {
    const double e = want == 0 ? (got == 0 ? 0 : INFINITY) : fabs(got - want) / (fabs(want) * EPS * scale);
    if (!(e <= limit)) u->over++; /* NaN too */
    if (e > u->worst) u->worst = e;
}
static void report(const char* isa, const char* what, const ulps* u, double limit) {
    printf("%-9s %-28s worst %.2f (limit %.0f)%s\n", isa, what, u->worst, limit, u->over ? "  FAIL" : "");
    failures += u->over != 0;
}

/* One instruction set's check: vec_math.h compiled with SFX, ATTR and VW. */
#define CHECK_ISA(isa)                                                                                              \
    ATTR static void NNP_FN(check)(void) {                                                                          \
        ulps ue = {0, 0}, ul = {0, 0}, up = {0, 0}, uw = {0, 0};                                                    \
        double x[VW], y[VW];                                                                                        \
        for (int k = 0; k < 2000000; k += VW) { /* exp over [-708, 0] and below */                                  \
            for (int l = 0; l < VW; l++) x[l] = -710.0 * (k + l) / 2000000.0;                                      \
            NNP_FN(vstore)(y, NNP_FN(vexp)(NNP_FN(vload)(x)));                                                      \
            for (int l = 0; l < VW; l++) {                                                                          \
                if (x[l] >= -708) record(&ue, y[l], exp(x[l]), 1, 2);                                               \
                else if (y[l] != 0) ue.over++;                                                                      \
            }                                                                                                       \
        }                                                                                                           \
        for (int b = -1022; b <= 1; b++) /* log: 4096 points in each binade */                                     \
            for (int k = 0; k < 4096; k += VW) {                                                                    \
                for (int l = 0; l < VW; l++) x[l] = ldexp(1 + (k + l) / 4096.0, b);                                \
                NNP_FN(vstore)(y, NNP_FN(vlog)(NNP_FN(vload)(x)));                                                  \
                for (int l = 0; l < VW; l++) {                                                                      \
                    if (x[l] == 1) { if (y[l] != 0) ul.over++; }                                                    \
                    else record(&ul, y[l], log(x[l]), 1, 2);                                                        \
                }                                                                                                   \
            }                                                                                                       \
        const double ns[3] = {13.1, 31, 0};                                                                         \
        for (int q = 0; q < 3; q++)                                                                                 \
            for (int k = 0; k <= 100000; k += VW) {                                                                 \
                for (int l = 0; l < VW; l++) x[l] = (k + l) > 100000 ? 1 : (k + l) / 100000.0;                     \
                const int whole = ns[q] == floor(ns[q]);                                                            \
                NNP_FN(vstore)(y, NNP_FN(vpow)(NNP_FN(vload)(x), ns[q], whole));                                    \
                for (int l = 0; l < VW; l++) {                                                                      \
                    const double want = pow(x[l], ns[q]);                                                           \
                    if (want < 1e-300) { if (!(y[l] >= 0 && y[l] < 1e-290)) up.over++; continue; }                  \
                    if (whole) record(&uw, y[l], want, 1 + ns[q], 1); /* each product's rounding, n times */        \
                    else record(&up, y[l], want, 1 + fabs(ns[q] * log(x[l])), 4);                                   \
                }                                                                                                   \
            }                                                                                                       \
        report(isa, "exp", &ue, 2);                                                                                 \
        report(isa, "log", &ul, 2);                                                                                 \
        report(isa, "pow (exp, log), per 1+|y|", &up, 4);                                                           \
        report(isa, "pow (squaring), per 1+n", &uw, 1);                                                           \
    }

#define SFX base
#define ATTR
#define VW 2
#include "vec_math.h"
CHECK_ISA("baseline")
#undef SFX
#undef ATTR
#undef VW
#undef VD
#undef VI
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_ADDRESS__)
#define SIMD_X86 1
#define SFX avx2
#define ATTR __attribute__((target("avx2,fma")))
#define VW 4
#include "vec_math.h"
CHECK_ISA("AVX2")
#undef SFX
#undef ATTR
#undef VW
#undef VD
#undef VI
#define SFX avx512
#define ATTR __attribute__((target("avx512f,fma")))
#define VW 8
#include "vec_math.h"
CHECK_ISA("AVX-512F")
#else
#define SIMD_X86 0
#endif

int main(void) {
    check_base();
#if SIMD_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) check_avx2();
    else printf("AVX2: not run by this CPU\n");
    if (__builtin_cpu_supports("avx512f")) check_avx512();
    else printf("AVX-512F: not run by this CPU\n");
#endif
    printf("test_vec_math: %s\n", failures ? "FAILED" : "all checks passed");
    return failures != 0;
}
