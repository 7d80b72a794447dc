/*
 * Float64 vector maths on GCC's vector extensions, for the float32 evaluation's AEV (aev_simd.h):
 * exp, log and pow without library calls, so that a vector of pairs is computed at once. Included
 * once per instruction set with SFX (name suffix), ATTR (the target attribute) and VW (doubles per
 * vector) defined; defines the types VD and VI (VW doubles, VW 64-bit integers) and NNP_FN(name) =
 * name_SFX, which the includer undefines with SFX, ATTR and VW when done. test_vec_math checks
 * these against the C library.
 */
#ifndef NNP_FN
#define NNP_CAT2(a, b) a##_##b
#define NNP_CAT(a, b) NNP_CAT2(a, b)
#define NNP_FN(name) NNP_CAT(name, SFX)
#endif

typedef double NNP_FN(vd) __attribute__((vector_size(VW * 8)));
typedef int64_t NNP_FN(vi) __attribute__((vector_size(VW * 8)));
#define VD NNP_FN(vd)
#define VI NNP_FN(vi)

ATTR static inline __attribute__((always_inline)) VD NNP_FN(vload)(const double* p) {
    VD v;
    memcpy(&v, p, sizeof v);
    return v;
}
ATTR static inline __attribute__((always_inline)) void NNP_FN(vstore)(double* p, VD v) { memcpy(p, &v, sizeof v); }
ATTR static inline __attribute__((always_inline)) VD NNP_FN(vset1)(double s) { return (VD){0} + s; }

/* exp(x) for x <= 0: x = j ln2 + r (Cody-Waite, |r| <= ln2/2), exp(r) by its Taylor series to r^13
   (truncation below 5e-18 relative), times 2^j built in the exponent field; 0 below -708. j is
   rounded by adding 1.5·2^52, whose low bits then hold it. Within 2 ulp of exp. */
ATTR static inline __attribute__((always_inline)) VD NNP_FN(vexp)(VD x) {
    const VI keep = x >= -708.0;
    x = (VD)((VI)x & keep); /* below -708: computed at 0, then masked */
    const double shifter = 6755399441055744.0; /* 1.5 · 2^52 */
    const VD t = x * 1.4426950408889634 + shifter;
    const VD j = t - shifter;
    VD r = x - j * 0.693147180369123816490;
    r = r - j * 1.90821492927058770002e-10;
    VD p = NNP_FN(vset1)(1.0 / 6227020800.0);
    static const double inv_fact[13] = {1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0,
                                        1.0 / 5040.0,      1.0 / 720.0,      1.0 / 120.0,      1.0 / 24.0,     1.0 / 6.0,
                                        0.5,               1.0,              1.0};
    for (int k = 0; k < 13; k++) p = p * r + inv_fact[k];
    VI t_bits;
    memcpy(&t_bits, &t, sizeof t_bits);
    int64_t shifter_bits;
    memcpy(&shifter_bits, &shifter, sizeof shifter_bits);
    const VI scale_bits = (t_bits - shifter_bits + 1023) << 52;
    VD scale;
    memcpy(&scale, &scale_bits, sizeof scale);
    return (VD)((VI)(p * scale) & keep);
}

/* log(x) for normal x > 0: x = 2^e m with m in [√½, √2), log m = 2 atanh(s), s = (m − 1)/(m + 1)
   (|s| <= 0.172), by its series to s^23 (truncation below 2e-18); e ln2 in two parts. */
ATTR static inline __attribute__((always_inline)) VD NNP_FN(vlog)(VD x) {
    VI bits;
    memcpy(&bits, &x, sizeof bits);
    VI e = ((bits >> 52) & 0x7ff) - 1023;
    const VI mant = (bits & 0x000fffffffffffffLL) | 0x3ff0000000000000LL; /* m in [1, 2) */
    VD m;
    memcpy(&m, &mant, sizeof m);
    const VI big = m > 1.4142135623730951;
    m = m - (VD)((VI)(m * 0.5) & big); /* m / 2 where m > √2: m − m/2 */
    e = e - big;                       /* big is −1 where true */
    /* e as a double without a conversion instruction: in the low bits of 1.5·2^52 */
    const double shifter = 6755399441055744.0;
    int64_t shifter_bits;
    memcpy(&shifter_bits, &shifter, sizeof shifter_bits);
    const VI e_bits = e + shifter_bits;
    VD ed;
    memcpy(&ed, &e_bits, sizeof ed);
    ed = ed - shifter;
    const VD s = (m - 1.0) / (m + 1.0), s2 = s * s;
    VD q = NNP_FN(vset1)(1.0 / 23);
    for (int k = 21; k >= 1; k -= 2) q = q * s2 + 1.0 / k;
    return ed * 0.693147180369123816490 + (2 * s * q + ed * 1.90821492927058770002e-10);
}

/* base^n for base in [0, 1]: repeated squaring when whole (n >= 0), else exp(n log base) (0 at 0). */
ATTR static inline __attribute__((always_inline)) VD NNP_FN(vpow)(VD base, double n, int whole) {
    if (whole) {
        VD r = NNP_FN(vset1)(1.0), x = base;
        for (int32_t k = (int32_t)n; k > 0; k >>= 1, x = x * x)
            if (k & 1) r = r * x;
        return r;
    }
    const VI pos = base >= 2.2250738585072014e-308;
    const VD safe = (VD)(((VI)base & pos) | ((VI)NNP_FN(vset1)(1.0) & ~pos));
    return (VD)((VI)NNP_FN(vexp)(n * NNP_FN(vlog)(safe)) & pos);
}

