/*
 * Positions, neighbours and the AEV (atomic environment vectors): k_inverse_order (where each
 * particle sits in OpenMM's reordered buffers) and k_aev (one block per atom, or several for few
 * atoms), which also leaves the neighbour tables that the backward pass (aev_backward.cuh) reads.
 */
#pragma once

#include "ani.cuh"
#include "../../../cuda/positions.cuh"

/* Device copy of the AEV parameters (by value as kernel arguments). */
template <typename real> struct AevParams {
    real Rcr, Rca;
    int nEtaR, nShfR, nEtaA, nZeta, nShfA, nShfZ;
    real EtaR[8], ShfR[NNP_MAX_TERMS], EtaA[8], Zeta[8], ShfA[NNP_MAX_TERMS];
    int radial_sub, angular_sub, radial_length, aev_length;
    int pair_index[NNP_MAX_ELEMENTS * NNP_MAX_ELEMENTS];
    /* Where each block of features sits in the stored (live) AEV row, or -1: the radial block of
       each neighbour element and the angular block of each element pair (see nnp_cuda_plan_aev_layout). */
    int radial_at[NNP_MAX_ELEMENTS], angular_at[NNP_MAX_PAIRS];
    int angular0; /* stored column of the first angular feature (the live radial features' count) */
    real cosShfZ[NNP_MAX_TERMS], sinShfZ[NNP_MAX_TERMS]; /* cos(θ − ShfZ) = cos θ cos ShfZ + sin θ sin ShfZ */
};

/* Order-preserving compaction step over one chunk of the block's threads: returns the place of
   this thread's item (when `in`) after the *total items placed before the chunk, and adds the
   chunk's count to *total (the same value in every thread). s_scan: one int per warp. Ends with
   __syncthreads, so the shared items written before the call are visible after it. */
__device__ __forceinline__ int block_rank(bool in, int* s_scan, int* total) {
    const unsigned mask = __ballot_sync(0xffffffffu, in);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads(); /* the previous chunk's reads of s_scan are done */
    if (lane == 0) s_scan[warp] = __popc(mask);
    __syncthreads();
    int before = 0, chunk = 0;
    for (int w = 0; w < (int)blockDim.x / 32; w++) {
        before += w < warp ? s_scan[w] : 0;
        chunk += s_scan[w];
    }
    const int place = *total + before + __popc(mask & ((1u << lane) - 1));
    *total += chunk;
    return place;
}

template <typename real> __device__ __forceinline__ real cutoff_fn(real d, real rc) {
    return (real)0.5 * dcos((real)NNP_PI_F * d / rc) + (real)0.5;
}
template <typename real> __device__ __forceinline__ real cutoff_deriv(real d, real rc) {
    return (real)(-0.5 * NNP_PI_F) / rc * dsin((real)NNP_PI_F * d / rc);
}

/* Neighbour tables of one atom, from the vectors in shared memory: the cutoff values and
   derivatives at Rcr and Rca, computed once per neighbour rather than per feature or pair, and the
   list of neighbours within Rca, in order. */
template <typename real>
__device__ void neighbor_tables(int nn, real Rcr, real Rca, const typename real4_of<real>::type* s_vec,
                                typename real4_of<real>::type* s_cut, int* s_ang, int* s_nang, int* s_scan) {
    for (int a = threadIdx.x; a < nn; a += blockDim.x) {
        const real d = s_vec[a].w;
        typename real4_of<real>::type c;
        c.x = cutoff_fn(d, Rcr), c.y = cutoff_deriv(d, Rcr);
        c.z = d <= Rca ? cutoff_fn(d, Rca) : (real)0, c.w = d <= Rca ? cutoff_deriv(d, Rca) : (real)0;
        s_cut[a] = c;
    }
    /* Order-preserving compaction of the angular neighbours: one chunk of blockDim at a time. */
    int total = 0;
    for (int base = 0; base < nn; base += blockDim.x) {
        const int a = base + threadIdx.x;
        const bool in = a < nn && s_vec[a].w <= Rca;
        const int before = block_rank(in, s_scan, &total);
        if (in) s_ang[before] = a;
    }
    if (threadIdx.x == 0) *s_nang = total;
    __syncthreads();
}

/* Copies the AEV parameters from device memory into shared memory (indexed per thread, they
   would otherwise be copied to local memory from the kernel's parameters). */
