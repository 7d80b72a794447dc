/*
 * ANI's AEV and its backward for the float32 evaluation, on SIMD: included by cpu.c once per
 * instruction set, with
 *   SFX (name suffix), ATTR (the target attribute), VW (doubles per vector: 2, 4 or 8).
 * GCC's vector extensions in float64, one pair (angular) or one neighbour (radial) per lane: the
 * lanes gather their pair's scalars (cos θ and sin θ without acos, the distances, the cutoffs),
 * compute every term's factors as vectors (exp and pow by vec_math.h, no library call), and add
 * their terms to the atom's AEV in pair order, so each feature's sum keeps the order of cpu.c's
 * loops. Each lane does the same operations, unfused (ISO C: no contraction), so every vector width
 * gives the same bits.
 */
#define NNP_CAT2(a, b) a##_##b
#define NNP_CAT(a, b) NNP_CAT2(a, b)
#define NNP_FN(name) NNP_CAT(name, SFX)

#include "vec_math.h"

/* The angular factors of a vector of pairs: f1[(z, sz)] and, with df1 (not NULL), d f1/dθ; f2[(ea, sa)]
   and, with df2, d f2/d dj (= d f2/d dk). ct = cos θ = 0.95 c, st = sin θ, avg = (dj + dk)/2. */
ATTR static inline __attribute__((always_inline)) void NNP_FN(angular_factors)(const nnp_aev_params* p, const angular_fast* f,
                                                                               VD ct, VD st, VD avg, VD* f1, VD* df1, VD* f2,
                                                                               VD* df2) {
    for (int32_t sz = 0; sz < p->nShfZ; sz++) {
        const VD cd = ct * f->cos_s[sz] + st * f->sin_s[sz];
        const VD base = 0.5 * (1 + cd);
        for (int32_t z = 0; z < p->nZeta; z++) {
            const VD lower = NNP_FN(vpow)(base, p->Zeta[z] - 1, f->zeta_whole);
            f1[z * p->nShfZ + sz] = lower * base;
            if (df1) df1[z * p->nShfZ + sz] = p->Zeta[z] * lower * (-0.5 * (st * f->cos_s[sz] - ct * f->sin_s[sz]));
        }
    }
    for (int32_t ea = 0; ea < p->nEtaA; ea++)
        for (int32_t sa = 0; sa < p->nShfA; sa++) {
            const VD x = avg - p->ShfA[sa];
            const VD e = NNP_FN(vexp)(-p->EtaA[ea] * x * x);
            f2[ea * p->nShfA + sa] = e;
            if (df2) df2[ea * p->nShfA + sa] = e * (-2 * p->EtaA[ea] * x) * 0.5;
        }
}

/* One atom's pairs (angular) as lanes: atom i's neighbours a < b, both within Rca, in cpu.c's order. */
typedef struct NNP_FN(pair_lanes) {
    int n;
    int32_t a[VW], b[VW];
    double c[VW], ct[VW], st[VW], dj[VW], dk[VW], fj[VW], fk[VW], dfj[VW], dfk[VW];
} NNP_FN(pair_lanes);

/* Adds pair (a, b) of atom i's neighbours nb to the lanes (fc, dfc: the angular cutoff and its
   derivative of the first NNP_FC_CACHE neighbours; the others computed here). */
ATTR static inline __attribute__((always_inline)) void NNP_FN(pair_push)(NNP_FN(pair_lanes) * P, const nnp_neighbor* nb, int32_t a,
                                                                         int32_t b, const double* fc, const double* dfc, double rc) {
    const double *u = nb[a].r, *v = nb[b].r;
    const int l = P->n++;
    P->a[l] = a, P->b[l] = b, P->dj[l] = nb[a].d, P->dk[l] = nb[b].d;
    P->c[l] = (u[0] * v[0] + u[1] * v[1] + u[2] * v[2]) / fmax(nb[a].d * nb[b].d, 1e-10);
    P->ct[l] = 0.95 * P->c[l], P->st[l] = sqrt(fmax(1 - P->ct[l] * P->ct[l], 0));
    P->fj[l] = a < NNP_FC_CACHE ? fc[a] : cutoff_fn(nb[a].d, rc), P->fk[l] = b < NNP_FC_CACHE ? fc[b] : cutoff_fn(nb[b].d, rc);
    P->dfj[l] = a < NNP_FC_CACHE ? dfc[a] : cutoff_deriv(nb[a].d, rc), P->dfk[l] = b < NNP_FC_CACHE ? dfc[b] : cutoff_deriv(nb[b].d, rc);
}
/* Empty lanes: zero cutoffs, so every term of theirs is 0 (and finite). */
ATTR static inline __attribute__((always_inline)) void NNP_FN(pair_pad)(NNP_FN(pair_lanes) * P) {
    for (int l = P->n; l < VW; l++) P->c[l] = P->ct[l] = P->dj[l] = P->dk[l] = P->fj[l] = P->fk[l] = P->dfj[l] = P->dfk[l] = 0, P->st[l] = 1;
}

