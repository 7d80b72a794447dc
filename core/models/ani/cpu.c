/*
 * ANI's CPU evaluation in double precision: the readable specification of the maths.
 *
 * For atom i of element s_i, with neighbours j in the same batch (r_ij = r_j − r_i, d_ij = |r_ij|):
 *   fc(d)      = ½ cos(π d / Rc) + ½  for d ≤ Rc, else 0
 *   radial     G[s_j, η, μ]       += ¼ exp(−η (d_ij − μ)²) fc_Rcr(d_ij)
 *   angular    G[s_j s_k, η, ζ, μ, θs] += 2 ((1 + cos(θ_ijk − θs)) / 2)^ζ
 *                                          · exp(−η ((d_ij + d_ik)/2 − μ)²) fc_Rca(d_ij) fc_Rca(d_ik)
 *              for each unordered neighbour pair j < k, θ_ijk = acos(0.95 cos∠(r_ij, r_ik))
 * (TorchANI's AEV, including its 0.95 factor inside acos and its term ordering.)
 * Atomic energy e_i = network_{s_i}(G_i) (layers W x + b, CELU(α=0.1) on hidden layers),
 * averaged over the ensemble (or one member). Batch energy E_b = Σ_{i∈b} (e_i + self_energy(s_i)).
 * Forces are the analytic −dE/dr: network backprop to dE/dG, then the AEV derivatives.
 */
#include "ani.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#define NNP_PI 3.14159265358979323846
#define CHUNK 32 /* atoms of one element pushed through a network together (weights stay in cache) */

/* A chunk of the evaluation: up to CHUNK atoms of one element. */
typedef struct nnp_chunk {
    int32_t element, first, count; /* atoms by_element[first .. first+count) */
} nnp_chunk;

#define NNP_FC_CACHE 256 /* neighbours whose cutoff values an atom's AEV keeps (the rest computed per pair) */
static double cutoff_fn(double d, double rc) { return 0.5 * cos(NNP_PI * d / rc) + 0.5; }
static double cutoff_deriv(double d, double rc) { return -0.5 * NNP_PI / rc * sin(NNP_PI * d / rc); }

/* ------------------------------------------------------------------ AEV */

/* The float32 evaluation's angular factors (aev_simd.h), in float64 but without acos, cos, sin and
   pow: cos(θ − s) and sin(θ − s) from cos θ = 0.95 c and sin θ = √(1 − cos²θ) (θ = acos(0.95 c) is in
   [0, π], so sin θ ≥ 0), and a whole ζ by repeated squaring. The same values up to rounding (a few
   ulp); Reference and the float64 CPU evaluation keep the library functions (angular_f1). */
typedef struct angular_fast {
    int zeta_whole;          /* every ζ a whole number in 1 .. 1024 */
    double cos_s[NNP_MAX_TERMS], sin_s[NNP_MAX_TERMS]; /* of each ShfZ */
} angular_fast;

static void angular_fast_of(const nnp_aev_params* p, angular_fast* f) {
    f->zeta_whole = 1;
    for (int32_t z = 0; z < p->nZeta; z++) f->zeta_whole &= p->Zeta[z] == floor(p->Zeta[z]) && p->Zeta[z] >= 1 && p->Zeta[z] <= 1024;
    for (int32_t sz = 0; sz < p->nShfZ; sz++) f->cos_s[sz] = cos(p->ShfZ[sz]), f->sin_s[sz] = sin(p->ShfZ[sz]);
}

/* f1 = ((1 + cos(θ − s)) / 2)^ζ for every (ζ, s), and with df1 (not NULL) its derivative in θ. */
static inline void angular_f1(const nnp_aev_params* p, double theta, double* f1v, double* df1v) {
    for (int32_t z = 0; z < p->nZeta; z++)
        for (int32_t sz = 0; sz < p->nShfZ; sz++) {
            double base = 0.5 * (1 + cos(theta - p->ShfZ[sz]));
            f1v[z * p->nShfZ + sz] = pow(base, p->Zeta[z]);
            if (df1v) df1v[z * p->nShfZ + sz] = p->Zeta[z] * pow(base, p->Zeta[z] - 1) * (-0.5 * sin(theta - p->ShfZ[sz]));
        }
}