template <typename real> __device__ void load_params(const AevParams<real>* __restrict__ src, AevParams<real>& dst) {
    const int* from = (const int*)src;
    int* to = (int*)&dst;
    for (int k = threadIdx.x; k < (int)(sizeof(AevParams<real>) / sizeof(int)); k += blockDim.x) to[k] = from[k];
    __syncthreads();
}

/* The AEV kernels' common start: parameters and atom i's neighbours in shared memory. The dynamic
   shared memory holds, per neighbour slot, the vector (x, y, z, distance), the cutoff values, the
   element and the angular list; `rest` is what follows (nnp_cuda_aev_smem_base bytes in all). */
template <typename real> struct AevAtom {
    typename real4_of<real>::type *vec, *cut;
    int *el, *ang;
    void* rest;
    int nn, na; /* neighbours, and those within Rca */
};
template <typename real> __device__ AevAtom<real> aev_smem(unsigned char* smem, int capacity) {
    AevAtom<real> a;
    a.vec = (typename real4_of<real>::type*)smem;
    a.cut = a.vec + capacity;
    a.el = (int*)(a.cut + capacity);
    a.ang = a.el + capacity;
    a.rest = a.ang + capacity;
    return a;
}
/* Neighbour tables as k_aev leaves them for the backward pass, per atom i and slot q < capacity. */
template <typename real> struct NbrTables {
    int2* count;                            /* (neighbours, of which within Rca) */
    typename real4_of<real>::type* vec;     /* (r_j − r_i, d) in Å */
    typename real4_of<real>::type* cut;     /* cutoff values and derivatives at Rcr and Rca */
    int2* info;                             /* (element, place in the force buffer) */
    int* ang;                               /* the neighbours within Rca, in order */
};

/* What k_aev needs to find each atom's neighbours from the caller's positions. */
template <typename real> struct FrontIn {
    const void* positions;
    const int* index_of;     /* where each particle is in OpenMM's order, or NULL */
    const int4* row_info;    /* per AEV row: (atom, its particle, its batch's first and end place in batch_entry) */
    const int4* batch_entry; /* the atoms of every batch, in batch order: (atom, particle, element, 0) */
    int* force_index;  /* out: where each atom's position came from */
    NbrTables<real> T; /* out: the neighbour tables for the backward pass */
    int* flags;
    Box<real> box;
    real to_angstrom, rc2;
    int format;
};

/*
 * The forward kernel's start: atom i's position, then its neighbours (atoms of the same batch within
 * Rcr, minimum image if periodic) found by the whole block over the batch in index order, kept in
 * shared memory and listed for the backward kernel. Flags: [0] non-finite coordinate (smallest
 * atom), [1] count above capacity (largest count seen), [2] coincident atoms.
 */