/* The factor vectors of the angular terms: the workspace's aligned buffer, nf1 + nf1 + nf2 + nf2 vectors. */
typedef struct NNP_FN(factors) {
    VD *f1, *df1, *f2, *df2;
} NNP_FN(factors);
ATTR static inline __attribute__((always_inline)) NNP_FN(factors) NNP_FN(factors_in)(const nnp_aev_params* p, double* vbuf) {
    const int32_t nf1 = p->nZeta * p->nShfZ, nf2 = p->nEtaA * p->nShfA;
    VD* v = (VD*)__builtin_assume_aligned(vbuf, 64);
    NNP_FN(factors) F = {v, v + nf1, v + 2 * nf1, v + 2 * nf1 + nf2};
    return F;
}

/* The lanes' angular terms added to the AEV, each pair in turn. */
ATTR static void NNP_FN(angular_flush)(const nnp_ani* ani, const nnp_plan* plan, const nnp_neighbor* nb, const angular_fast* fast,
                                       NNP_FN(pair_lanes) * P, NNP_FN(factors) F, double* tbuf, double* aev) {
    const nnp_aev_params* p = &ani->aev;
    NNP_FN(pair_pad)(P);
    const VD fjk = 2 * NNP_FN(vload)(P->fj) * NNP_FN(vload)(P->fk);
    NNP_FN(angular_factors)(p, fast, NNP_FN(vload)(P->ct), NNP_FN(vload)(P->st), 0.5 * (NNP_FN(vload)(P->dj) + NNP_FN(vload)(P->dk)),
                            F.f1, NULL, F.f2, NULL);
    int32_t t = 0;
    for (int32_t ea = 0; ea < p->nEtaA; ea++)
        for (int32_t z = 0; z < p->nZeta; z++)
            for (int32_t sa = 0; sa < p->nShfA; sa++) {
                const VD g = F.f2[ea * p->nShfA + sa] * fjk;
                for (int32_t sz = 0; sz < p->nShfZ; sz++, t++) NNP_FN(vstore)(tbuf + (size_t)t * VW, F.f1[z * p->nShfZ + sz] * g);
            }
    for (int l = 0; l < P->n; l++) {
        double* out =
            aev + ani->radial_length + ani->pair_index[plan->elements[nb[P->a[l]].j]][plan->elements[nb[P->b[l]].j]] * ani->angular_sub;
        for (int32_t k = 0; k < ani->angular_sub; k++) out[k] += tbuf[(size_t)k * VW + l];
    }
    P->n = 0;
}

/* The angular cutoff and its derivative of each of the first NNP_FC_CACHE neighbours (0 beyond Rca). */
ATTR static void NNP_FN(angular_cutoffs)(const nnp_aev_params* p, const nnp_neighbor* nb, int32_t nn, double* fc, double* dfc) {
    for (int32_t a = 0; a < nn && a < NNP_FC_CACHE; a++) {
        const int on = nb[a].d <= p->Rca;
        fc[a] = on ? cutoff_fn(nb[a].d, p->Rca) : 0;
        dfc[a] = on ? cutoff_deriv(nb[a].d, p->Rca) : 0;
    }
}