/* AEV of atom i: aev has aev_length entries, zeroed by the caller. */
static void compute_aev(const nnp_model* model, const nnp_plan* plan, const nnp_neighbors* nl, int32_t i, double* aev) {
    const nnp_ani* ani = nnp_ani_of(model);
    const nnp_aev_params* p = &ani->aev;
    const nnp_neighbor* nb = &nl->items[nl->start[i]];
    int32_t nn = nl->start[i + 1] - nl->start[i];
    for (int32_t a = 0; a < nn; a++) {
        double d = nb[a].d, fc = cutoff_fn(d, p->Rcr);
        double* out = aev + plan->elements[nb[a].j] * ani->radial_sub;
        for (int32_t e = 0; e < p->nEtaR; e++)
            for (int32_t s = 0; s < p->nShfR; s++) {
                double x = d - p->ShfR[s];
                out[e * p->nShfR + s] += 0.25 * exp(-p->EtaR[e] * x * x) * fc;
            }
    }
    double fca[NNP_FC_CACHE]; /* each neighbour's angular cutoff once, not once per pair (the same values) */
    for (int32_t a = 0; a < nn && a < NNP_FC_CACHE; a++) fca[a] = nb[a].d > p->Rca ? 0 : cutoff_fn(nb[a].d, p->Rca);
    for (int32_t a = 0; a < nn; a++) {
        if (nb[a].d > p->Rca) continue;
        for (int32_t b = a + 1; b < nn; b++) {
            if (nb[b].d > p->Rca) continue;
            const double *u = nb[a].r, *v = nb[b].r;
            double dj = nb[a].d, dk = nb[b].d;
            double c = (u[0] * v[0] + u[1] * v[1] + u[2] * v[2]) / fmax(dj * dk, 1e-10);
            double theta = acos(0.95 * c);
            double fcjk = (a < NNP_FC_CACHE ? fca[a] : cutoff_fn(dj, p->Rca)) * (b < NNP_FC_CACHE ? fca[b] : cutoff_fn(dk, p->Rca));
            double avg = 0.5 * (dj + dk);
            double* out = aev + ani->radial_length +
                          ani->pair_index[plan->elements[nb[a].j]][plan->elements[nb[b].j]] * ani->angular_sub;
            /* each factor once per pair (the same expressions, so the same values) */
            double f1v[p->nZeta * p->nShfZ], f2v[p->nEtaA * p->nShfA];
            angular_f1(p, theta, f1v, NULL);
            for (int32_t ea = 0; ea < p->nEtaA; ea++)
                for (int32_t sa = 0; sa < p->nShfA; sa++) {
                    double x = avg - p->ShfA[sa];
                    f2v[ea * p->nShfA + sa] = exp(-p->EtaA[ea] * x * x);
                }
            int32_t t = 0;
            for (int32_t ea = 0; ea < p->nEtaA; ea++)
                for (int32_t z = 0; z < p->nZeta; z++)
                    for (int32_t sa = 0; sa < p->nShfA; sa++) {
                        const double f2 = f2v[ea * p->nShfA + sa];
                        for (int32_t sz = 0; sz < p->nShfZ; sz++, t++) out[t] += 2 * f1v[z * p->nShfZ + sz] * f2 * fcjk;
                    }
        }
    }
}

/* dE/dr of atom i's AEV, given g = dE/dAEV, into local (Hartree/Å): slot 0 (3 values) for atom i
   itself, slot 1 + a for its neighbour a. local must be zeroed by the caller. */
static void aev_backward(const nnp_model* model, const nnp_plan* plan, const nnp_neighbors* nl, int32_t i, const double* g,
                         double* local) {
    const nnp_ani* ani = nnp_ani_of(model);
    const nnp_aev_params* p = &ani->aev;
    const nnp_neighbor* nb = &nl->items[nl->start[i]];
    int32_t nn = nl->start[i + 1] - nl->start[i];
    for (int32_t a = 0; a < nn; a++) {
        double d = nb[a].d, fc = cutoff_fn(d, p->Rcr), dfc = cutoff_deriv(d, p->Rcr);
        const double* gr = g + plan->elements[nb[a].j] * ani->radial_sub;
        double s_d = 0; /* dE/dd */
        for (int32_t e = 0; e < p->nEtaR; e++)
            for (int32_t s = 0; s < p->nShfR; s++) {
                double x = d - p->ShfR[s];
                double ex = exp(-p->EtaR[e] * x * x);
                s_d += gr[e * p->nShfR + s] * 0.25 * ex * (-2 * p->EtaR[e] * x * fc + dfc);
            }
        for (int k = 0; k < 3; k++) {
            double f = s_d * nb[a].r[k] / d;
            local[3 * (1 + a) + k] += f;
            local[k] -= f;
        }
    }
    double fca[NNP_FC_CACHE], dfca[NNP_FC_CACHE]; /* each neighbour's angular cutoff and its derivative once */
    for (int32_t a = 0; a < nn && a < NNP_FC_CACHE; a++)
        fca[a] = nb[a].d > p->Rca ? 0 : cutoff_fn(nb[a].d, p->Rca), dfca[a] = nb[a].d > p->Rca ? 0 : cutoff_deriv(nb[a].d, p->Rca);
    for (int32_t a = 0; a < nn; a++) {
        if (nb[a].d > p->Rca) continue;
        for (int32_t b = a + 1; b < nn; b++) {
            if (nb[b].d > p->Rca) continue;
            const double *u = nb[a].r, *v = nb[b].r;
            double dj = nb[a].d, dk = nb[b].d;
            double denom = fmax(dj * dk, 1e-10);
            double c = (u[0] * v[0] + u[1] * v[1] + u[2] * v[2]) / denom;
            double theta = acos(0.95 * c);
            double fj = a < NNP_FC_CACHE ? fca[a] : cutoff_fn(dj, p->Rca), fk = b < NNP_FC_CACHE ? fca[b] : cutoff_fn(dk, p->Rca);
            double dfj = a < NNP_FC_CACHE ? dfca[a] : cutoff_deriv(dj, p->Rca), dfk = b < NNP_FC_CACHE ? dfca[b] : cutoff_deriv(dk, p->Rca);
            double avg = 0.5 * (dj + dk);
            const double* ga = g + ani->radial_length +
                               ani->pair_index[plan->elements[nb[a].j]][plan->elements[nb[b].j]] * ani->angular_sub;
            double s_theta = 0, s_dj = 0, s_dk = 0;
            /* each factor once per pair (the same expressions, so the same values) */
            double f1v[p->nZeta * p->nShfZ], df1v[p->nZeta * p->nShfZ], f2v[p->nEtaA * p->nShfA], df2v[p->nEtaA * p->nShfA];
            angular_f1(p, theta, f1v, df1v);
            for (int32_t ea = 0; ea < p->nEtaA; ea++)
                for (int32_t sa = 0; sa < p->nShfA; sa++) {
                    double x = avg - p->ShfA[sa];
                    double f2 = exp(-p->EtaA[ea] * x * x);
                    f2v[ea * p->nShfA + sa] = f2;
                    df2v[ea * p->nShfA + sa] = f2 * (-2 * p->EtaA[ea] * x) * 0.5; /* d f2 / d dj = d f2 / d dk */
                }
            int32_t t = 0;
            for (int32_t ea = 0; ea < p->nEtaA; ea++)
                for (int32_t z = 0; z < p->nZeta; z++)
                    for (int32_t sa = 0; sa < p->nShfA; sa++) {
                        const double f2 = f2v[ea * p->nShfA + sa], df2 = df2v[ea * p->nShfA + sa];
                        for (int32_t sz = 0; sz < p->nShfZ; sz++, t++) {
                            const double f1 = f1v[z * p->nShfZ + sz], df1 = df1v[z * p->nShfZ + sz];
                            double w = ga[t];
                            s_theta += w * 2 * df1 * f2 * fj * fk;
                            s_dj += w * 2 * f1 * (df2 * fj * fk + f2 * dfj * fk);
                            s_dk += w * 2 * f1 * (df2 * fj * fk + f2 * fj * dfk);
                        }
                    }
            double s_c = s_theta * (-0.95 / sqrt(1 - 0.95 * c * 0.95 * c));
            for (int k = 0; k < 3; k++) {
                double dc_du = v[k] / denom - c * u[k] / (dj * dj);
                double dc_dv = u[k] / denom - c * v[k] / (dk * dk);
                double gu = s_dj * u[k] / dj + s_c * dc_du;
                double gv = s_dk * v[k] / dk + s_c * dc_dv;
                local[3 * (1 + a) + k] += gu;
                local[3 * (1 + b) + k] += gv;
                local[k] -= gu + gv;
            }
        }
    }
}