template <typename real>
__device__ AevAtom<real> aev_search(unsigned char* smem, const AevParams<real>* __restrict__ params, AevParams<real>& P, int row,
                                    int capacity, const FrontIn<real>& in, int* s_nang, int* s_scan, bool writer) {
    typedef typename real4_of<real>::type real4;
    AevAtom<real> a = aev_smem<real>(smem, capacity);
    /* Constant: requested before the wait, the first chunk of the batch included. */
    const int4 info = in.row_info[row];
    const int i = info.x, q0 = info.z, q1 = info.w;
    int4 first = make_int4(-1, 0, 0, 0);
    if (q0 + (int)threadIdx.x < q1) first = in.batch_entry[q0 + threadIdx.x];
    load_params(params, P);
    pdl_start();
    int at_i;
    bool finite_i;
    const real4 ri = load_position<real>(in.positions, in.format, in.index_of, info.y, in.to_angstrom, &at_i, &finite_i);
    if (threadIdx.x == 0 && writer) { /* every thread reads the atom's position (one broadcast load each), so no barrier waits for it */
        in.force_index[i] = at_i;
        if (!finite_i) atomicMin(&in.flags[0], i);
    }
    int found = 0;
    for (int base = q0; base < q1; base += blockDim.x) {
        const int q = base + threadIdx.x;
        bool hit = false;
        int4 e = make_int4(-1, 0, 0, 0);
        int at_j = 0;
        real dx = 0, dy = 0, dz = 0, d2 = 0;
        if (q < q1) {
            e = base == q0 ? first : in.batch_entry[q];
            if (e.x != i) {
                bool finite;
                const real4 rj = load_position<real>(in.positions, in.format, in.index_of, e.y, in.to_angstrom, &at_j, &finite);
                dx = rj.x - ri.x, dy = rj.y - ri.y, dz = rj.z - ri.z;
                min_image(dx, dy, dz, in.box);
                d2 = dx * dx + dy * dy + dz * dz;
                hit = d2 <= in.rc2;
                if (hit && d2 == 0 && writer) atomicMax(&in.flags[2], 1); /* coincident atoms */
            }
        }
        const int slot = block_rank(hit, s_scan, &found);
        if (hit && slot < capacity) {
            real4 v;
            v.x = dx, v.y = dy, v.z = dz, v.w = dsqrt(d2);
            a.vec[slot] = v;
            a.el[slot] = e.z;
            if (writer) {
                in.T.vec[(size_t)i * capacity + slot] = v;
                in.T.info[(size_t)i * capacity + slot] = make_int2(e.z, at_j);
            }
        }
    }
    a.nn = min(found, capacity);
    if (threadIdx.x == 0 && found > capacity && writer) atomicMax(&in.flags[1], found);
    __syncthreads();
    neighbor_tables<real>(a.nn, P.Rcr, P.Rca, a.vec, a.cut, a.ang, s_nang, s_scan);
    a.na = *s_nang;
    if (writer) { /* the tables the backward pass reads instead of computing them again */
        const size_t at = (size_t)i * capacity;
        for (int q = threadIdx.x; q < a.nn; q += blockDim.x) in.T.cut[at + q] = a.cut[q];
        for (int q = threadIdx.x; q < a.na; q += blockDim.x) in.T.ang[at + q] = a.ang[q];
        if (threadIdx.x == 0) in.T.count[i] = make_int2(a.nn, a.na);
    }
    return a;
}

/*
 * The angular term, one implementation for the AEV and its derivative. For the pair (j, k) of
 * atom i's neighbours within Rca, with u = r_j − r_i, v = r_k − r_i:
 *   term = 2 · f1 · f2 · fc(d_j) · fc(d_k),  f1 = (½(1 + cos(θ − ShfZ)))^ζ,  f2 = exp(−η (avg − ShfA)²),
 * θ = acos(0.95 c), c = u·v / (d_j d_k), avg = (d_j + d_k) / 2 (TorchANI's definition). cos θ and
 * sin θ come from c directly, and cos(θ − ShfZ) from cos ShfZ and sin ShfZ: no trigonometric call.
 */
template <typename real> struct AngularPair {
    real c, denom;  /* cos of the angle at i, max(d_j d_k, 1e-10) */
    real ct, st;    /* cos θ, sin θ */
    real avg;       /* (d_j + d_k) / 2 */
};
template <typename real>
__device__ __forceinline__ AngularPair<real> angular_pair(const typename real4_of<real>::type& u, const typename real4_of<real>::type& v) {
    AngularPair<real> g;
    g.denom = fmax(u.w * v.w, (real)1e-10);
    g.c = (u.x * v.x + u.y * v.y + u.z * v.z) / g.denom;
    g.ct = (real)0.95 * g.c, g.st = dsqrt((real)1 - g.ct * g.ct);
    g.avg = (real)0.5 * (u.w + v.w);
    return g;
}
/* ½(1 + cos(θ − ShfZ)), the base of f1 */
template <typename real> __device__ __forceinline__ real angular_base(const AngularPair<real>& g, real cosZ, real sinZ) {
    return (real)0.5 * ((real)1 + g.ct * cosZ + g.st * sinZ);
}
/* f2 */
template <typename real> __device__ __forceinline__ real angular_f2(const AngularPair<real>& g, real etaA, real shfA) {
    const real x = g.avg - shfA;
    return dexp(-etaA * x * x);
}
/* The term from f1 = base^ζ, f2 and fc2 = 2 · fc(d_j) · fc(d_k) */
template <typename real> __device__ __forceinline__ real angular_term_of(real f1, real f2, real fc2) { return f1 * f2 * fc2; }
template <typename real> __device__ __forceinline__ real angular_term(real base, real zeta, real f2, real fc2) {
    return angular_term_of(dpow(base, zeta), f2, fc2);
}
/* Where one pair's factors sit in k_aev's shared table (a row of `stride` reals per pair, see
   NNP_CUDA_PAIR_STRIDE): f1 of (Zeta z, ShfZ sz), f2 of (EtaA ea, ShfA sa), fc2, the stored column. */