/* The lanes' pairs backward: dE/dr of their neighbours and of atom i into local, each pair in turn. */
ATTR static void NNP_FN(angular_flush_backward)(const nnp_ani* ani, const nnp_plan* plan, const nnp_neighbor* nb, const angular_fast* fast,
                                                NNP_FN(pair_lanes) * P, NNP_FN(factors) F, double* wbuf, const double* g, double* local) {
    const nnp_aev_params* p = &ani->aev;
    NNP_FN(pair_pad)(P);
    for (int l = 0; l < VW; l++) { /* dE/dAEV of each lane's block (0 for empty lanes) */
        const double* ga = l < P->n ? g + ani->radial_length +
                                          ani->pair_index[plan->elements[nb[P->a[l]].j]][plan->elements[nb[P->b[l]].j]] * ani->angular_sub
                                    : NULL;
        for (int32_t k = 0; k < ani->angular_sub; k++) wbuf[(size_t)k * VW + l] = ga ? ga[k] : 0;
    }
    const VD fj = NNP_FN(vload)(P->fj), fk = NNP_FN(vload)(P->fk), fjk = fj * fk;
    const VD dfj_fk = NNP_FN(vload)(P->dfj) * fk, fj_dfk = fj * NNP_FN(vload)(P->dfk);
    NNP_FN(angular_factors)(p, fast, NNP_FN(vload)(P->ct), NNP_FN(vload)(P->st), 0.5 * (NNP_FN(vload)(P->dj) + NNP_FN(vload)(P->dk)),
                            F.f1, F.df1, F.f2, F.df2);
    VD s_theta = NNP_FN(vset1)(0), s_dj = s_theta, s_dk = s_theta;
    int32_t t = 0;
    for (int32_t ea = 0; ea < p->nEtaA; ea++)
        for (int32_t z = 0; z < p->nZeta; z++)
            for (int32_t sa = 0; sa < p->nShfA; sa++) {
                const VD f2 = F.f2[ea * p->nShfA + sa], df2 = F.df2[ea * p->nShfA + sa];
                const VD r = f2 * fjk, qj = df2 * fjk + f2 * dfj_fk, qk = df2 * fjk + f2 * fj_dfk;
                for (int32_t sz = 0; sz < p->nShfZ; sz++, t++) {
                    const VD w2 = 2 * NNP_FN(vload)(wbuf + (size_t)t * VW), wf1 = w2 * F.f1[z * p->nShfZ + sz];
                    s_theta += w2 * F.df1[z * p->nShfZ + sz] * r;
                    s_dj += wf1 * qj;
                    s_dk += wf1 * qk;
                }
            }
    double st_[VW], sj_[VW], sk_[VW];
    NNP_FN(vstore)(st_, s_theta), NNP_FN(vstore)(sj_, s_dj), NNP_FN(vstore)(sk_, s_dk);
    for (int l = 0; l < P->n; l++) {
        const int32_t a = P->a[l], b = P->b[l];
        const double *u = nb[a].r, *v = nb[b].r, dj = P->dj[l], dk = P->dk[l], c = P->c[l];
        const double inv_den = 1 / fmax(dj * dk, 1e-10), inv_dj = 1 / dj, inv_dk = 1 / dk;
        const double s_c = st_[l] * (-0.95 / sqrt(1 - P->ct[l] * P->ct[l]));
        const double cj = c * inv_dj * inv_dj, ck = c * inv_dk * inv_dk, gj = sj_[l] * inv_dj, gk = sk_[l] * inv_dk;
        for (int k = 0; k < 3; k++) {
            const double dc_du = v[k] * inv_den - cj * u[k];
            const double dc_dv = u[k] * inv_den - ck * v[k];
            const double gu = gj * u[k] + s_c * dc_du;
            const double gv = gk * v[k] + s_c * dc_dv;
            local[3 * (1 + a) + k] += gu;
            local[3 * (1 + b) + k] += gv;
            local[k] -= gu + gv;
        }
    }
    P->n = 0;
}

/* The lanes' pairs: their terms added to aev (g NULL), or with g = dE/dAEV their dE/dr to local. */
ATTR static inline __attribute__((always_inline)) void NNP_FN(angular_run)(const nnp_ani* ani, const nnp_plan* plan, const nnp_neighbor* nb,
                                                                           const angular_fast* fast, NNP_FN(pair_lanes) * P,
                                                                           NNP_FN(factors) F, double* buf, const double* g, double* aev,
                                                                           double* local) {
    if (g) NNP_FN(angular_flush_backward)(ani, plan, nb, fast, P, F, buf, g, local);
    else NNP_FN(angular_flush)(ani, plan, nb, fast, P, F, buf, aev);
}

/* Atom i's angular pairs (neighbours a < b of nb, both within Rca) in cpu.c's order, VW at a time
   (angular_run). */
ATTR static void NNP_FN(angular_pairs)(const nnp_ani* ani, const nnp_plan* plan, const nnp_neighbor* nb, int32_t nn,
                                       const angular_fast* fast, const aev_buffers* ab, const double* g, double* aev, double* local) {
    const nnp_aev_params* p = &ani->aev;
    double fc[NNP_FC_CACHE], dfc[NNP_FC_CACHE];
    NNP_FN(angular_cutoffs)(p, nb, nn, fc, dfc);
    const NNP_FN(factors) F = NNP_FN(factors_in)(p, ab->vectors);
    NNP_FN(pair_lanes) P;
    P.n = 0;
    for (int32_t a = 0; a < nn; a++) {
        if (nb[a].d > p->Rca) continue;
        for (int32_t b = a + 1; b < nn; b++) {
            if (nb[b].d > p->Rca) continue;
            NNP_FN(pair_push)(&P, nb, a, b, fc, dfc, p->Rca);
            if (P.n == VW) NNP_FN(angular_run)(ani, plan, nb, fast, &P, F, ab->terms, g, aev, local);
        }
    }
    if (P.n > 0) NNP_FN(angular_run)(ani, plan, nb, fast, &P, F, ab->terms, g, aev, local);
}

