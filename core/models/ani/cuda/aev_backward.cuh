/*
 * Forces from dE/dAEV (k_aev_backward): the neighbour tables k_aev left, the analytic AEV
 * derivatives, fixed-point atomic adds into the force buffer.
 */
#pragma once

#include "aev.cuh"
#include "finish.cuh"

/* The last backward GEMM's split-K parts left in its workspace (few rows): row r of dE/dAEV is, per
   column c < n, the sum in part order of partial[at + p·stride + local·n + c], p < parts, where
   rows[r] = (at, stride, n, local); columns from n on are zero (outside the row's class prefix).
   The same sums in the same order as splitk_fixup's, one dependent launch step fewer. */
template <typename real> struct DeferredSum {
    const int4* rows; /* NULL: dE/dAEV is in its buffer */
    const real* partial;
    int parts;
};

/* The backward kernel's start: atom i's neighbour tables as k_aev left them, the neighbours' places
   in the force buffer in `rest`, and with stage_g the atom's row of dE/dAEV (g_row, A values) after
   them (otherwise *g stays g_row), from its buffer or added from the split-K parts (defer). */
template <typename real>
__device__ AevAtom<real> aev_atom(unsigned char* smem, const AevParams<real>* __restrict__ params, AevParams<real>& P, int i,
                                  int capacity, const NbrTables<real> T, const real* __restrict__ g_row, int A, bool stage_g,
                                  const DeferredSum<real>& defer, int row, const real** g, const int** fidx) {
    AevAtom<real> a = aev_smem<real>(smem, capacity);
    int* s_fidx = (int*)a.rest;
    real* s_g = (real*)((unsigned char*)a.rest + align16((size_t)capacity * sizeof(int)));
    load_params(params, P); /* constant: before the wait */
    /* Split over blocks (few atoms), the tables too: k_aev wrote them several launches earlier, and
       every kernel of the evaluation waits for its predecessor before it lets its dependents start
       (pdl_start), so k_aev has completed by the time this block runs. Only dE/dAEV (the previous
       launch's) needs the wait. One block per atom (many atoms) waits first, as before. */
    if (!stage_g) pdl_start();
    const int2 c = T.count[i];
    a.nn = c.x, a.na = c.y;
    const size_t at = (size_t)i * capacity;
    for (int q = threadIdx.x; q < a.nn; q += blockDim.x) {
        a.vec[q] = T.vec[at + q];
        a.cut[q] = T.cut[at + q];
        const int2 info = T.info[at + q];
        a.el[q] = info.x, s_fidx[q] = info.y;
    }
    for (int q = threadIdx.x; q < a.na; q += blockDim.x) a.ang[q] = T.ang[at + q];
    const int4 d = stage_g && defer.rows != NULL ? defer.rows[row] : make_int4(0, 0, 0, 0);
    if (stage_g) pdl_start();
    if (stage_g && defer.rows != NULL) {
        const real* src = defer.partial + d.x + (size_t)d.w * d.z;
        for (int k = threadIdx.x; k < A; k += blockDim.x) s_g[k] = k < d.z ? sum_parts(src + k, (size_t)d.y, defer.parts) : real(0);
    } else if (stage_g)
        for (int k = threadIdx.x; k < A; k += blockDim.x) s_g[k] = g_row[k];
    __syncthreads();
    *g = stage_g ? s_g : g_row;
    *fidx = s_fidx;
    return a;
}

/*
 * Forces from dE/dAEV, one block per atom (SPLIT: each atom over gridDim.y blocks). Contributions go
 * to the fixed-point force buffer (index force_index[atom] of component c at c·stride), in units of
 * `unit` per Hartree/Å; fixed point makes the sums independent of the order of the additions, and
 * each contribution is formed the same way on every run, so the result is deterministic.
 * Radial: one thread per neighbour. Angular: one thread per pair doing its terms in order; or, with
 * SPLIT (few atoms, where one block per atom would leave most of the GPU idle; needs nnp_cuda_lanes_over_shfz),
 * 32 / nShfZ pairs per warp and the lanes over ShfZ, the three derivative sums added by a butterfly.
 */