struct PairFactors {
    int n1, fc2, col, stride;
    template <typename real> __device__ __forceinline__ static PairFactors of(const AevParams<real>& P) {
        PairFactors p;
        p.n1 = P.nZeta * P.nShfZ, p.fc2 = p.n1 + P.nEtaA * P.nShfA, p.col = p.fc2 + 1, p.stride = NNP_CUDA_PAIR_STRIDE(p.fc2);
        return p;
    }
    template <typename real> __device__ __forceinline__ int f1(int z, int sz, const AevParams<real>& P) const { return z * P.nShfZ + sz; }
    template <typename real> __device__ __forceinline__ int f2(int ea, int sa, const AevParams<real>& P) const { return n1 + ea * P.nShfA + sa; }
};
/* For the derivative: f1 and ∂f1/∂θ; f2 and ∂f2/∂d_j (= ∂f2/∂d_k). */
template <typename real>
__device__ __forceinline__ void angular_f1_grad(real base, real zeta, real cosZ, real sinZ, const AngularPair<real>& g, real* f1, real* df1) {
    *f1 = dpow(base, zeta);
    const real dbase = (real)-0.5 * (g.st * cosZ - g.ct * sinZ); /* ∂base/∂θ = −½ sin(θ − ShfZ) */
    *df1 = zeta * (base > (real)0 ? *f1 / base : dpow(base, zeta - (real)1)) * dbase;
}
template <typename real>
__device__ __forceinline__ void angular_f2_grad(const AngularPair<real>& g, real etaA, real shfA, real* f2, real* df2) {
    const real x = g.avg - shfA;
    *f2 = dexp(-etaA * x * x);
    *df2 = *f2 * ((real)-2 * etaA * x) * (real)0.5;
}
/* The derivative of w · term: w times ∂term/∂θ, ∂term/∂d_j and ∂term/∂d_k added to s, from the
   factors (angular_f1_grad, angular_f2_grad), the cutoff values fj, fk and their derivatives. */
template <typename real> struct AngularGrad {
    real theta, dj, dk;
};
template <typename real>
__device__ __forceinline__ void angular_term_grad(real w, real f1, real df1, real f2, real df2, real fj, real fk, real dfj, real dfk,
                                                  AngularGrad<real>& s) {
    s.theta += w * (real)2 * df1 * f2 * fj * fk;
    s.dj += w * (real)2 * f1 * (df2 * fj * fk + f2 * dfj * fk);
    s.dk += w * (real)2 * f1 * (df2 * fj * fk + f2 * fj * dfk);
}
/* The gradient of the pair's terms with respect to component x of u and of v (ux, vx), from the
   sums over its terms (∂/∂θ, ∂/∂d_j, ∂/∂d_k, see angular_term_grad), through θ(c) and c(u, v). */
template <typename real>
__device__ __forceinline__ void angular_pair_forces(const AngularPair<real>& g, const AngularGrad<real>& s, real dj, real dk, real ux, real vx,
                                                    double* gu, double* gv) {
    const real s_c = s.theta * ((real)-0.95 / g.st);
    const real dc_du = vx / g.denom - g.c * ux / (dj * dj), dc_dv = ux / g.denom - g.c * vx / (dk * dk);
    *gu = (double)(s.dj * ux / dj + s_c * dc_du);
    *gv = (double)(s.dk * vx / dk + s_c * dc_dv);
}

/* The pairs (p, q), p < q < na, of an atom's angular list in row-major order of the upper
   triangle: pair e is (p, p + 1 + rem). at(e) decodes e; advance(step) moves on to pair e + step. */
