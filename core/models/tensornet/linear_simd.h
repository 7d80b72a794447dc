/*
 * TensorNet's linears on x86 SIMD, for the CPU evaluation with radial tables: included by
 * tensornet.c once per instruction set, with
 *   SFX (name suffix), ATTR (the target attribute), V (the vector type), VL (doubles per vector),
 *   VLOAD, VSTORE (unaligned), VSET1 (broadcast), VFMA(a, b, c) = a·b + c rounded once.
 * tn_mac: y_v[o] += Σ_k M[k · n_out + o] · x_v[k] for nv ≤ TN_MAC_COLS vectors v, each output's sum
 * from its value over k in order with fused multiply-adds, whatever the block it falls in: so every
 * variant gives the same bits. The nv vectors share each load of M (a channel linear applies one
 * matrix to the 1, 3 or 6 components of a part), their sums stay in registers over all k.
 */
#define TN_CAT2(a, b) a##_##b
#define TN_CAT(a, b) TN_CAT2(a, b)
#define TN_FN(name) TN_CAT(name, SFX)

/* Outputs o .. o + B·VL − 1 of the nv vectors. */
ATTR static inline __attribute__((always_inline)) void TN_FN(mac_block)(const double* M, int32_t n_k, int32_t n_out,
                                                                      int32_t o, const int B, const int nv,
                                                                      const double* const* x, double* const* y) {
    V acc[TN_MAC_COLS][4];
    for (int v = 0; v < nv; v++)
        for (int b = 0; b < B; b++) acc[v][b] = VLOAD(y[v] + o + b * VL);
    for (int32_t k = 0; k < n_k; k++) {
        const double* mk = M + (size_t)k * (size_t)n_out + (size_t)o;
        V w[4];
        for (int b = 0; b < B; b++) w[b] = VLOAD(mk + b * VL);
        for (int v = 0; v < nv; v++) {
            const V xv = VSET1(x[v][k]);
            for (int b = 0; b < B; b++) acc[v][b] = VFMA(w[b], xv, acc[v][b]);
        }
    }
    for (int v = 0; v < nv; v++)
        for (int b = 0; b < B; b++) VSTORE(y[v] + o + b * VL, acc[v][b]);
}

/* Blocks of 4 vectors of outputs for one or two inputs, 2 for more (at most 12 sums in registers),
   then single vectors, then the last outputs one by one. */
ATTR static inline __attribute__((always_inline)) void TN_FN(mac_nv)(const double* M, int32_t n_k, int32_t n_out,
                                                                   const int nv, const double* const* x,
                                                                   double* const* y) {
    int32_t o = 0;
    if (nv <= 2)
        for (; o + 4 * VL <= n_out; o += 4 * VL) TN_FN(mac_block)(M, n_k, n_out, o, 4, nv, x, y);
    for (; o + 2 * VL <= n_out; o += 2 * VL) TN_FN(mac_block)(M, n_k, n_out, o, 2, nv, x, y);
    for (; o + VL <= n_out; o += VL) TN_FN(mac_block)(M, n_k, n_out, o, 1, nv, x, y);
    for (; o < n_out; o++)
        for (int v = 0; v < nv; v++) {
            double a = y[v][o];
            for (int32_t k = 0; k < n_k; k++) a = fma(M[(size_t)k * (size_t)n_out + (size_t)o], x[v][k], a);
            y[v][o] = a;
        }
}

ATTR static void TN_FN(tn_mac)(const double* M, int32_t n_k, int32_t n_out, int nv, const double* const* x,
                               double* const* y) {
    switch (nv) {
    case 1: TN_FN(mac_nv)(M, n_k, n_out, 1, x, y); break;
    case 2: TN_FN(mac_nv)(M, n_k, n_out, 2, x, y); break;
    case 3: TN_FN(mac_nv)(M, n_k, n_out, 3, x, y); break;
    case 4: TN_FN(mac_nv)(M, n_k, n_out, 4, x, y); break;
    case 5: TN_FN(mac_nv)(M, n_k, n_out, 5, x, y); break;
    default: TN_FN(mac_nv)(M, n_k, n_out, 6, x, y); break;
    }
}

#undef TN_FN
#undef TN_CAT
#undef TN_CAT2
#undef SFX
#undef ATTR
#undef V
#undef VL
#undef VLOAD
#undef VSTORE
#undef VSET1
#undef VFMA