/* AEV of atom i in the float32 evaluation (aev zeroed by the caller; ab: the workspace's buffers). */
ATTR static void NNP_FN(compute_aev_fast)(const nnp_model* model, const nnp_plan* plan, const nnp_neighbors* nl, const angular_fast* fast,
                                          int32_t i, double* aev, const aev_buffers* ab) {
    const nnp_ani* ani = nnp_ani_of(model);
    const nnp_aev_params* p = &ani->aev;
    const nnp_neighbor* nb = &nl->items[nl->start[i]];
    const int32_t nn = nl->start[i + 1] - nl->start[i];
    double* tbuf = ab->terms;
    /* radial: neighbours as lanes */
    for (int32_t a0 = 0; a0 < nn; a0 += VW) {
        const int n = nn - a0 < VW ? nn - a0 : VW;
        double d[VW], fc[VW];
        for (int l = 0; l < VW; l++) {
            d[l] = l < n ? nb[a0 + l].d : 0;
            fc[l] = l < n ? 0.25 * cutoff_fn(d[l], p->Rcr) : 0;
        }
        const VD dv = NNP_FN(vload)(d), fcv = NNP_FN(vload)(fc);
        for (int32_t e = 0; e < p->nEtaR; e++)
            for (int32_t s = 0; s < p->nShfR; s++) {
                const VD x = dv - p->ShfR[s];
                NNP_FN(vstore)(tbuf + (size_t)(e * p->nShfR + s) * VW, NNP_FN(vexp)(-p->EtaR[e] * x * x) * fcv);
            }
        for (int l = 0; l < n; l++) {
            double* out = aev + plan->elements[nb[a0 + l].j] * ani->radial_sub;
            for (int32_t t = 0; t < ani->radial_sub; t++) out[t] += tbuf[(size_t)t * VW + l];
        }
    }
    NNP_FN(angular_pairs)(ani, plan, nb, nn, fast, ab, NULL, aev, NULL); /* angular: pairs as lanes */
}

/* dE/dr of atom i's AEV in the float32 evaluation, given g = dE/dAEV (as aev_backward). */
ATTR static void NNP_FN(aev_backward_fast)(const nnp_model* model, const nnp_plan* plan, const nnp_neighbors* nl, const angular_fast* fast,
                                           int32_t i, const double* g, double* local, const aev_buffers* ab) {
    const nnp_ani* ani = nnp_ani_of(model);
    const nnp_aev_params* p = &ani->aev;
    const nnp_neighbor* nb = &nl->items[nl->start[i]];
    const int32_t nn = nl->start[i + 1] - nl->start[i];
    double* wbuf = ab->terms;
    /* radial: neighbours as lanes */
    for (int32_t a0 = 0; a0 < nn; a0 += VW) {
        const int n = nn - a0 < VW ? nn - a0 : VW;
        double d[VW], fc[VW], dfc[VW];
        for (int l = 0; l < VW; l++) {
            d[l] = l < n ? nb[a0 + l].d : 0;
            fc[l] = l < n ? cutoff_fn(d[l], p->Rcr) : 0;
            dfc[l] = l < n ? cutoff_deriv(d[l], p->Rcr) : 0;
            const double* gr = l < n ? g + plan->elements[nb[a0 + l].j] * ani->radial_sub : NULL;
            for (int32_t t = 0; t < ani->radial_sub; t++) wbuf[(size_t)t * VW + l] = gr ? gr[t] : 0;
        }
        const VD dv = NNP_FN(vload)(d), fcv = NNP_FN(vload)(fc), dfcv = NNP_FN(vload)(dfc);
        VD s_d = NNP_FN(vset1)(0);
        for (int32_t e = 0; e < p->nEtaR; e++)
            for (int32_t s = 0; s < p->nShfR; s++) {
                const VD x = dv - p->ShfR[s];
                const VD ex = NNP_FN(vexp)(-p->EtaR[e] * x * x);
                s_d += NNP_FN(vload)(wbuf + (size_t)(e * p->nShfR + s) * VW) * 0.25 * ex * (-2 * p->EtaR[e] * x * fcv + dfcv);
            }
        double sd[VW];
        NNP_FN(vstore)(sd, s_d);
        for (int l = 0; l < n; l++)
            for (int k = 0; k < 3; k++) {
                const double f = sd[l] / d[l] * nb[a0 + l].r[k];
                local[3 * (1 + a0 + l) + k] += f;
                local[k] -= f;
            }
    }
    NNP_FN(angular_pairs)(ani, plan, nb, nn, fast, ab, g, NULL, local); /* angular: pairs as lanes */
}

#undef VD
#undef VI
#undef NNP_FN
#undef NNP_CAT
#undef NNP_CAT2
#undef SFX
#undef ATTR
#undef VW