struct PairWalk {
    int p, rem, na;
    __device__ __forceinline__ void advance(int step) {
        rem += step;
        while (p < na - 1 && rem >= na - 1 - p) rem -= na - 1 - p, p++;
    }
    __device__ __forceinline__ static PairWalk at(int e, int na) {
        PairWalk w = {0, 0, na};
        w.advance(e);
        return w;
    }
    __device__ __forceinline__ int q() const { return p + 1 + rem; }
    /* pair e < na (na − 1) / 2 directly: row p is the last whose first pair p (2 na − p − 1) / 2 is at most e */
    __device__ __forceinline__ static PairWalk of(int e, int na) {
        const float b = (float)(2 * na - 1);
        int p = (int)((b - sqrtf(fmaxf(b * b - 8.f * (float)e, 0.f))) * 0.5f);
        p = max(0, min(p, na - 2));
        while (p > 0 && p * (2 * na - p - 1) / 2 > e) p--;
        while (p < na - 2 && (p + 1) * (2 * na - p - 2) / 2 <= e) p++;
        PairWalk w = {p, e - p * (2 * na - p - 1) / 2, na};
        return w;
    }
};

/* Angular features of few atoms, each atom over gridDim.y blocks (slices; see aev_slices): slice s
   computes the terms of the outer indices o = s, s + S, ... (o: EtaA, Zeta and ShfA; the nShfZ terms of
   one o are consecutive in each block of angular_sub features), so the slices write disjoint columns
   and nothing is added across blocks. In a warp, lane (slot, sz) takes pair slot `slot` of
   32 / nShfZ pairs and the term ShfZ[sz]: one power and one exponential per term and lane, every pair
   of the warp at once. Each (warp, slot) adds into its own row of the dynamic shared memory
   (rowlen = stored angular blocks × outer indices per slice × nShfZ, rows rowlen rounded up to 32 +
   nShfZ apart), and the rows are then added in a fixed order: the same result on every run. */
template <typename real>
__device__ void aev_angular_sliced(const AevParams<real>& P, const AevAtom<real>& at, real* __restrict__ out, int rowlen) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
    const int nz = P.nShfZ, ps = 32 / nz, slot = lane / nz, sz = lane % nz;
    const int S = gridDim.y, sl = blockIdx.y, n_outer = P.angular_sub / nz, max_ol = (n_outer + S - 1) / S;
    const int rowstride = (rowlen + 31) / 32 * 32 + nz, rows = nwarps * ps;
    const int na = at.na, n_pairs = na * (na - 1) / 2;
    real* s_acc = (real*)at.rest;
    for (int k = threadIdx.x; k < rows * rowstride; k += blockDim.x) s_acc[k] = 0;
    __syncthreads();
    const bool lane_in = slot < ps;
    real* mine = s_acc + (warp * ps + (lane_in ? slot : 0)) * rowstride + sz;
    const real cosZ = P.cosShfZ[sz], sinZ = P.sinShfZ[sz];
    /* pair e = (iteration × nwarps + warp) × ps + slot of the angular list */
    const int step = nwarps * ps;
    int e = warp * ps + slot;
    PairWalk pw = PairWalk::at(e, na);
    for (; e - slot < n_pairs; e += step, pw.advance(step)) {
        if (lane_in && e < n_pairs) {
            const int ja = at.ang[pw.p], ka = at.ang[pw.q()];
            const AngularPair<real> g = angular_pair<real>(at.vec[ja], at.vec[ka]);
            const real fc2 = (real)2 * at.cut[ja].z * at.cut[ka].z, base = angular_base(g, cosZ, sinZ);
            const int col = P.angular_at[P.pair_index[at.el[ja] * NNP_MAX_ELEMENTS + at.el[ka]]];
            if (col >= 0) { /* stored by construction (see nnp_cuda_plan_aev_layout) */
                real* acc = mine + (col - P.angular0) / P.angular_sub * max_ol * nz;
                for (int ol = 0, o = sl; o < n_outer; ol++, o += S) {
                    const int sa = o % P.nShfA, z = (o / P.nShfA) % P.nZeta, ea = o / (P.nShfA * P.nZeta);
                    acc[ol * nz] += angular_term(base, P.Zeta[z], angular_f2(g, P.EtaA[ea], P.ShfA[sa]), fc2);
                }
            }
        }
    }
    __syncthreads();
    const int blocks = rowlen / (max_ol * nz);
    for (int f = threadIdx.x; f < rowlen; f += blockDim.x) {
        const int b = f / (max_ol * nz), ol = f / nz % max_ol, t = f % nz, o = sl + S * ol;
        if (o >= n_outer || b >= blocks) continue;
        real sum = 0;
        for (int r = 0; r < rows; r++) sum += s_acc[r * rowstride + f];
        out[P.angular0 + b * P.angular_sub + o * nz + t] = sum;
    }
}