/* The float32 evaluation's AEV on SIMD (aev_simd.h): one pair or neighbour per lane, up to
   AEV_LANES lanes; per thread, a term of every lane per AEV block feature (terms) and the angular
   factor vectors (vectors, 64-byte aligned). */
#define AEV_LANES 8
typedef struct aev_buffers {
    double *terms, *vectors;
} aev_buffers;

/* ------------------------------------------------------------------ networks */

/* Activations are stored transposed, feature-major: x[k * CHUNK + a] is feature k of atom a of
   the chunk. The innermost loops then run over the atoms of the chunk, contiguous and independent,
   so they vectorize while every atom's sums keep the plain sequential order (bias, then k = 0, 1, …). */
typedef struct workspace {
    int32_t width;                   /* widest layer or input */
    double* act[NNP_MAX_LAYERS + 1]; /* act[0] = AEVs, act[l+1] = output of layer l; width × CHUNK */
    double* pre[NNP_MAX_LAYERS];     /* pre-activations of layer l */
    double* grad_a;                  /* width × CHUNK */
    double* grad_b;
    double* daev;                    /* width × CHUNK: dE/dAEV of the chunk, all members */
    double* atom;                    /* one atom's AEV or dE/dAEV, width */
    /* float32 (the plan's CPU precision single): the same buffers */
    float *actf[NNP_MAX_LAYERS + 1], *pref[NNP_MAX_LAYERS], *grad_af, *grad_bf, *daevf;
    aev_buffers aevb;                /* the float32 evaluation's AEV (aev_simd.h) */
} workspace;

static double activate(int32_t kind, double z) {
    if (kind == NNP_ACT_CELU) return z > 0 ? z : NNP_CELU_ALPHA * expm1(z / NNP_CELU_ALPHA);
    return z;
}

static double activate_deriv(int32_t kind, double z) {
    if (kind == NNP_ACT_CELU) return z > 0 ? 1 : exp(z / NNP_CELU_ALPHA);
    return 1;
}

/* Forward pass of n atoms (AEVs in ws->act[0]); returns outputs in out[0..n). */
static void network_forward(const nnp_network* net, workspace* ws, int32_t n, double* out) {
    for (int32_t l = 0; l < net->n_layers; l++) {
        const nnp_layer* layer = &net->layers[l];
        const double* x = ws->act[l];
        double* z = ws->pre[l];
        double* y = ws->act[l + 1];
        for (int32_t o = 0; o < layer->n_out; o++) {
            const float* w = layer->weights + (size_t)o * layer->n_in;
            double* zo = z + (size_t)o * CHUNK;
            for (int32_t a = 0; a < n; a++) zo[a] = layer->biases[o];
            for (int32_t k = 0; k < layer->n_in; k++) {
                const double wk = w[k];
                const double* xk = x + (size_t)k * CHUNK;
                for (int32_t a = 0; a < n; a++) zo[a] += wk * xk[a];
            }
            for (int32_t a = 0; a < n; a++) y[(size_t)o * CHUNK + a] = activate(layer->activation, zo[a]);
        }
    }
    for (int32_t a = 0; a < n; a++) out[a] = ws->act[net->n_layers][a];
}

/* Backward pass after network_forward: adds scale · d(output)/d(AEV) to daev (width × CHUNK). */
static void network_backward(const nnp_network* net, workspace* ws, int32_t n, double scale, double* daev) {
    double* g = ws->grad_a; /* dE/d(output of layer l) */
    double* h = ws->grad_b;
    for (int32_t a = 0; a < n; a++) g[a] = scale;
    for (int32_t l = net->n_layers - 1; l >= 0; l--) {
        const nnp_layer* layer = &net->layers[l];
        const double* z = ws->pre[l];
        double* gin = l == 0 ? daev : h;
        if (l > 0) memset(gin, 0, (size_t)layer->n_in * CHUNK * sizeof(double));
        for (int32_t o = 0; o < layer->n_out; o++) {
            const float* w = layer->weights + (size_t)o * layer->n_in;
            double delta[CHUNK];
            for (int32_t a = 0; a < n; a++)
                delta[a] = g[(size_t)o * CHUNK + a] * activate_deriv(layer->activation, z[(size_t)o * CHUNK + a]);
            for (int32_t k = 0; k < layer->n_in; k++) {
                const double wk = w[k];
                double* gk = gin + (size_t)k * CHUNK;
                for (int32_t a = 0; a < n; a++) gk[a] += delta[a] * wk;
            }
        }
        double* t = g;
        g = h;
        h = t;
    }
}

