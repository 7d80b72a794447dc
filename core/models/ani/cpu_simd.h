/*
 * ANI's float32 networks on x86 SIMD: included by cpu.c once per instruction set, with
 *   SFX (name suffix), ATTR (the target attribute), V (the vector type), VL (floats per vector),
 *   VLOAD, VSTORE (unaligned), VSET1 (broadcast), VFMA(a, b, c) = a·b + c rounded once,
 *   NVP (vectors of atoms per pass), FWV (outputs per pass: FWV × NVP accumulators in registers).
 * The same sums as cpu.c's portable passes with fused multiply-adds (fmaf): each output's sum from
 * its bias over k in order, each input's backward sum over the outputs in order, so every variant
 * and every chunk width gives the same bits. A chunk's atoms are its first n of CHUNK columns; the
 * passes compute the first cw ≥ n columns (cw = VL, 2 VL, … up to CHUNK), so that an element with a
 * few atoms does not pay for a whole chunk.
 */
#define NNP_CAT2(a, b) a##_##b
#define NNP_CAT(a, b) NNP_CAT2(a, b)
#define NNP_FN(name) NNP_CAT(name, SFX)

/* Pre-activations of outputs o .. o + width − 1 for columns a0 .. a0 + nv·VL − 1 into z. */
ATTR static inline __attribute__((always_inline)) void NNP_FN(dense_pass)(const nnp_layer* layer, const float* x, float* z,
                                                                          int32_t o, const int width, const aev_ranges* kr,
                                                                          int32_t a0, const int nv) {
    V acc[FWV][NVP];
    for (int j = 0; j < width; j++)
        for (int v = 0; v < nv; v++) acc[j][v] = VSET1(layer->biases[o + j]);
    const float* w = layer->weights + (size_t)o * layer->n_in;
    const size_t n_in = (size_t)layer->n_in;
    for (int32_t r = 0; r < (kr ? kr->n : 1); r++)
        for (int32_t k = kr ? kr->begin[r] : 0, k1 = kr ? kr->end[r] : layer->n_in; k < k1; k++) {
            const float* xk = x + (size_t)k * CHUNK + a0;
            V xv[NVP];
            for (int v = 0; v < nv; v++) xv[v] = VLOAD(xk + v * VL);
            for (int j = 0; j < width; j++) {
                const V wk = VSET1(w[(size_t)j * n_in + (size_t)k]);
                for (int v = 0; v < nv; v++) acc[j][v] = VFMA(wk, xv[v], acc[j][v]);
            }
        }
    for (int j = 0; j < width; j++)
        for (int v = 0; v < nv; v++) VSTORE(z + (size_t)(o + j) * CHUNK + a0 + v * VL, acc[j][v]);
}

ATTR static inline __attribute__((always_inline)) void NNP_FN(dense_layer)(const nnp_layer* layer, const float* x, float* z,
                                                                           const aev_ranges* kr, int32_t cw, const int nv) {
    for (int32_t a0 = 0; a0 < cw; a0 += nv * VL) {
        int32_t o = 0;
        for (; o + FWV <= layer->n_out; o += FWV) NNP_FN(dense_pass)(layer, x, z, o, FWV, kr, a0, nv);
        if (o + 8 <= layer->n_out) NNP_FN(dense_pass)(layer, x, z, o, 8, kr, a0, nv), o += 8;
        if (o + 4 <= layer->n_out) NNP_FN(dense_pass)(layer, x, z, o, 4, kr, a0, nv), o += 4;
        for (; o < layer->n_out; o++) NNP_FN(dense_pass)(layer, x, z, o, 1, kr, a0, nv);
    }
}

ATTR static void NNP_FN(network_forward_f)(const nnp_network* net, workspace* ws, int32_t n, double* out, const aev_ranges* kr) {
    const int32_t cw = n <= VL ? VL : n <= 2 * VL ? 2 * VL : CHUNK;
    for (int32_t l = 0; l < net->n_layers; l++) {
        const nnp_layer* layer = &net->layers[l];
        float* z = ws->pref[l];
        float* y = ws->actf[l + 1];
        const aev_ranges* r = l == 0 ? kr : NULL; /* the first layer: only the AEV features that can be non-zero */
        if (cw >= NVP * VL) NNP_FN(dense_layer)(layer, ws->actf[l], z, r, cw, NVP);
        else NNP_FN(dense_layer)(layer, ws->actf[l], z, r, cw, 1);
        for (int32_t o = 0; o < layer->n_out; o++)
            for (int32_t a = 0; a < cw; a++) y[(size_t)o * CHUNK + a] = activate_f(layer->activation, z[(size_t)o * CHUNK + a]);
    }
    for (int32_t a = 0; a < n; a++) out[a] = ws->actf[net->n_layers][a];
}