/* AEVs, one block per atom (rows in element order), from the positions (see aev_search). acc_stride > 0 selects the pair-parallel
   angular path and is the length of each warp's accumulator row in the dynamic shared memory.
   SLICED: each atom over gridDim.y blocks (aev_angular_sliced; acc_stride is its rowlen). A template
   parameter, so that the one-block-per-atom kernel keeps its registers (and occupancy) for many atoms. */
template <typename real, bool SLICED>
__global__ void __launch_bounds__(AEV_MAX_THREADS) k_aev(const AevParams<real>* __restrict__ params, int capacity, const FrontIn<real> in,
                                                     real* __restrict__ aev, int ld, int acc_stride) {
    extern __shared__ unsigned char smem[];
    __shared__ int s_nang, s_scan[AEV_MAX_THREADS / 32];
    __shared__ AevParams<real> P;
    const int row = blockIdx.x;
    /* of an atom's slices, the first writes the tables */
    const AevAtom<real> at = aev_search<real>(smem, params, P, row, capacity, in, &s_nang, s_scan, !SLICED || blockIdx.y == 0);
    const typename real4_of<real>::type *s_vec = at.vec, *s_cut = at.cut;
    const int *s_el = at.el, *s_ang = at.ang, nn = at.nn, na = at.na;
    real* out = aev + (size_t)row * ld;
    /* Radial features (only the live blocks: the others are zero for every atom and are not
       stored). Many atoms: one thread each, summing over the neighbours in order. Few atoms (1,024
       threads per atom, where one thread's walk over all neighbours would be the block's longest
       chain): one warp each, lane l over the neighbours l, l + 32, ..., the lanes' sums added by a
       fixed shuffle tree. Either way the order of every sum is fixed. */
    if (blockDim.x == AEV_MAX_THREADS || SLICED) { /* (split over the atom's slices) */
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
        for (int f = blockIdx.y * nwarps + warp; f < P.radial_length; f += gridDim.y * nwarps) {
            const int sp = f / P.radial_sub, t = f % P.radial_sub;
            if (P.radial_at[sp] < 0) continue;
            const real eta = P.EtaR[t / P.nShfR], shf = P.ShfR[t % P.nShfR];
            real sum = 0;
            for (int a = lane; a < nn; a += 32) {
                if (s_el[a] != sp) continue;
                const real x = s_vec[a].w - shf;
                sum += (real)0.25 * dexp(-eta * x * x) * s_cut[a].x;
            }
            for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, off);
            if (lane == 0) out[P.radial_at[sp] + t] = sum;
        }
    } else
        for (int f = threadIdx.x; f < P.radial_length; f += blockDim.x) {
            int sp = f / P.radial_sub, t = f % P.radial_sub;
            if (P.radial_at[sp] < 0) continue;
            real eta = P.EtaR[t / P.nShfR], shf = P.ShfR[t % P.nShfR], sum = 0;
            for (int a = 0; a < nn; a++) {
                if (s_el[a] != sp) continue;
                real d = s_vec[a].w, x = d - shf;
                sum += (real)0.25 * dexp(-eta * x * x) * s_cut[a].x;
            }
            out[P.radial_at[sp] + t] = sum;
        }
    const int n_pairs = na * (na - 1) / 2;
    if (SLICED) {
        aev_angular_sliced<real>(P, at, out, acc_stride);
        return;
    }
    if (acc_stride > 0) {
        /* Angular features, pair-parallel (acc_stride = stored element pairs × angular_sub, angular_sub
           <= 32), in chunks of blockDim.x pairs. First each thread takes one pair of the chunk and
           stores its factors in shared memory (PairFactors): the nZeta·nShfZ powers f1, the nEtaA·nShfA
           exponentials f2, fc2 and the pair's stored column, each computed once per pair instead of
           once per term. Then warp w of W takes the chunk's pairs w, w + W, ... (the pairs w, w + W,
           ... of the atom, in order), lane t the term t, and adds f1·f2·fc2 to the warp's own
           accumulator row in shared memory; the W rows are added in warp order at the end. The pairs
           each warp sees and the order of every sum are fixed, so the result is the same on every run. */
        real* s_acc = (real*)at.rest;
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
        const PairFactors pf = PairFactors::of(P);
        real* s_pair = s_acc + nwarps * acc_stride;
        for (int k = threadIdx.x; k < nwarps * acc_stride; k += blockDim.x) s_acc[k] = 0;
        const bool active = lane < P.angular_sub;
        const int t = active ? lane : 0;
        const int sz = t % P.nShfZ, sa = (t / P.nShfZ) % P.nShfA, z = (t / (P.nShfZ * P.nShfA)) % P.nZeta,
                  ea = t / (P.nShfZ * P.nShfA * P.nZeta);
        const int i1 = pf.f1(z, sz, P), i2 = pf.f2(ea, sa, P);
        real* mine = s_acc + warp * acc_stride - P.angular0; /* indexed by stored column */
        for (int c0 = 0; c0 < n_pairs; c0 += blockDim.x) {
            __syncthreads(); /* the accumulators are cleared, and the previous chunk is read */
            if (c0 + (int)threadIdx.x < n_pairs) {
                const PairWalk pw = PairWalk::of(c0 + threadIdx.x, na);
                const int ja = s_ang[pw.p], ka = s_ang[pw.q()];
                const AngularPair<real> g = angular_pair<real>(s_vec[ja], s_vec[ka]);
                real* f = s_pair + threadIdx.x * pf.stride;
                for (int zz = 0; zz < P.nZeta; zz++)
                    for (int s = 0; s < P.nShfZ; s++) f[pf.f1(zz, s, P)] = dpow(angular_base(g, P.cosShfZ[s], P.sinShfZ[s]), P.Zeta[zz]);
                for (int e = 0; e < P.nEtaA; e++)
                    for (int s = 0; s < P.nShfA; s++) f[pf.f2(e, s, P)] = angular_f2(g, P.EtaA[e], P.ShfA[s]);
                f[pf.fc2] = (real)2 * s_cut[ja].z * s_cut[ka].z;
                f[pf.col] = (real)P.angular_at[P.pair_index[s_el[ja] * NNP_MAX_ELEMENTS + s_el[ka]]];
            }
            __syncthreads();
            const int in_chunk = min((int)blockDim.x, n_pairs - c0);
            for (int i = warp; i < in_chunk; i += nwarps) {
                const real* f = s_pair + i * pf.stride;
                const int col = (int)f[pf.col];
                if (active && col >= 0) /* stored by construction (see nnp_cuda_plan_aev_layout) */
                    mine[col + t] += angular_term_of(f[i1], f[i2], f[pf.fc2]);
            }
        }
        __syncthreads();
        for (int f = threadIdx.x; f < acc_stride; f += blockDim.x) {
            real sum = 0;
            for (int w = 0; w < nwarps; w++) sum += s_acc[w * acc_stride + f];
            out[P.angular0 + f] = sum;
        }
    } else {
        /* General parameter sets: one thread per angular feature, over all pairs in order. */
        for (int f = P.radial_length + threadIdx.x; f < P.aev_length; f += blockDim.x) {
            int g = f - P.radial_length, pair = g / P.angular_sub, t = g % P.angular_sub;
            if (P.angular_at[pair] < 0) continue;
            int sz = t % P.nShfZ, sa = (t / P.nShfZ) % P.nShfA, z = (t / (P.nShfZ * P.nShfA)) % P.nZeta,
                ea = t / (P.nShfZ * P.nShfA * P.nZeta);
            real etaA = P.EtaA[ea], zeta = P.Zeta[z], shfA = P.ShfA[sa], cosZ = P.cosShfZ[sz], sinZ = P.sinShfZ[sz], sum = 0;
            for (int p = 0; p < na; p++) {
                int ja = s_ang[p];
                for (int q = p + 1; q < na; q++) {
                    int ka = s_ang[q];
                    if (P.pair_index[s_el[ja] * NNP_MAX_ELEMENTS + s_el[ka]] != pair) continue;
                    const AngularPair<real> g = angular_pair<real>(s_vec[ja], s_vec[ka]);
                    sum += angular_term(angular_base(g, cosZ, sinZ), zeta, angular_f2(g, etaA, shfA), (real)2 * s_cut[ja].z * s_cut[ka].z);
                }
            }
            out[P.angular_at[pair] + t] = sum;
        }
    }
}