/* The same two passes in float32 (the plan's CPU precision single): float32 activations and sums,
   the inner loops over the chunk's atoms on SIMD; compiled for AVX-512F, AVX2 and the baseline
   (network_forward_f_*, network_backward_f_*), one picked per evaluation (nnp_cpu_simd_level).
   Outputs and dE/dAEV leave in double. */
#define FW 8 /* float32 networks: outputs per register block */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_ADDRESS__)
#define NNP_SIMD_X86 1 /* the AVX-512F and AVX2 variants are compiled */
#else
#define NNP_SIMD_X86 0
#endif
/* expm1(x) for x <= 0 in float32 without a library call, so that the activation loops vectorise:
   x = j ln2 + r (Cody-Waite, |r| <= ln2/2), expm1(r) by its Taylor series to r^8, then
   2^j (1 + expm1(r)) - 1 (the GPU's expm1_nonpositive, within 0.88 ulp over every float <= 0). */
static inline float expm1_nonpositive_f(float x) {
    x = x < -80.f ? -80.f : x;
    const float j = rintf(x * 1.44269504f);
    float r = j * -0.693145751953125f + x;
    r = j * -1.42860677e-6f + r;
    float c = r * (1.f / 40320.f) + 1.f / 5040.f;
    c = r * c + 1.f / 720.f;
    c = r * c + 1.f / 120.f;
    c = r * c + 1.f / 24.f;
    c = r * c + 1.f / 6.f;
    c = r * c + 0.5f;
    const float p = r * r * c + r;
    const uint32_t bits = (uint32_t)((int32_t)j + 127) << 23;
    float s;
    memcpy(&s, &bits, sizeof s);
    return s * p + (s - 1.f);
}
/* CELU(alpha = 0.1) in float32: z/alpha as z * 10 (1/alpha is 10 exactly), and its derivative from
   the output y: exp(z/alpha) = y/alpha + 1. */
static inline float activate_f(int32_t kind, float z) {
    if (kind == NNP_ACT_CELU) return z > 0 ? z : (float)NNP_CELU_ALPHA * expm1_nonpositive_f(z * (float)(1.0 / NNP_CELU_ALPHA));
    return z;
}
static inline float activate_deriv_from_output_f(int32_t kind, float y) {
    if (kind == NNP_ACT_CELU) return y > 0 ? 1.f : y * (float)(1.0 / NNP_CELU_ALPHA) + 1.f;
    return 1.f;
}

/* The AEV features that can be non-zero for a plan: the radial blocks of the elements it has and the
   angular blocks of their pairs, merged into ranges [begin, end) in feature order. The others are
   exactly 0 for every atom, so the float32 first layer leaves them out (the same sums: only terms
   0 · w go). */
#define NNP_MAX_AEV_RANGES (NNP_MAX_ELEMENTS + NNP_MAX_ELEMENTS * (NNP_MAX_ELEMENTS + 1) / 2)
typedef struct aev_ranges {
    int32_t n, begin[NNP_MAX_AEV_RANGES], end[NNP_MAX_AEV_RANGES];
} aev_ranges;
static void aev_ranges_of(const nnp_model* model, const nnp_plan* plan, aev_ranges* r) {
    const nnp_ani* ani = nnp_ani_of(model);
    int32_t count[NNP_MAX_ELEMENTS] = {0};
    for (int32_t i = 0; i < plan->n_atoms; i++) count[plan->elements[i]]++;
    r->n = 0;
    const int32_t E = model->n_elements;
    int keep[NNP_MAX_AEV_RANGES], start[NNP_MAX_AEV_RANGES], size[NNP_MAX_AEV_RANGES], blocks = 0;
    for (int32_t e = 0; e < E; e++) keep[blocks] = count[e] > 0, start[blocks] = e * ani->radial_sub, size[blocks++] = ani->radial_sub;
    int32_t by_index[NNP_MAX_AEV_RANGES] = {0}, n_pairs = 0;
    for (int32_t a = 0; a < E; a++)
        for (int32_t b = a; b < E; b++) {
            by_index[ani->pair_index[a][b]] = count[a] > 0 && count[b] > (a == b ? 1 : 0);
            n_pairs++;
        }
    for (int32_t q = 0; q < n_pairs; q++)
        keep[blocks] = by_index[q], start[blocks] = ani->radial_length + q * ani->angular_sub, size[blocks++] = ani->angular_sub;
    for (int b = 0; b < blocks; b++) {
        if (!keep[b]) continue;
        if (r->n > 0 && r->end[r->n - 1] == start[b]) r->end[r->n - 1] += size[b];
        else r->begin[r->n] = start[b], r->end[r->n] = start[b] + size[b], r->n++;
    }
}

/* Outputs o .. o + width - 1 of a float32 layer for the first cw atoms of a chunk: pre-activations
   into z, activations into y; each output's sum runs over k in order. Always inlined with a constant
   width and cw, so that the accumulators stay in registers. */
static inline __attribute__((always_inline)) void dense_block_f(const nnp_layer* layer, const float* x, float* z, float* y,
                                                                int32_t o, const int width, const aev_ranges* kr, const int cw,
                                                                const int fused) {
    float acc[FW][cw];
    for (int j = 0; j < width; j++)
        for (int32_t a = 0; a < cw; a++) acc[j][a] = layer->biases[o + j];
    const float* w = layer->weights + (size_t)o * layer->n_in;
    for (int32_t r = 0; r < (kr ? kr->n : 1); r++)
        for (int32_t k = kr ? kr->begin[r] : 0, k1 = kr ? kr->end[r] : layer->n_in; k < k1; k++) {
            const float* xk = x + (size_t)k * CHUNK;
            for (int j = 0; j < width; j++) {
                const float wk = w[(size_t)j * layer->n_in + k];
                for (int32_t a = 0; a < cw; a++) acc[j][a] = fused ? fmaf(wk, xk[a], acc[j][a]) : acc[j][a] + wk * xk[a];
            }
        }
    for (int j = 0; j < width; j++) {
        memcpy(z + (size_t)(o + j) * CHUNK, acc[j], sizeof acc[j]);
        for (int32_t a = 0; a < cw; a++) y[(size_t)(o + j) * CHUNK + a] = activate_f(layer->activation, acc[j][a]);
    }
}