template <typename real, bool SPLIT>
__global__ void __launch_bounds__(SPLIT ? AEV_THREADS : BWD_THREADS, SPLIT ? 1 : BWD_BLOCKS)
    k_aev_backward(const AevParams<real>* __restrict__ params, const int* __restrict__ row_atom, int capacity,
                   const NbrTables<real> T, const real* __restrict__ daev, int ld,
                   const int* __restrict__ force_index, unsigned long long* __restrict__ forces,
                   long long stride, double unit, const Finish fin, int with_finish,
                   const DeferredSum<real> defer) {
    extern __shared__ unsigned char smem[];
    __shared__ AevParams<real> P;
    if (SPLIT && with_finish && blockIdx.x == 0) { /* the extra first block: the end of the evaluation (see Finish) */
        if (blockIdx.y == 0) finish_evaluation(fin);
        else pdl_start();
        return;
    }
    const int row = blockIdx.x - (SPLIT ? with_finish : 0), i = row_atom[row];
    const real* g;      /* this atom's dE/dAEV (in shared memory when split over blocks, each reading all of it) */
    const int* s_fidx;  /* each neighbour's place in the force buffer */
    const AevAtom<real> at = aev_atom<real>(smem, params, P, i, capacity, T, daev + (size_t)row * ld, ld, SPLIT, defer, row, &g, &s_fidx);
    const typename real4_of<real>::type *s_vec = at.vec, *s_cut = at.cut;
    const int *s_el = at.el, *s_ang = at.ang, nn = at.nn, na = at.na;
    const int fi = force_index[i], slice = SPLIT ? blockIdx.y : 0, slices = SPLIT ? gridDim.y : 1;
    double fsum[3] = {0, 0, 0};
    if (SPLIT && P.radial_sub <= 32) {
        /* Few atoms: one warp per neighbour over the atom's blocks, lane t the term t, the terms
           added by a fixed shuffle tree (one thread's walk over the terms was the longest chain). */
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
        for (int a = slice * nwarps + warp; a < nn; a += slices * nwarps) {
            const real d = s_vec[a].w, fc = s_cut[a].x, dfc = s_cut[a].y;
            real s_d = 0;
            if (lane < P.radial_sub) {
                const real eta = P.EtaR[lane / P.nShfR], x = d - P.ShfR[lane % P.nShfR];
                s_d = g[P.radial_at[s_el[a]] + lane] * (real)0.25 * dexp(-eta * x * x) * ((real)-2 * eta * x * fc + dfc);
            }
            for (int off = 16; off > 0; off >>= 1) s_d += __shfl_down_sync(0xffffffffu, s_d, off);
            if (lane == 0) {
                double f[3] = {(double)(s_d * s_vec[a].x / d), (double)(s_d * s_vec[a].y / d), (double)(s_d * s_vec[a].z / d)};
                for (int c = 0; c < 3; c++) {
                    add_fixed(&forces[s_fidx[a] + c * stride], -f[c] * unit); /* force = −gradient */
                    fsum[c] += f[c];
                }
            }
        }
    } else
        for (int a = slice * blockDim.x + threadIdx.x; a < nn; a += slices * blockDim.x) {
            real d = s_vec[a].w, fc = s_cut[a].x, dfc = s_cut[a].y;
            const real* gr = g + P.radial_at[s_el[a]]; /* live: this neighbour has that element */
            real s_d = 0;
            for (int t = 0; t < P.radial_sub; t++) {
                real eta = P.EtaR[t / P.nShfR], x = d - P.ShfR[t % P.nShfR];
                s_d += gr[t] * (real)0.25 * dexp(-eta * x * x) * ((real)-2 * eta * x * fc + dfc);
            }
            double f[3] = {(double)(s_d * s_vec[a].x / d), (double)(s_d * s_vec[a].y / d), (double)(s_d * s_vec[a].z / d)};
            int fj = s_fidx[a];
            for (int c = 0; c < 3; c++) {
                add_fixed(&forces[fj + c * stride], -f[c] * unit); /* force = −gradient */
                fsum[c] += f[c];
            }
        }
    if (SPLIT) { /* (the plan splits only where nnp_cuda_lanes_over_shfz) */
        const int nz = P.nShfZ;
        /* Lane (slot, sz): pair slot `slot` of the warp's 32 / nShfZ pairs, the terms of ShfZ[sz] (one
           power per Zeta, one exponential per outer index), then the sums over sz by a butterfly inside
           the slot's lanes; lanes sz < 3 add component sz of the pair's forces. */
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
        const int ps = 32 / nz, slot = lane / nz, sz = lane % nz;
        const real cosZ = P.cosShfZ[sz], sinZ = P.sinShfZ[sz];
        const int n_pairs = na * (na - 1) / 2, step = slices * nwarps * ps;
        double f_center = 0; /* lanes sz < 3: component sz of the central atom's angular part */
        int e = (slice * nwarps + warp) * ps + slot;
        PairWalk pw = PairWalk::at(e, na);
        for (; e - slot < n_pairs; e += step, pw.advance(step)) { /* warp-uniform: every lane takes part in the butterflies */
            const bool valid = e < n_pairs;
            const int ja = valid ? s_ang[pw.p] : 0, ka = valid ? s_ang[pw.q()] : 0;
            const typename real4_of<real>::type u = s_vec[ja], v = s_vec[ka];
            const AngularPair<real> ap = angular_pair<real>(u, v);
            AngularGrad<real> sum = {0, 0, 0};
            const int col = valid ? P.angular_at[P.pair_index[s_el[ja] * NNP_MAX_ELEMENTS + s_el[ka]]] : -1;
            if (col >= 0) { /* stored by construction (see nnp_cuda_plan_aev_layout) */
                const real fj = s_cut[ja].z, fk = s_cut[ka].z, dfj = s_cut[ja].w, dfk = s_cut[ka].w;
                const real base = angular_base(ap, cosZ, sinZ);
                const real* gz = g + col + sz;
                for (int ea = 0, o = 0; ea < P.nEtaA; ea++)
                    for (int z = 0; z < P.nZeta; z++) {
                        real f1, df1;
                        angular_f1_grad(base, P.Zeta[z], cosZ, sinZ, ap, &f1, &df1);
                        for (int sa = 0; sa < P.nShfA; sa++, o++) {
                            real f2, df2;
                            angular_f2_grad(ap, P.EtaA[ea], P.ShfA[sa], &f2, &df2);
                            angular_term_grad(gz[o * nz], f1, df1, f2, df2, fj, fk, dfj, dfk, sum);
                        }
                    }
            }
            for (int off = nz / 2; off > 0; off >>= 1) {
                sum.theta += __shfl_xor_sync(0xffffffffu, sum.theta, off);
                sum.dj += __shfl_xor_sync(0xffffffffu, sum.dj, off);
                sum.dk += __shfl_xor_sync(0xffffffffu, sum.dk, off);
            }
            if (valid && sz < 3) {
                const real uk = sz == 0 ? u.x : sz == 1 ? u.y : u.z, vk = sz == 0 ? v.x : sz == 1 ? v.y : v.z;
                double gu, gv;
                angular_pair_forces(ap, sum, u.w, v.w, uk, vk, &gu, &gv);
                add_fixed(&forces[s_fidx[ja] + sz * stride], -gu * unit);
                add_fixed(&forces[s_fidx[ka] + sz * stride], -gv * unit);
                f_center += gu + gv;
            }
        }
        if (sz < 3) fsum[0] += sz == 0 ? f_center : 0, fsum[1] += sz == 1 ? f_center : 0, fsum[2] += sz == 2 ? f_center : 0;
    } else {
        const int n_pairs = na * (na - 1) / 2;
        for (int pq = threadIdx.x; pq < n_pairs; pq += blockDim.x) { /* one thread per pair: its terms in order */
            const PairWalk pw = PairWalk::at(pq, na);
            const int ja = s_ang[pw.p], ka = s_ang[pw.q()];
            const typename real4_of<real>::type u = s_vec[ja], v = s_vec[ka];
            const AngularPair<real> ap = angular_pair<real>(u, v);
            const real fj = s_cut[ja].z, fk = s_cut[ka].z, dfj = s_cut[ja].w, dfk = s_cut[ka].w;
            const real* ga = g + P.angular_at[P.pair_index[s_el[ja] * NNP_MAX_ELEMENTS + s_el[ka]]];
            AngularGrad<real> sum = {0, 0, 0};
            /* term t = ((ea · nZeta + z) · nShfA + sa) · nShfZ + sz; f1 and ∂f1/∂θ of each ShfZ once
               per Zeta, not once per ShfA, BWD_SHFZ at a time (so the terms are added in t order
               where nShfZ <= BWD_SHFZ, as for every ANI model). */
            for (int ea = 0; ea < P.nEtaA; ea++)
                for (int z = 0; z < P.nZeta; z++)
                    for (int sz0 = 0; sz0 < P.nShfZ; sz0 += BWD_SHFZ) {
                        real f1[BWD_SHFZ], df1[BWD_SHFZ];
#pragma unroll
                        for (int u = 0; u < BWD_SHFZ; u++) {
                            f1[u] = df1[u] = 0;
                            if (sz0 + u >= P.nShfZ) continue;
                            const real cosZ = P.cosShfZ[sz0 + u], sinZ = P.sinShfZ[sz0 + u];
                            angular_f1_grad(angular_base(ap, cosZ, sinZ), P.Zeta[z], cosZ, sinZ, ap, &f1[u], &df1[u]);
                        }
                        for (int sa = 0; sa < P.nShfA; sa++) {
                            real f2, df2;
                            angular_f2_grad(ap, P.EtaA[ea], P.ShfA[sa], &f2, &df2);
                            const real* gt = ga + ((ea * P.nZeta + z) * P.nShfA + sa) * P.nShfZ;
#pragma unroll
                            for (int u = 0; u < BWD_SHFZ; u++)
                                if (sz0 + u < P.nShfZ) angular_term_grad(gt[sz0 + u], f1[u], df1[u], f2, df2, fj, fk, dfj, dfk, sum);
                        }
                    }
            const real uu[3] = {u.x, u.y, u.z}, vv[3] = {v.x, v.y, v.z};
            for (int k = 0; k < 3; k++) {
                double gu, gv;
                angular_pair_forces(ap, sum, u.w, v.w, uu[k], vv[k], &gu, &gv);
                add_fixed(&forces[s_fidx[ja] + k * stride], -gu * unit);
                add_fixed(&forces[s_fidx[ka] + k * stride], -gv * unit);
                fsum[k] += gu + gv;
            }
        }
    }
    for (int c = 0; c < 3; c++)
        if (fsum[c] != 0) add_fixed(&forces[fi + c * stride], fsum[c] * unit);
}