/* dE/d(inputs k .. k + width − 1) of columns a0 .. a0 + nv·VL − 1 over all outputs in order, from the
   outputs' deltas d; added to gin (the first layer: dE/dAEV summed over the members) or stored. */
ATTR static inline __attribute__((always_inline)) void NNP_FN(backward_pass)(const nnp_layer* layer, const float* d, float* gin,
                                                                             int32_t k, const int width, int add,
                                                                             int32_t a0, const int nv) {
    V s[FWV][NVP];
    for (int j = 0; j < width; j++)
        for (int v = 0; v < nv; v++) s[j][v] = add ? VLOAD(gin + (size_t)(k + j) * CHUNK + a0 + v * VL) : VSET1(0.f);
    const size_t n_in = (size_t)layer->n_in;
    const float* w = layer->weights + k;
    for (int32_t o = 0; o < layer->n_out; o++) {
        V dv[NVP];
        for (int v = 0; v < nv; v++) dv[v] = VLOAD(d + (size_t)o * CHUNK + a0 + v * VL);
        const float* wo = w + (size_t)o * n_in;
        for (int j = 0; j < width; j++) {
            const V wk = VSET1(wo[j]);
            for (int v = 0; v < nv; v++) s[j][v] = VFMA(dv[v], wk, s[j][v]);
        }
    }
    for (int j = 0; j < width; j++)
        for (int v = 0; v < nv; v++) VSTORE(gin + (size_t)(k + j) * CHUNK + a0 + v * VL, s[j][v]);
}

ATTR static inline __attribute__((always_inline)) void NNP_FN(backward_layer)(const nnp_layer* layer, const float* d, float* gin,
                                                                              const aev_ranges* r, int add, int32_t cw, const int nv) {
    for (int32_t a0 = 0; a0 < cw; a0 += nv * VL)
        for (int32_t q = 0; q < (r ? r->n : 1); q++) {
            int32_t k = r ? r->begin[q] : 0;
            const int32_t k1 = r ? r->end[q] : layer->n_in;
            for (; k + FWV <= k1; k += FWV) NNP_FN(backward_pass)(layer, d, gin, k, FWV, add, a0, nv);
            if (k + 8 <= k1) NNP_FN(backward_pass)(layer, d, gin, k, 8, add, a0, nv), k += 8;
            if (k + 4 <= k1) NNP_FN(backward_pass)(layer, d, gin, k, 4, add, a0, nv), k += 4;
            for (; k < k1; k++) NNP_FN(backward_pass)(layer, d, gin, k, 1, add, a0, nv);
        }
}

/* After the forward pass: adds scale · d(output)/d(AEV) to daev. Each layer's deltas (into the
   pre-activation buffers, which the backward pass does not need) first, then each input's sum over
   the outputs held in registers. */
ATTR static void NNP_FN(network_backward_f)(const nnp_network* net, workspace* ws, int32_t n, float scale, float* daev,
                                            const aev_ranges* kr) {
    const int32_t cw = n <= VL ? VL : n <= 2 * VL ? 2 * VL : CHUNK;
    float* g = ws->grad_af;
    float* h = ws->grad_bf;
    for (int32_t a = 0; a < CHUNK; a++) g[a] = a < n ? scale : 0.f;
    for (int32_t l = net->n_layers - 1; l >= 0; l--) {
        const nnp_layer* layer = &net->layers[l];
        const float* yl = ws->actf[l + 1]; /* the layer's outputs: the activation's derivative from them */
        float* d = ws->pref[l];
        for (int32_t o = 0; o < layer->n_out; o++)
            for (int32_t a = 0; a < cw; a++) {
                const size_t at = (size_t)o * CHUNK + (size_t)a;
                d[at] = a < n ? g[at] * activate_deriv_from_output_f(layer->activation, yl[at]) : 0.f;
            }
        float* gin = l == 0 ? daev : h;
        const aev_ranges* r = l == 0 ? kr : NULL; /* dE/dAEV of features that are always 0 is not needed */
        if (cw >= NVP * VL) NNP_FN(backward_layer)(layer, d, gin, r, l == 0, cw, NVP);
        else NNP_FN(backward_layer)(layer, d, gin, r, l == 0, cw, 1);
        float* t = g;
        g = h;
        h = t;
    }
}

#undef NNP_FN
#undef NNP_CAT
#undef NNP_CAT2
/* the parameters, so that the next inclusion defines its own */
#undef SFX
#undef ATTR
#undef V
#undef VL
#undef NVP
#undef FWV
#undef VLOAD
#undef VSTORE
#undef VSET1
#undef VFMA