/* The chunk's atoms are its first n columns; the passes compute the first cw ≥ n of the CHUNK columns
   (8, 16 or 32: an element with few atoms does not pay for a whole chunk). Every column's sums are the
   same whatever cw, so an atom gets the same bits with any number of atoms of its element. */
static inline __attribute__((always_inline)) void network_forward_f(const nnp_network* net, workspace* ws, int32_t n, double* out,
                                                                      const aev_ranges* kr, const int cw, const int fused) {
    for (int32_t l = 0; l < net->n_layers; l++) {
        const nnp_layer* layer = &net->layers[l];
        const float* x = ws->actf[l];
        float* z = ws->pref[l];
        float* y = ws->actf[l + 1];
        /* FW outputs at a time (independent accumulators in registers), the rest one by one */
        int32_t o = 0;
        const aev_ranges* r = l == 0 ? kr : NULL; /* the first layer: only the AEV features that can be non-zero */
        for (; o + FW <= layer->n_out; o += FW) dense_block_f(layer, x, z, y, o, FW, r, cw, fused);
        for (; o < layer->n_out; o++) dense_block_f(layer, x, z, y, o, 1, r, cw, fused);
    }
    for (int32_t a = 0; a < n; a++) out[a] = ws->actf[net->n_layers][a];
}

static inline __attribute__((always_inline)) void network_backward_f(const nnp_network* net, workspace* ws, int32_t n, float scale,
                                                                       float* daev, const aev_ranges* kr, const int cw,
                                                                       const int fused) {
    float* g = ws->grad_af;
    float* h = ws->grad_bf;
    for (int32_t a = 0; a < CHUNK; a++) g[a] = a < n ? scale : 0.f;
    for (int32_t l = net->n_layers - 1; l >= 0; l--) {
        const nnp_layer* layer = &net->layers[l];
        const float* yl = ws->actf[l + 1]; /* the layer's outputs: the activation's derivative from them */
        float* gin = l == 0 ? daev : h;
        if (l > 0)
            for (int32_t k = 0; k < layer->n_in; k++) memset(gin + (size_t)k * CHUNK, 0, (size_t)cw * sizeof(float));
        /* FW outputs' deltas at a time: one pass over gin per FW outputs instead of per output */
        int32_t o = 0;
        for (; o < layer->n_out; o += FW) {
            const int m = layer->n_out - o < FW ? layer->n_out - o : FW;
            float delta[FW][cw];
            for (int j = 0; j < FW; j++)
                for (int32_t a = 0; a < cw; a++)
                    delta[j][a] = j < m && a < n ? g[(size_t)(o + j) * CHUNK + a] *
                                                       activate_deriv_from_output_f(layer->activation, yl[(size_t)(o + j) * CHUNK + a])
                                                 : 0.f;
            const float* w = layer->weights + (size_t)o * layer->n_in;
            const aev_ranges* r = l == 0 ? kr : NULL; /* dE/dAEV of features that are always 0 is not needed */
            for (int32_t q = 0; q < (r ? r->n : 1); q++)
                for (int32_t k = r ? r->begin[q] : 0, k1 = r ? r->end[q] : layer->n_in; k < k1; k++) {
                    float wk[FW];
                    for (int j = 0; j < FW; j++) wk[j] = j < m ? w[(size_t)j * layer->n_in + k] : 0.f;
                    float* gk = gin + (size_t)k * CHUNK;
                    for (int32_t a = 0; a < cw; a++) {
                        float s = gk[a];
                        for (int j = 0; j < FW; j++) s = fused ? fmaf(delta[j][a], wk[j], s) : s + delta[j][a] * wk[j];
                        gk[a] = s;
                    }
                }
        }
        float* t = g;
        g = h;
        h = t;
    }
}

/* The variants: the same code, compiled for each instruction set. The loops vectorise across the chunk's
   atoms only (each atom's sums in one order), so AVX2 and AVX-512F, which both fuse multiply-adds
   (fmaf), give the same bits; the baseline multiplies and adds apart (test_cpu_single checks both). */
/* The variants. The baseline: the portable passes above, all CHUNK columns, multiplies and adds apart
   (auto-vectorised for the build's baseline, SSE2 on x86-64). AVX2 and AVX-512F: cpu_simd.h with
   fused multiply-adds (intrinsics), which give the bits of the portable passes with fmaf, the same
   for both (test_cpu_single checks the variants). */
static void network_forward_f_baseline(const nnp_network* net, workspace* ws, int32_t n, double* out, const aev_ranges* kr) {
    network_forward_f(net, ws, n, out, kr, CHUNK, 0);
}
static void network_backward_f_baseline(const nnp_network* net, workspace* ws, int32_t n, float scale, float* daev,
                                        const aev_ranges* kr) {
    network_backward_f(net, ws, n, scale, daev, kr, CHUNK, 0);
}
#if NNP_SIMD_X86
#include <immintrin.h>
#define SFX avx2
#define ATTR __attribute__((target("avx2,fma")))
#define V __m256
#define VL 8
#define NVP 1
#define FWV 8
#define VLOAD _mm256_loadu_ps
#define VSTORE _mm256_storeu_ps
#define VSET1 _mm256_set1_ps
#define VFMA _mm256_fmadd_ps
#include "cpu_simd.h"
#define SFX avx512
#define ATTR __attribute__((target("avx512f,fma")))
#define V __m512
#define VL 16
#define NVP 2
#define FWV 12
#define VLOAD _mm512_loadu_ps
#define VSTORE _mm512_storeu_ps
#define VSET1 _mm512_set1_ps
#define VFMA _mm512_fmadd_ps
#include "cpu_simd.h"
#endif

nnp_cpu_simd nnp_cpu_simd_available(void) {
#if NNP_SIMD_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return NNP_CPU_SIMD_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return NNP_CPU_SIMD_AVX2;
#endif
    return NNP_CPU_SIMD_BASELINE;
}

static void network_forward_simd(nnp_cpu_simd simd, const nnp_network* net, workspace* ws, int32_t n, double* out,
                                 const aev_ranges* kr) {
#if NNP_SIMD_X86
    if (simd == NNP_CPU_SIMD_AVX512) return network_forward_f_avx512(net, ws, n, out, kr);
    if (simd == NNP_CPU_SIMD_AVX2) return network_forward_f_avx2(net, ws, n, out, kr);
#endif
    (void)simd;
    network_forward_f_baseline(net, ws, n, out, kr);
}
static void network_backward_simd(nnp_cpu_simd simd, const nnp_network* net, workspace* ws, int32_t n, float scale, float* daev,
                                  const aev_ranges* kr) {
#if NNP_SIMD_X86
    if (simd == NNP_CPU_SIMD_AVX512) return network_backward_f_avx512(net, ws, n, scale, daev, kr);
    if (simd == NNP_CPU_SIMD_AVX2) return network_backward_f_avx2(net, ws, n, scale, daev, kr);
#endif
    (void)simd;
    network_backward_f_baseline(net, ws, n, scale, daev, kr);
}

/* The AEV variants: aev_simd.h for the baseline (two lanes, SSE2 on x86-64), AVX2 (four) and AVX-512F
   (eight), picked with the networks' instruction set. */
#define SFX base
#define ATTR
#define VW 2
#include "aev_simd.h"
#if NNP_SIMD_X86
#define SFX avx2
#define ATTR __attribute__((target("avx2,fma")))
#define VW 4
#include "aev_simd.h"
#define SFX avx512
#define ATTR __attribute__((target("avx512f,fma")))
#define VW 8
#include "aev_simd.h"
#endif

static void compute_aev_simd(nnp_cpu_simd simd, const nnp_model* model, const nnp_plan* plan, const nnp_neighbors* nl,
                             const angular_fast* fast, int32_t i, double* aev, const aev_buffers* ab) {
#if NNP_SIMD_X86
    if (simd == NNP_CPU_SIMD_AVX512) return compute_aev_fast_avx512(model, plan, nl, fast, i, aev, ab);
    if (simd == NNP_CPU_SIMD_AVX2) return compute_aev_fast_avx2(model, plan, nl, fast, i, aev, ab);
#endif
    (void)simd;
    compute_aev_fast_base(model, plan, nl, fast, i, aev, ab);
}

static void aev_backward_simd(nnp_cpu_simd simd, const nnp_model* model, const nnp_plan* plan, const nnp_neighbors* nl,
                              const angular_fast* fast, int32_t i, const double* g, double* local, const aev_buffers* ab) {
#if NNP_SIMD_X86
    if (simd == NNP_CPU_SIMD_AVX512) return aev_backward_fast_avx512(model, plan, nl, fast, i, g, local, ab);
    if (simd == NNP_CPU_SIMD_AVX2) return aev_backward_fast_avx2(model, plan, nl, fast, i, g, local, ab);
#endif
    (void)simd;
    aev_backward_fast_base(model, plan, nl, fast, i, g, local, ab);
}

static void free_workspace(workspace* ws) {
    for (int l = 0; l <= NNP_MAX_LAYERS; l++) free(ws->act[l]);
    for (int l = 0; l < NNP_MAX_LAYERS; l++) free(ws->pre[l]);
    free(ws->grad_a);
    free(ws->grad_b);
    free(ws->daev);
    free(ws->atom);
    for (int l = 0; l <= NNP_MAX_LAYERS; l++) free(ws->actf[l]);
    for (int l = 0; l < NNP_MAX_LAYERS; l++) free(ws->pref[l]);
    free(ws->grad_af);
    free(ws->grad_bf);
    free(ws->daevf);
    free(ws->aevb.terms);
    free(ws->aevb.vectors);
}

static nnp_status alloc_workspace(const nnp_model* model, workspace* ws) {
    memset(ws, 0, sizeof *ws);
    const nnp_ani* ani = nnp_ani_of(model);
    int32_t width = ani->aev_length, layers = 0;
    for (int32_t i = 0; i < model->n_members * model->n_elements; i++) {
        const nnp_network* net = &ani->networks[i];
        if (net->n_layers > layers) layers = net->n_layers;
        for (int32_t l = 0; l < net->n_layers; l++)
            if (net->layers[l].n_out > width) width = net->layers[l].n_out;
    }
    ws->width = width;
    size_t bytes = (size_t)CHUNK * (size_t)width * sizeof(double);
    int ok = 1;
    for (int32_t l = 0; l <= layers; l++) ok = ok && (ws->act[l] = calloc(1, bytes)) != NULL;
    for (int32_t l = 0; l < layers; l++) ok = ok && (ws->pre[l] = calloc(1, bytes)) != NULL;
    ok = ok && (ws->grad_a = calloc(1, bytes)) != NULL && (ws->grad_b = calloc(1, bytes)) != NULL &&
         (ws->daev = calloc(1, bytes)) != NULL && (ws->atom = calloc((size_t)width, sizeof(double))) != NULL;
    const size_t fbytes = (size_t)CHUNK * (size_t)width * sizeof(float);
    for (int32_t l = 0; l <= layers; l++) ok = ok && (ws->actf[l] = calloc(1, fbytes)) != NULL;
    for (int32_t l = 0; l < layers; l++) ok = ok && (ws->pref[l] = calloc(1, fbytes)) != NULL;
    ok = ok && (ws->grad_af = calloc(1, fbytes)) != NULL && (ws->grad_bf = calloc(1, fbytes)) != NULL &&
         (ws->daevf = calloc(1, fbytes)) != NULL;
    const nnp_aev_params* p = &ani->aev;
    const size_t sub = (size_t)(ani->radial_sub > ani->angular_sub ? ani->radial_sub : ani->angular_sub);
    /* + 1: never a request of 0 bytes (a model without angular terms), which may return NULL */
    const size_t vbytes = ((size_t)2 * (p->nZeta * p->nShfZ + p->nEtaA * p->nShfA) * AEV_LANES * sizeof(double) + 1 + 63) / 64 * 64;
    ok = ok && (ws->aevb.terms = calloc(sub * AEV_LANES + 1, sizeof(double))) != NULL &&
         (ws->aevb.vectors = aligned_alloc(64, vbytes)) != NULL;
    if (!ok) {
        free_workspace(ws);
        return nnp_fail(NNP_ERR_MEMORY, "out of memory for the network workspace");
    }
    return NNP_OK;
}

/* ------------------------------------------------------------------ evaluation */

/*
 * Work is split into chunks of up to CHUNK atoms of one element, in a fixed order (element, then
 * atom index). Threads take chunks from a shared counter; each chunk writes only its own atoms'
 * energies and its own slots of per-atom force contributions (`local`). The contributions are then
 * added to the forces by one thread in chunk order, so the result is the same for any number of
 * threads, and the same for a molecule alone or among other batches.
 */
typedef struct eval_job {
    const nnp_model* model;
    const nnp_plan* plan;
    const nnp_neighbors* nl;
    const int32_t* order;      /* atoms sorted by element, index order within */
    const nnp_chunk* chunks;
    int32_t n_chunks;
    int32_t m_first, m_last;
    int with_forces;
    int single;                /* float32 networks (the plan's CPU precision) */
    nnp_cpu_simd simd;         /* their instruction set (not AUTO) */
    aev_ranges kept;           /* the AEV features that can be non-zero (aev_ranges_of) */
    angular_fast fast;         /* the float32 evaluation's angular factors (angular_fast_of) */
    double* atom_e;            /* per atom, network energy (Hartree) */
    double* local;             /* per atom i: 3 × (1 + neighbours) values, from local_start[i] */
    const size_t* local_start;
    atomic_int next;
    workspace* ws;             /* one per thread */
} eval_job;

static void run_chunks(eval_job* job, workspace* ws) {
    const nnp_model* model = job->model;
    const nnp_ani* ani = nnp_ani_of(model);
    const size_t A = (size_t)ani->aev_length;
    const double scale = 1.0 / (job->m_last - job->m_first);
    double out[CHUNK];
    for (;;) {
        int32_t ci = atomic_fetch_add(&job->next, 1);
        if (ci >= job->n_chunks) break;
        const nnp_chunk* ch = &job->chunks[ci];
        const int32_t* atoms = job->order + ch->first;
        const int single = job->single;
        for (int32_t a = 0; a < ch->count; a++) {
            memset(ws->atom, 0, A * sizeof(double));
            if (single) compute_aev_simd(job->simd, model, job->plan, job->nl, &job->fast, atoms[a], ws->atom, &ws->aevb);
            else compute_aev(model, job->plan, job->nl, atoms[a], ws->atom);
            /* float32: features below FLT_MIN (far Gaussian tails) become 0, not subnormal floats, whose
               multiplications x86 cores take a slow microcode path for (10 drug-like molecules: the
               forward pass 2.4x slower than the backward); each term they drop is below the sums' rounding */
            if (single)
                for (size_t k = 0; k < A; k++) ws->actf[0][k * CHUNK + (size_t)a] = fabs(ws->atom[k]) < FLT_MIN ? 0.f : (float)ws->atom[k];
            else
                for (size_t k = 0; k < A; k++) ws->act[0][k * CHUNK + (size_t)a] = ws->atom[k];
        }
        if (single) /* the unused columns of a partial chunk stay zero: the SIMD loops run over all CHUNK */
            for (size_t k = 0; k < A; k++)
                for (int32_t a = ch->count; a < CHUNK; a++) ws->actf[0][k * CHUNK + (size_t)a] = 0.f;
        if (job->with_forces) memset(ws->daev, 0, A * CHUNK * sizeof(double));
        if (job->with_forces && single) memset(ws->daevf, 0, A * CHUNK * sizeof(float));
        for (int32_t m = job->m_first; m < job->m_last; m++) {
            const nnp_network* net = &ani->networks[m * model->n_elements + ch->element];
            if (single) network_forward_simd(job->simd, net, ws, ch->count, out, &job->kept);
            else network_forward(net, ws, ch->count, out);
            for (int32_t a = 0; a < ch->count; a++) job->atom_e[atoms[a]] += out[a] * scale;
            if (job->with_forces && single) network_backward_simd(job->simd, net, ws, ch->count, (float)scale, ws->daevf, &job->kept);
            else if (job->with_forces) network_backward(net, ws, ch->count, scale, ws->daev);
        }
        if (job->with_forces)
            for (int32_t a = 0; a < ch->count; a++) {
                if (single)
                    for (size_t k = 0; k < A; k++) ws->atom[k] = ws->daevf[k * CHUNK + (size_t)a];
                else
                    for (size_t k = 0; k < A; k++) ws->atom[k] = ws->daev[k * CHUNK + (size_t)a];
                if (single)
                    aev_backward_simd(job->simd, model, job->plan, job->nl, &job->fast, atoms[a], ws->atom,
                                      job->local + job->local_start[atoms[a]], &ws->aevb);
                else
                    aev_backward(model, job->plan, job->nl, atoms[a], ws->atom, job->local + job->local_start[atoms[a]]);
            }
    }
}

typedef struct worker_arg {
    eval_job* job;
    workspace* ws;
} worker_arg;

static void* worker_main(void* arg) {
    worker_arg* w = arg;
    run_chunks(w->job, w->ws);
    return NULL;
}

/* ANI's CPU evaluation (the family's evaluate_cpu): pos and box in Å, energies in Hartree. */
nnp_status nnp_ani_evaluate_cpu(nnp_plan* plan, const double* pos, const double* box, double* atom_energy,
                                double* batch_energy, double* grad_out) {
    (void)batch_energy;
    int32_t n = plan->n_atoms;
    const nnp_model* model = plan->model;
    const nnp_ani* ani = nnp_ani_of(model);
    nnp_neighbors nl = {0};
    nnp_status st = nnp_neighbors_build(plan, pos, box, ani->aev.Rcr, &nl);
    if (st != NNP_OK) return st;
    int forces = grad_out != NULL;
    /* Chunks: atoms grouped by element, index order within an element. */
    int32_t* by_element = malloc(((size_t)n + 1) * sizeof *by_element);
    nnp_chunk* chunks = malloc(((size_t)n + NNP_MAX_ELEMENTS + 1) * sizeof *chunks);
    if (by_element == NULL || chunks == NULL) {
        free(by_element), free(chunks);
        nnp_neighbors_free(&nl);
        return nnp_fail(NNP_ERR_MEMORY, "out of memory for %d atoms", n);
    }
    int32_t n_chunks = 0, filled = 0;
    for (int32_t e = 0; e < model->n_elements; e++) {
        int32_t first = filled;
        for (int32_t i = 0; i < n; i++)
            if (plan->elements[i] == e) by_element[filled++] = i;
        for (int32_t c0 = first; c0 < filled; c0 += CHUNK)
            chunks[n_chunks++] = (nnp_chunk){e, c0, filled - c0 < CHUNK ? filled - c0 : CHUNK};
    }
    int32_t n_threads = nnp_plan_threads(plan);
    if (n_threads > n_chunks) n_threads = n_chunks > 0 ? n_chunks : 1;
    size_t n_local = forces ? 3 * ((size_t)nl.start[n] + (size_t)n) : 0;
    size_t* local_start = forces ? malloc(((size_t)n + 1) * sizeof *local_start) : NULL;
    double* local = forces ? calloc(n_local + 1, sizeof *local) : NULL;
    double* atom_e = calloc((size_t)n + 1, sizeof *atom_e);
    workspace* ws = calloc((size_t)n_threads, sizeof *ws);
    int ok = atom_e && ws && (!forces || (local && local_start));
    for (int32_t t = 0; ok && t < n_threads; t++) ok = alloc_workspace(model, &ws[t]) == NNP_OK;
    if (!ok) {
        for (int32_t t = 0; ws && t < n_threads; t++) free_workspace(&ws[t]);
        free(ws), free(local), free(local_start), free(atom_e), free(by_element), free(chunks);
        nnp_neighbors_free(&nl);
        return nnp_fail(NNP_ERR_MEMORY, "out of memory for %d atoms", n);
    }
    for (int32_t i = 0; forces && i < n; i++) local_start[i] = 3 * ((size_t)nl.start[i] + (size_t)i);

    eval_job job = {.model = model, .plan = plan, .nl = &nl, .order = by_element, .chunks = chunks,
                    .n_chunks = n_chunks, .m_first = plan->member < 0 ? 0 : plan->member,
                    .m_last = plan->member < 0 ? model->n_members : plan->member + 1, .with_forces = forces,
                    .single = plan->cpu_precision == NNP_PRECISION_SINGLE,
                    .simd = plan->cpu_simd == NNP_CPU_SIMD_AUTO ? nnp_cpu_simd_available() : (nnp_cpu_simd)plan->cpu_simd,
                    .atom_e = atom_e, .local = local, .local_start = local_start, .ws = ws};
    aev_ranges_of(model, plan, &job.kept);
    angular_fast_of(&ani->aev, &job.fast);
    atomic_init(&job.next, 0);
    pthread_t threads[NNP_MAX_THREADS];
    worker_arg args[NNP_MAX_THREADS];
    int32_t started = 0;
    for (int32_t t = 1; t < n_threads; t++) {
        args[t] = (worker_arg){&job, &ws[t]};
        if (pthread_create(&threads[t], NULL, worker_main, &args[t]) != 0) break; /* the others take over */
        started = t;
    }
    run_chunks(&job, &ws[0]);
    for (int32_t t = 1; t <= started; t++) pthread_join(threads[t], NULL);

    /* Forces: every atom's contributions, added in chunk order. */
    double* grad = grad_out;
    if (forces) {
        for (int32_t p = 0; p < n; p++) {
            int32_t i = by_element[p];
            const double* l = local + local_start[i];
            for (int k = 0; k < 3; k++) grad[3 * i + k] += l[k];
            for (int32_t a = 0; a < nl.start[i + 1] - nl.start[i]; a++) {
                int32_t j = nl.items[nl.start[i] + a].j;
                for (int k = 0; k < 3; k++) grad[3 * j + k] += l[3 * (1 + a) + k];
            }
        }
    }
    for (int32_t i = 0; i < n; i++) atom_energy[i] += atom_e[i] + ani->self_energies[plan->elements[i]];
    for (int32_t t = 0; t < n_threads; t++) free_workspace(&ws[t]);
    free(ws), free(local), free(local_start), free(atom_e), free(by_element), free(chunks);
    nnp_neighbors_free(&nl);
    return st;
}

