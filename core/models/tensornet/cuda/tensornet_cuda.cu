/*
 * TensorNet's CUDA evaluation: the same maths as its CPU evaluation (../tensornet.c, the
 * specification: the formulas are at its top), in float32 or float64, for all batches at once, on
 * the stream the caller gives. The entry points and the capture contract's checks are the generic
 * core's (core/cuda/nnp_cuda.cu); this file holds the family's hooks.
 *
 * One evaluation is a fixed sequence of kernels whose sizes all come from the state made at the
 * last evaluation outside stream capture:
 *   positions   each atom's position (from OpenMM's reordered buffers one thread per slot, the
 *               particle's atom taking it), in the model's length unit; non-finite coordinates flagged
 *   neighbours  one warp per atom: the atoms of its batch within the cutoff, in index order
 *               (ballot compaction), minimum image; capacity and coincident atoms flagged; in large
 *               batches through a cell grid made each evaluation (k_tn_grid, k_tn_neighbors)
 *   per member: the embedding (k_tn_embed: edge sum, parts, norm MLP; the channel linear elt;
 *               x0_step), each interaction layer (its first channel linear: Y; k_tn_layer_b: messages,
 *               the product; its second channel linear; update_step, the last layer's in k_tn_out_a;
 *               in float32 up to TN_LAYER_FUSE_ATOMS atoms x0_step and layer 0's Y one launch,
 *               k_tn_x0_f, then the rest of each layer one launch, k_tn_layer_f), the output
 *               (k_tn_out: energy per atom, and dE/dX; k_tn_out_b also the last layer's update
 *               backward), then with forces the layers backward (per layer the
 *               second linear's backward, k_tn_b1: dE/dM, dE/dY, each edge's dE/dd; k_tn_b2: dE/dY
 *               gathered over the edges, no atomics; the first linear's backward; bx_step: dE/dX of
 *               the layer's input, and for layer 0 the embedding backward's first step, embed_back1;
 *               in float32 up to TN_LAYER_FUSE_ATOMS atoms two launches a layer, k_tn_back_f and
 *               k_tn_back_g), the embedding backward (elt's backward and the norm MLP's, beside each other:
 *               k_tn_chan_rows, or k_tn_chan_rows_split where the latter splits over k; k_tn_eb2: the
 *               LayerNorm's backward, dE/dd, dE/du of every edge) and the forces (k_tn_gather: per
 *               atom, in double, no atomics; the last member's to the caller; in float32 with the
 *               tables and OpenMM's fixed-point forces, k_tn_eb2 instead adds each edge's force to
 *               its two atoms' fixed-point sums: integer additions, the same bits in any order)
 *   finish      per-batch energies in a fixed order, the total, error flags to mapped host memory
 *               (tn_sums, tn_flags: block 0 of the last k_tn_gather, or of the last k_tn_eb2 that
 *               adds the forces, or k_tn_finish without forces)
 * The channel linears (W_I, W_A, W_S on the irreducible parts) are GEMMs over all atoms (k_tn_chan*);
 * the per-atom kernels run one block of TN_THREADS threads per atom, threads over the F channels,
 * each thread summing its channels over the edges in registers; with the tables and few atoms (fewer
 * than TN_BLOCKS_PER_SM blocks per SM), the per-edge kernels run up to TN_EDGE_GROUPS blocks per
 * atom, each every G-th edge, and the last block of an atom adds the groups' sums in group order
 * (group_sum); the per-channel steps after a linear (x0_step, update_step, bx_step) run one thread
 * per atom channel (k_tn_step; update_step and bx_step, for few atoms in float32, inside their
 * linear's launch: k_tn_chan_step). Every kernel but the first is a programmatic dependent launch
 * (TN_PDL), and no memset lies between them; before its wait (pdl_start) a GEMM loads its first
 * chunk of weights, and an edge kernel that does not follow k_tn_neighbors directly compacts its
 * first chunk of edges (see pdl_wait: what kernels before the predecessor wrote may be read), and
 * up to TN_EDGE_PRE_ATOMS atoms k_tn_layer_b, k_tn_b1 and k_tn_b2 also their first edges' table factors.
 * Every sum is formed in a fixed order, so the same inputs give the same bits. Inside stream
 * capture nothing is allocated, copied from the host, synchronised or loaded.
 */
#include "../../../cuda/positions.cuh"
#include "../tensornet.h"

#include <stdlib.h>
#include <string.h>

/* The tuning of TensorNet's CUDA evaluation, in one place. */
#define TN_THREADS 128             /* threads per atom block (a multiple of 32) */
#define TN_NBR_WARPS 4             /* atoms per block of the neighbour search */
#define TN_NBR_CELL_ATOMS 1024     /* periodic batches of at least this many atoms: the neighbour search through a cell grid (k_tn_grid), else every pair (1,536 atoms measured 5-7 us a step faster) */
#define TN_NBR_CELL_ATOMS_OPEN 4096 /* ... open batches (no box) of at least this many (a cluster of 2,100 atoms measured 8-13 us a step slower with the grid) */
#define TN_GRID_THREADS 512        /* k_tn_grid: threads per block (a batch) */
#define TN_GRID_CELLS 8192         /* ... cells per batch at most (its counts in shared memory) */
#define TN_GRID_UNROLL 4           /* ... atoms per thread whose loads are in flight together */
#define TN_CUDA_MAX_NEIGHBORS 1024 /* neighbour slots per atom at most */
#define TN_TABLE_POINTS 2048       /* float32: grid points of the radial tables over [d0, cutoff_upper] (see RadialTable) */
#define TN_GEMM_K 32               /* k_tn_chan: the reduction's chunk through shared memory (a multiple of 4) */
#define TN_GEMM_WIDE_ATOMS 2048    /* k_tn_chan: from this many atoms, 8 atoms per block (2 per warp), else 4 */
#define TN_CHAN_NARROW_ATOMS 64   /* k_tn_chan_tc: up to this many atoms, 8 outputs per block (more, shorter blocks), else 32 */
#define TN_CHAN_MEDIUM_ATOMS 256  /* ... up to this many, 16 outputs per block (k_tn_chan_rows keeps 32: measured no better) */
#define TN_CHAN_DEEP_ATOMS 1024    /* k_tn_chan_tc: up to this many atoms, k in chunks of 64 (half the dependent loads), else 32 */
#define TN_ROWS_NARROW_ATOMS 64   /* k_tn_rows: up to this many atoms, 4 rows per block (more, shorter blocks), else 16 */
#define TN_ROWS_K 64               /* k_tn_rows: k in chunks of this many (32 and 128 measured slower; float64 at 128 would exceed 48 KB of static shared memory) */
#define TN_EDGE_UNROLL 4           /* the per-edge loops of the edge kernels: edges unrolled (loads in flight; 1 and 2 measured slower) */
#define TN_EDGE_PRE 4              /* k_tn_layer_b, k_tn_b1, k_tn_b2 with tables: each thread's table factors of its block's first this many edges before the wait */
#define TN_EDGE_PRE_ATOMS 256      /* ... up to this many atoms (their own instances: beyond, the registers of those factors cost more than they save) */
#define TN_EDGE_CHUNK 64           /* per-edge block sums gathered per chunk of this many edges */
#define TN_EW_THREADS 128          /* threads per block of the per-channel kernels */
#define TN_PDL 1                   /* programmatic dependent launches: each kernel of an evaluation but the first launches while its predecessor drains */
#define TN_EDGE_GROUPS 4           /* the per-atom edge kernels (tables): at most this many blocks per atom, each every G-th edge */
#define TN_BLOCKS_PER_SM 2         /* ... as many as give the GPU this many blocks per SM (few atoms) */
#define TN_HEAD_THREADS 128        /* k_tn_head: threads per atom (block) */
#define TN_LINEAR_ATOMS 64         /* the output linear inside k_tn_out_a and k_tn_out_b for up to this many atoms (a block per atom with all its weights: 220 atoms measured slower), where its weights fit in shared memory */
#define TN_HEAD_ATOMS 256          /* k_tn_head for up to this many atoms (a block per atom, each copying the weights: 774 atoms measured slower), where its weights fit in shared memory, else the row GEMMs */
#define TN_CLUSTER_SUM 1           /* ... each atom's blocks one thread-block cluster: their sums added through shared memory (sm_90) */
#define TN_CHAN_STEP_ATOMS 64      /* float32: up to this many atoms a channel linear and the per-channel step after it are one launch (k_tn_chan_step; 16 outputs per block up to 256 atoms measured slower) */
#define TN_ROWS_SPLIT_ATOMS 256    /* float32 with clusters: up to this many atoms the row GEMMs split over k (k_tn_rows_split) */
#define TN_ROWS_SPLIT_MAX 4        /* ... into at most this many parts (a cluster each tile; 8 measured slower at ten molecules) */
#define TN_ROWS_SPLIT_K 128        /* ... where k is longer than this */
#define TN_LAYER_FUSE_ATOMS 64     /* float32 with clusters: up to this many atoms each layer's messages, second linear, update and the next layer's first linear are one launch (k_tn_layer_f), and so on (k_tn_x0_f, k_tn_back_f, k_tn_back_g) */
#define TN_LF_WARPS 8              /* ... its warps per block (each over F / TN_LF_WARPS of a linear's k) */
#define TN_LF_MAX_F 128            /* ... for F up to this (a multiple of 32): each lane's weights, 3 F / TN_LF_WARPS per linear, in registers */
#define TN_TIMELINE 0              /* diagnostic only: 1 records each launch's start and the end of its wait (block 0, globaltimer) and prints the last 200 to stderr when a plan is freed (scripts/gpu-test.sh timeline) */

static constexpr int tn_edge_unroll = TN_EDGE_UNROLL; /* as #pragma unroll takes it */

#if TN_TIMELINE
#include <stdio.h>
/* Per launch (in launch order, a ring of 256): when block 0 started and when its wait for the
   predecessor returned. A launch's "wait to the next wait" is its time on the chain of launches:
   from its predecessor's end to its own (scripts/tn-timeline.py). */
__device__ unsigned long long tn_tl_t[2][256];
__device__ unsigned tn_tl_n;
__device__ __forceinline__ unsigned long long tn_clock() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ void tn_pdl_start() {
    const bool first = blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0;
    const unsigned long long t0 = first ? tn_clock() : 0;
    pdl_wait();
    if (first) {
        const unsigned long long t1 = tn_clock();
        const unsigned k = atomicAdd(&tn_tl_n, 1u) % 256;
        tn_tl_t[0][k] = t0, tn_tl_t[1][k] = t1;
    }
    pdl_trigger();
}
#define pdl_start tn_pdl_start
static void tn_timeline_print(int n) {
    unsigned long long t[2][256];
    unsigned c = 0;
    if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpyFromSymbol(t, tn_tl_t, sizeof t) != cudaSuccess ||
        cudaMemcpyFromSymbol(&c, tn_tl_n, sizeof c) != cudaSuccess) {
        fprintf(stderr, "TL: no timeline (%s)\n", cudaGetErrorString(cudaGetLastError()));
        return;
    }
    fprintf(stderr, "TL atoms %d launches %u\n", n, c);
    for (unsigned q = c >= 200 ? c - 200 : 1; q + 1 < c; q++) {
        const unsigned k = q % 256, kp = (q - 1) % 256, kn = (q + 1) % 256;
        fprintf(stderr, "TL %u start-after-prev-wait %.2f waited %.2f this-wait-to-next-wait %.2f\n", q, (double)(t[0][k] - t[1][kp]) / 1e3,
                (double)(t[1][k] - t[0][k]) / 1e3, (double)(t[1][kn] - t[1][k]) / 1e3);
    }
    const unsigned zero = 0;
    cudaMemcpyToSymbol(tn_tl_n, &zero, sizeof zero);
}
#endif

#define TN_NI 10 /* irreducible components per channel: I (1), A (3), S (6) */
#define TN_ALL_ATOMS 5 /* k_tn_chan_step: atoms per block (their 5, 15 and 30 rows of the three parts fill 1, 1 and 2 tiles of 16) */
/* The part (0: I, 1: A, 2: S) of component c; a constant where loops over c unroll. */
__device__ __forceinline__ constexpr int part_of(int c) { return c == 0 ? 0 : (c < 4 ? 1 : 2); }

enum { TN_FLAG_NONFINITE = 0, TN_FLAG_CAPACITY = 1, TN_FLAG_COINCIDENT = 2, TN_FLAG_ENERGY = 3, TN_FLAGS = 4 };
static const int TN_FLAG_CLEAR[TN_FLAGS] = {0x7fffffff, 0, 0, 0};

/* ------------------------------------------------------------------ device data */

template <typename real> struct Lin {
    const real *w, *wt, *b; /* w: n_out × n_in; wt: its transpose; b: n_out or NULL */
    const real *w2, *wt2;   /* float32 channel linears: w and wt as TF32 (high, low) pairs (k_tn_chan_tc), else NULL */
    int n_out, n_in;
};

/* One member, by value as a kernel argument (the layers apart: TnLayer). */
template <typename real> struct TnNet {
    int F, R, L, H, group, act, rbf; /* act: the activation (TN_ACT_*); rbf: the radial basis (TN_RBF_*) */
    double cl, cu, alpha; /* the radial basis and the cutoff are computed in double (rbf_sh) */
    double th;            /* float32: the tables' step, (cu − max(cl, 0)) / (TN_TABLE_POINTS − 1), once per plan */
    real stdv;
    const double *means, *betas; /* R each */
    const real *emb, *init_w, *init_b, *out_w, *out_b;
    const double* atomref; /* max_z, or NULL */
    Lin<real> emb2, dp[3], elt[3], els[2], linear, head[TN_MAX_HEAD];
    int wide; /* the widest of 3F and the head's widths */
    const real* emb_table; /* float32: the embedding's radial factors (RadialTable), else NULL */
    const real *zp, *zq;   /* max_z × F each: the embedding pair's two halves per element (k_tn_z) */
};
template <typename real> struct TnLayer {
    Lin<real> lls[3], llt[6];
    const real* table; /* float32: the layer's radial filter (RadialTable), else NULL */
};

/*
 * Radial tables (float32 evaluation). Each interaction layer's filter f(d) = SiLU(L₃ SiLU(L₂ SiLU(L₁
 * rbf(d)))) · C(d) and the embedding's factors dp_q(rbf(d)) · C(d) (q = 1, 2, 3) are 3F functions of
 * the distance alone. They are tabulated once per plan, exactly in double (k_tn_table_layer,
 * k_tn_table_embed), at TN_TABLE_POINTS points d_g = d0 + g h over [d0, cutoff_upper] (d0 =
 * cutoff_lower, or 0): row g holds the 3F values f_g, the 3F slopes f'_g and the 3F steps
 * Δf_g = f_g+1 − f_g (the difference taken in double, then rounded). Between two points a factor is
 * the cubic Hermite interpolant of the values and slopes, f_g + H(s) Δf_g + h (…) f'_g + h (…) f'_g+1,
 * and its derivative is that cubic's own derivative: the forces are the gradient of the energy
 * that is computed, so that MD conserves it (an interpolant of the slopes for the forces, beside one
 * of the values for the energy, made a 100-molecule NVE run drift several times as fast), and Δf/h
 * is not the difference of two rounded values (which would be 2e-5 off in float32). Per edge
 * 4 · 3F table reads (3 · 3F for the derivatives alone) instead of the 8F² multiply-adds of the
 * filter network, forward and backward. Below d0 (the self loop where cutoff_lower > 0) every factor
 * is 0. The values' interpolation error is O(h⁴), the derivatives' O(h³): about (h/w)⁴/384 and
 * (h/w)³/125 relative for features of width w; with 32 expnorm functions over 5 Å (h = 2.4e-3 Å)
 * the narrowest, w ≈ 0.065 Å at 0.74 Å, give 2e-10 and 4e-7. test_tensornet_cuda measures the
 * total against the CPU.
 */
struct RadialPoint {
    int g;          /* interval [d_g, d_g+1], or -1: below d0 */
    double s, h;    /* position in it (0..1), its width */
};
template <typename real> __device__ __forceinline__ RadialPoint radial_point(const TnNet<real>& N, double d) {
    RadialPoint p;
    const double d0 = N.cl > 0 ? N.cl : 0.0;
    p.h = N.th;
    if (d < d0) {
        p.g = -1, p.s = 0;
        return p;
    }
    const double x = (d - d0) / p.h;
    int g = (int)x;
    if (g > TN_TABLE_POINTS - 2) g = TN_TABLE_POINTS - 2;
    p.g = g, p.s = x - g;
    return p;
}
/* Factor k (of 3F) of a table at p: the cubic's value, and its derivative d/dd when dv != NULL:
   4 reads (f_g, the slopes f'_g, f'_g+1 and the step Δf_g). */
template <typename real>
__device__ __forceinline__ real radial_value(const real* __restrict__ T, int F3, const RadialPoint& p, int k, real* dv) {
    if (p.g < 0) {
        if (dv) *dv = 0;
        return 0;
    }
    const real* r0 = T + (size_t)p.g * 3 * F3;
    const real* r1 = r0 + 3 * F3;
    const real h = (real)p.h, s = (real)p.s, s2 = s * s, s3 = s2 * s;
    const real f0 = r0[k], d0 = r0[F3 + k] * h, df = r0[2 * F3 + k], d1 = r1[F3 + k] * h;
    if (dv) *dv = (real(6) * (s - s2) * df + (real(3) * s2 - real(4) * s + real(1)) * d0 + (real(3) * s2 - real(2) * s) * d1) / h;
    return f0 + (real(3) * s2 - real(2) * s3) * df + (s3 - real(2) * s2 + s) * d0 + (s3 - s2) * d1;
}
/* Factor k's derivative d/dd alone (as radial_value's): 3 reads. */
template <typename real> __device__ __forceinline__ real radial_deriv(const real* __restrict__ T, int F3, const RadialPoint& p, int k) {
    if (p.g < 0) return 0;
    const real* r0 = T + (size_t)p.g * 3 * F3;
    const real* r1 = r0 + 3 * F3;
    const real h = (real)p.h, s = (real)p.s, s2 = s * s;
    const real d0 = r0[F3 + k] * h, df = r0[2 * F3 + k], d1 = r1[F3 + k] * h;
    return (real(6) * (s - s2) * df + (real(3) * s2 - real(4) * s + real(1)) * d0 + (real(3) * s2 - real(2) * s) * d1) / h;
}

/* The evaluation's buffers (device pointers). Edge e = i · (cap + 1) + s of atom i: s = 0 its self
   loop, s = k + 1 its neighbour k. */
template <typename real> struct TnBuf {
    int n, cap;
    const int *z, *nbr_n, *nbr_j;
    const nnp_double4* nbr_r; /* (r_j − r_i, d), in double whatever real is (see rbf_sh) */
    const real* cq;     /* 1 + 0.1 q of each atom's batch */
    real *Xe, *X, *Yirr, *Mirr, *B, *dX, *gX, *gM, *gY, *fac, *gd, *gu;
    real *WT, *nrm, *h1, *h2, *xhat, *rstd; /* the embedding's, kept for its backward pass */
    real *ln, *a1, *gn; /* the norm MLP's input (backward: its gradient), first activation (g1), dE/dnrm's */
    real *oxhat, *oy, *oyl, *oh, *orstd; /* the output's LayerNorm, MLP input, linear, its SiLU, 1/σ */
    real *hpre, *hact, *gA, *gB; /* the head's pre-activations and activations (layer k at n · offset_k),
                                    two gradients of up to n × wide */
    real *S1, *S2; /* 10F per atom: a channel linear's input and output */
    real* S3;      /* 10F per atom: the per-channel steps' parts for the next channel linear (never its own input) */
    double* atom_e;
    real* split;      /* edge groups > 1: each group's partial sums, gridDim.y × 10F per atom (group_sum) */
    int* split_count; /* per atom: the groups done, back to 0 by the last (group_sum) */
};

/* ------------------------------------------------------------------ device helpers */

/* The activation `kind` (TN_ACT_*) and its derivative, as the CPU evaluation (tensornet.c) and torch
   compute them: SiLU and Swish z σ(z); the shifted softplus (z above 20, else log1p(exp(z))) less
   log 2 in float32; tanh; σ; Mish z tanh(log1p(exp(z))). "SiLU" in the comments below stands for the
   model's activation, whichever it is. SiLU and Swish run inline; the others out of line, so a SiLU
   model's kernels keep only the compare. */
template <typename real> __device__ __noinline__ real act_other(int kind, real z) {
    switch (kind) {
    case TN_ACT_SSP: return (z > real(20) ? z : log1p(dexp(z))) - real(0.693147182464599609375);
    case TN_ACT_TANH: return tanh(z);
    case TN_ACT_SIGMOID: return real(1) / (real(1) + dexp(-z));
    default: return z * tanh(log1p(dexp(z))); /* TN_ACT_MISH */
    }
}
template <typename real> __device__ __noinline__ real act_d_other(int kind, real z) {
    const real s = real(1) / (real(1) + dexp(-z));
    switch (kind) {
    case TN_ACT_SSP: return z > real(20) ? real(1) : s;
    case TN_ACT_TANH: {
        const real t = tanh(z);
        return real(1) - t * t;
    }
    case TN_ACT_SIGMOID: return s * (real(1) - s);
    default: { /* TN_ACT_MISH */
        const real t = tanh(log1p(dexp(z)));
        return t + z * s * (real(1) - t * t);
    }
    }
}
template <typename real> __device__ __forceinline__ real act(int kind, real z) {
    if (kind != TN_ACT_SILU && kind != TN_ACT_SWISH) return act_other(kind, z);
    return z / (real(1) + dexp(-z));
}
template <typename real> __device__ __forceinline__ real act_d(int kind, real z) {
    if (kind != TN_ACT_SILU && kind != TN_ACT_SWISH) return act_d_other(kind, z);
    const real s = real(1) / (real(1) + dexp(-z));
    return s * (real(1) + z * (real(1) - s));
}

/* A sum over the block in a fixed order (every thread gets it). red: TN_THREADS / 32 reals. */
template <typename real> __device__ real block_sum(real v, real* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    __syncthreads(); /* red may still be read by an earlier call */
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    real s = 0;
    for (int w = 0; w < TN_THREADS / 32; w++) s += red[w];
    return s;
}

/* Σ_k a[k · stride] x[k] over n terms, in four interleaved partial sums (independent loads in
   flight), added in a fixed order. */
template <typename real> __device__ __forceinline__ real dot_strided(const real* __restrict__ a, size_t stride, const real* x, int n) {
    real s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int k = 0;
#pragma unroll 4
    for (; k + 3 < n; k += 4) {
        s0 += a[(size_t)k * stride] * x[k];
        s1 += a[(size_t)(k + 1) * stride] * x[k + 1];
        s2 += a[(size_t)(k + 2) * stride] * x[k + 2];
        s3 += a[(size_t)(k + 3) * stride] * x[k + 3];
    }
    for (; k < n; k++) s0 += a[(size_t)k * stride] * x[k];
    return (s0 + s1) + (s2 + s3);
}
/* K sums over the block at once (one pair of barriers), each in block_sum's order; red: K · TN_THREADS / 32 reals. */
template <int K, typename real> __device__ void block_sums(real (&v)[K], real* red) {
#pragma unroll
    for (int q = 0; q < K; q++)
        for (int o = 16; o > 0; o >>= 1) v[q] += __shfl_down_sync(0xffffffffu, v[q], o);
    __syncthreads(); /* red may still be read by an earlier call */
    if ((threadIdx.x & 31) == 0)
        for (int q = 0; q < K; q++) red[q * (TN_THREADS / 32) + (threadIdx.x >> 5)] = v[q];
    __syncthreads();
#pragma unroll
    for (int q = 0; q < K; q++) {
        real s = 0;
        for (int w = 0; w < TN_THREADS / 32; w++) s += red[q * (TN_THREADS / 32) + w];
        v[q] = s;
    }
}

/* y = W x + b, one thread per output (x: shared). The caller synchronises. */
template <typename real> __device__ void lin_fwd(const Lin<real>& L, const real* x, real* y) {
    for (int o = threadIdx.x; o < L.n_out; o += TN_THREADS)
        y[o] = (L.b ? L.b[o] : real(0)) + dot_strided(L.wt + o, (size_t)L.n_out, x, L.n_in);
}
/* gx = Wᵀ gy, one thread per input (gy: shared). The caller synchronises. */
template <typename real> __device__ void lin_bwd(const Lin<real>& L, const real* gy, real* gx) {
    for (int k = threadIdx.x; k < L.n_in; k += TN_THREADS) gx[k] = dot_strided(L.w + k, (size_t)L.n_in, gy, L.n_out);
}

/* Channel f of a per-atom block of n components (layout c · F + f). */
template <typename real, int N> __device__ __forceinline__ void ld(const real* P, int F, int f, real (&v)[N]) {
#pragma unroll
    for (int c = 0; c < N; c++) v[c] = P[(size_t)c * F + f];
}
template <typename real, int N> __device__ __forceinline__ void st(real* P, int F, int f, const real (&v)[N]) {
#pragma unroll
    for (int c = 0; c < N; c++) P[(size_t)c * F + f] = v[c];
}

template <typename real> __device__ __forceinline__ void decompose(const real (&m)[9], real (&t)[TN_NI]) {
    const real I = (m[0] + m[4] + m[8]) / real(3);
    t[0] = I;
    t[1] = real(0.5) * (m[1] - m[3]), t[2] = real(0.5) * (m[2] - m[6]), t[3] = real(0.5) * (m[5] - m[7]);
    t[4] = m[0] - I, t[5] = m[4] - I, t[6] = m[8] - I;
    t[7] = real(0.5) * (m[1] + m[3]), t[8] = real(0.5) * (m[2] + m[6]), t[9] = real(0.5) * (m[5] + m[7]);
}
template <typename real> __device__ __forceinline__ void decompose_adj(const real (&g)[TN_NI], real (&gm)[9]) {
    const real tr = (g[4] + g[5] + g[6]) / real(3), i3 = g[0] / real(3);
    gm[0] = i3 + g[4] - tr, gm[4] = i3 + g[5] - tr, gm[8] = i3 + g[6] - tr;
    gm[1] = real(0.5) * (g[1] + g[7]), gm[3] = real(0.5) * (g[7] - g[1]);
    gm[2] = real(0.5) * (g[2] + g[8]), gm[6] = real(0.5) * (g[8] - g[2]);
    gm[5] = real(0.5) * (g[3] + g[9]), gm[7] = real(0.5) * (g[9] - g[3]);
}
template <typename real> __device__ __forceinline__ void compose(const real (&t)[TN_NI], real (&m)[9]) {
    m[0] = t[0] + t[4], m[4] = t[0] + t[5], m[8] = t[0] + t[6];
    m[1] = t[7] + t[1], m[3] = t[7] - t[1];
    m[2] = t[8] + t[2], m[6] = t[8] - t[2];
    m[5] = t[9] + t[3], m[7] = t[9] - t[3];
}
template <typename real> __device__ __forceinline__ void compose_adj(const real (&g)[9], real (&gt)[TN_NI]) {
    gt[0] = g[0] + g[4] + g[8];
    gt[4] = g[0], gt[5] = g[4], gt[6] = g[8];
    gt[1] = g[1] - g[3], gt[7] = g[1] + g[3];
    gt[2] = g[2] - g[6], gt[8] = g[2] + g[6];
    gt[3] = g[5] - g[7], gt[9] = g[5] + g[7];
}
/* C += s A B, C += s Aᵀ B, C += s A Bᵀ (3×3, row-major) */
template <typename real> __device__ __forceinline__ void mm_add(real s, const real (&A)[9], const real (&B)[9], real (&C)[9]) {
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++) {
            real v = 0;
            for (int k = 0; k < 3; k++) v += A[r * 3 + k] * B[k * 3 + c];
            C[r * 3 + c] += s * v;
        }
}
template <typename real> __device__ __forceinline__ void mm_tn_add(real s, const real (&A)[9], const real (&B)[9], real (&C)[9]) {
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++) {
            real v = 0;
            for (int k = 0; k < 3; k++) v += A[k * 3 + r] * B[k * 3 + c];
            C[r * 3 + c] += s * v;
        }
}
template <typename real> __device__ __forceinline__ void mm_nt_add(real s, const real (&A)[9], const real (&B)[9], real (&C)[9]) {
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++) {
            real v = 0;
            for (int k = 0; k < 3; k++) v += A[r * 3 + k] * B[c * 3 + k];
            C[r * 3 + c] += s * v;
        }
}
template <typename real> __device__ __forceinline__ real norm1(const real (&m)[9]) {
    real s = 1;
    for (int c = 0; c < 9; c++) s += m[c] * m[c];
    return s;
}

/* Radial basis (and its derivative) at d into shared rb (drb), threads over the R functions. In
   double whatever real is: exp(−β (t − μ)²) with β of order R² loses about 2β|t − μ| ulps of t
   (float32: 1e-6 relative), and the GPU's float64 units make R exponentials per edge cheap. */
template <typename real> __device__ void rbf_sh(const TnNet<real>& N, double d, real* rb, real* drb) {
    if (N.rbf == TN_RBF_GAUSS) { /* exp(−β (d − μ)²), no cutoff of its own */
        for (int r = threadIdx.x; r < N.R; r += TN_THREADS) {
            const double x = d - N.means[r], e = exp(-N.betas[r] * x * x);
            rb[r] = (real)e;
            if (drb) drb[r] = (real)(-2 * N.betas[r] * x * e);
        }
        return;
    }
    const double cu = N.cu, pi = TN_PI, alpha = N.alpha;
    double phi = 0, dphi = 0;
    if (d < cu) {
        phi = 0.5 * (cos(pi * d / cu) + 1);
        dphi = -0.5 * pi / cu * sin(pi * d / cu);
    }
    const double t = exp(alpha * (N.cl - d));
    for (int r = threadIdx.x; r < N.R; r += TN_THREADS) {
        const double beta = N.betas[r], x = t - N.means[r];
        const double e = exp(-beta * x * x);
        rb[r] = (real)(phi * e);
        if (drb) drb[r] = (real)(dphi * e + phi * e * 2 * alpha * beta * t * x);
    }
}
/* Cosine cutoff and its derivative at d (in double, as the radial basis). */
template <typename real> __device__ __forceinline__ void cutoff_fn(const TnNet<real>& N, double d, real* c, real* dc) {
    const double cl = N.cl, cu = N.cu, pi = TN_PI;
    double cv = 0, dcv = 0;
    if (cl > 0) {
        if (d > cl && d < cu) {
            const double k = pi * 2 / (cu - cl);
            const double a = k * (d - cl) + pi;
            cv = 0.5 * (cos(a) + 1);
            dcv = -0.5 * sin(a) * k;
        }
    } else if (d < cu) {
        cv = 0.5 * (cos(pi * d / cu) + 1);
        dcv = -0.5 * pi / cu * sin(pi * d / cu);
    }
    *c = (real)cv, *dc = (real)dcv;
}
template <typename real> __device__ __forceinline__ bool edge_on(const TnNet<real>& N, double d) { return d >= N.cl && d < N.cu; }

/* Edge s of atom i: neighbour j, distance d, u = (r_i − r_j) / d (0 for the self loop). */
template <typename real> __device__ __forceinline__ int edge_geometry(const TnBuf<real>& b, int i, int s, double* d, real (&u)[3]) {
    if (s == 0) {
        *d = 0, u[0] = u[1] = u[2] = 0;
        return i;
    }
    const size_t k = (size_t)i * b.cap + (s - 1);
    const nnp_double4 r = b.nbr_r[k];
    *d = r.w;
    u[0] = (real)(-r.x / r.w), u[1] = (real)(-r.y / r.w), u[2] = (real)(-r.z / r.w);
    return b.nbr_j[k];
}

/* Shared memory: one arena per block, taken in order. */
template <typename real> struct Arena {
    real* p;
    __device__ real* take(size_t n) {
        real* q = p;
        p += (n + 1) / 2 * 2; /* keeps 16-byte alignment for doubles' pairs and floats' quads loosely */
        return q;
    }
};

/* The interaction layer's radial MLP at d (block): fac = SiLU(L₃ SiLU(L₂ SiLU(L₁ rbf))) · C(d),
   keeping rb, drb (if non-NULL), h1, h2, h3 (pre-activations) for the backward pass; a: 2F work. */
template <typename real>
__device__ void edge_mlp(const TnNet<real>& N, const TnLayer<real>& Ly, double d, real* rb, real* drb, real* h1, real* h2, real* h3,
                         real* a, real* fac) {
    const int F = N.F;
    rbf_sh(N, d, rb, drb);
    __syncthreads();
    lin_fwd(Ly.lls[0], rb, h1);
    __syncthreads();
    for (int k = threadIdx.x; k < F; k += TN_THREADS) a[k] = act(N.act, h1[k]);
    __syncthreads();
    lin_fwd(Ly.lls[1], a, h2);
    __syncthreads();
    for (int k = threadIdx.x; k < 2 * F; k += TN_THREADS) a[k] = act(N.act, h2[k]);
    __syncthreads();
    lin_fwd(Ly.lls[2], a, h3);
    __syncthreads();
    real c, dc;
    cutoff_fn(N, d, &c, &dc);
    for (int k = threadIdx.x; k < 3 * F; k += TN_THREADS) fac[k] = act(N.act, h3[k]) * c;
}

/* dE/dd of the radial MLP given dE/dfac (gfac, shared); keep as left by edge_mlp; work: 6F + R. */
template <typename real>
__device__ real edge_mlp_back(const TnNet<real>& N, const TnLayer<real>& Ly, double d, const real* gfac, const real* drb, const real* h1,
                              const real* h2, const real* h3, real* work, real* red) {
    const int F = N.F;
    real c, dc;
    cutoff_fn(N, d, &c, &dc);
    real *g3 = work, *g2 = g3 + 3 * F, *g1 = g2 + 2 * F, *grb = g1 + F;
    real part = 0;
    for (int k = threadIdx.x; k < 3 * F; k += TN_THREADS) {
        part += gfac[k] * act(N.act, h3[k]);
        g3[k] = gfac[k] * c * act_d(N.act, h3[k]);
    }
    const real gc = block_sum(part, red); /* also the barrier after g3 */
    lin_bwd(Ly.lls[2], g3, g2);
    for (int k = threadIdx.x; k < 2 * F; k += TN_THREADS) g2[k] *= act_d(N.act, h2[k]);
    __syncthreads();
    lin_bwd(Ly.lls[1], g2, g1);
    for (int k = threadIdx.x; k < F; k += TN_THREADS) g1[k] *= act_d(N.act, h1[k]);
    __syncthreads();
    lin_bwd(Ly.lls[0], g1, grb);
    part = 0;
    for (int r = threadIdx.x; r < N.R; r += TN_THREADS) part += grb[r] * drb[r];
    return gc * dc + block_sum(part, red);
}

/* ------------------------------------------------------------------ kernels */

/* The radial tables (RadialTable), exactly in double: one block per grid point, the radial basis
   and the filter network with their derivatives along d (forward mode), at the point and, for the
   step to it, at the next. */
__device__ __forceinline__ double act_dd(int kind, double z) {
    const double s = 1 / (1 + exp(-z)), ds = s * (1 - s);
    switch (kind) {
    case TN_ACT_SSP: return z > 20 ? 0 : ds;
    case TN_ACT_TANH: {
        const double t = tanh(z);
        return -2 * t * (1 - t * t);
    }
    case TN_ACT_SIGMOID: return ds * (1 - 2 * s);
    case TN_ACT_MISH: { /* f = z T, T = tanh(softplus z): f'' = 2T' + z T'' */
        const double t = tanh(log1p(exp(z))), dt = (1 - t * t) * s;
        return 2 * dt + z * (-2 * t * dt * s + (1 - t * t) * ds);
    }
    default: return ds * (2 + z * (1 - 2 * s));
    }
}
/* rb, rb', rb'' at d (threads over the R functions), and the cutoff c, c', c''. */
__device__ void table_basis(const TnNet<double>& N, double d, double* rb, double* drb, double* ddrb, double* c) {
    const double cu = N.cu, cl = N.cl, pi = TN_PI, al = N.alpha, w = pi / cu;
    double phi = 0, dphi = 0, ddphi = 0;
    if (d < cu) phi = 0.5 * (cos(w * d) + 1), dphi = -0.5 * w * sin(w * d), ddphi = -0.5 * w * w * cos(w * d);
    const double t = exp(al * (cl - d)), dt = -al * t, ddt = al * al * t;
    for (int r = threadIdx.x; r < N.R; r += TN_THREADS) {
        if (N.rbf == TN_RBF_GAUSS) { /* exp(−β (d − μ)²) */
            const double beta = N.betas[r], x = d - N.means[r], e = exp(-beta * x * x);
            rb[r] = e, drb[r] = -2 * beta * x * e, ddrb[r] = (4 * beta * beta * x * x - 2 * beta) * e;
            continue;
        }
        const double beta = N.betas[r], x = t - N.means[r];
        const double e = exp(-beta * x * x), de = -2 * beta * x * dt * e;
        const double dde = (-2 * beta * dt * dt - 2 * beta * x * ddt + 4 * beta * beta * x * x * dt * dt) * e;
        rb[r] = phi * e, drb[r] = dphi * e + phi * de, ddrb[r] = ddphi * e + 2 * dphi * de + phi * dde;
    }
    c[0] = c[1] = c[2] = 0;
    if (cl > 0) {
        if (d > cl && d < cu) {
            const double k = pi * 2 / (cu - cl), a = k * (d - cl) + pi;
            c[0] = 0.5 * (cos(a) + 1), c[1] = -0.5 * sin(a) * k, c[2] = -0.5 * cos(a) * k * k;
        }
    } else if (d < cu) {
        c[0] = 0.5 * (cos(w * d) + 1), c[1] = -0.5 * w * sin(w * d), c[2] = -0.5 * w * w * cos(w * d);
    }
}
/* y, y', y'' of y = W x + b along d (threads over the outputs); the caller synchronises. */
__device__ void table_lin(const Lin<double>& L, const double* x, const double* dx, const double* ddx, double* y, double* dy,
                          double* ddy) {
    for (int o = threadIdx.x; o < L.n_out; o += TN_THREADS) {
        double v = L.b ? L.b[o] : 0.0, dv = 0, ddv = 0;
        for (int k = 0; k < L.n_in; k++) {
            const double w = L.wt[(size_t)k * L.n_out + o];
            v += w * x[k], dv += w * dx[k], ddv += w * ddx[k];
        }
        y[o] = v, dy[o] = dv, ddy[o] = ddv;
    }
}
/* The activation of y along d, in place: a = g(y), a' = g'(y) y', a'' = g''(y) y'² + g'(y) y''. */
__device__ void table_act(int kind, int n, double* y, double* dy, double* ddy) {
    for (int k = threadIdx.x; k < n; k += TN_THREADS) {
        const double z = y[k], g1 = act_d(kind, z), g2 = act_dd(kind, z);
        ddy[k] = g2 * dy[k] * dy[k] + g1 * ddy[k], dy[k] = g1 * dy[k], y[k] = act(kind, z);
    }
}
/* Row g of a table from the 3F factors v·c at d_g (pass 0: the values and slopes, the values also
   in double to fg) and at d_g+1 (pass 1: the steps). Each thread keeps to its own k. */
__device__ void table_row(int pass, int F3, const double* v, const double* dv, const double* c, double* fg, float* row) {
    for (int k = threadIdx.x; k < F3; k += TN_THREADS) {
        const double f = v[k] * c[0];
        if (pass == 0) {
            row[k] = (float)f, fg[k] = f;
            row[F3 + k] = (float)(dv[k] * c[0] + v[k] * c[1]);
        } else
            row[2 * F3 + k] = (float)(f - fg[k]);
    }
}
__global__ void __launch_bounds__(TN_THREADS) k_tn_table_layer(const TnNet<double> N, const TnLayer<double> Ly, float* __restrict__ T) {
    extern __shared__ __align__(16) unsigned char tn_smem[];
    Arena<double> A = {(double*)tn_smem};
    const int g = blockIdx.x, F = N.F;
    double *x = A.take(N.R), *dx = A.take(N.R), *ddx = A.take(N.R), *y1 = A.take(F), *dy1 = A.take(F), *ddy1 = A.take(F),
           *y2 = A.take(2 * F), *dy2 = A.take(2 * F), *ddy2 = A.take(2 * F), *y3 = A.take(3 * F), *dy3 = A.take(3 * F),
           *ddy3 = A.take(3 * F), *fg = A.take(3 * F);
    const double d0 = N.cl > 0 ? N.cl : 0.0;
    for (int pass = 0; pass < 2; pass++) {
        const double d = d0 + (g + pass) * (N.cu - d0) / (TN_TABLE_POINTS - 1);
        double c[3];
        table_basis(N, d, x, dx, ddx, c);
        __syncthreads();
        table_lin(Ly.lls[0], x, dx, ddx, y1, dy1, ddy1);
        __syncthreads();
        table_act(N.act, F, y1, dy1, ddy1);
        __syncthreads();
        table_lin(Ly.lls[1], y1, dy1, ddy1, y2, dy2, ddy2);
        __syncthreads();
        table_act(N.act, 2 * F, y2, dy2, ddy2);
        __syncthreads();
        table_lin(Ly.lls[2], y2, dy2, ddy2, y3, dy3, ddy3);
        __syncthreads();
        table_act(N.act, 3 * F, y3, dy3, ddy3);
        __syncthreads();
        table_row(pass, 3 * F, y3, dy3, c, fg, T + (size_t)g * 9 * F);
        __syncthreads();
    }
}
__global__ void __launch_bounds__(TN_THREADS) k_tn_table_embed(const TnNet<double> N, float* __restrict__ T) {
    extern __shared__ __align__(16) unsigned char tn_smem[];
    Arena<double> A = {(double*)tn_smem};
    const int g = blockIdx.x, F = N.F;
    double *x = A.take(N.R), *dx = A.take(N.R), *ddx = A.take(N.R), *p = A.take(3 * F), *dp = A.take(3 * F), *ddp = A.take(3 * F),
           *fg = A.take(3 * F);
    const double d0 = N.cl > 0 ? N.cl : 0.0;
    for (int pass = 0; pass < 2; pass++) {
        const double d = d0 + (g + pass) * (N.cu - d0) / (TN_TABLE_POINTS - 1);
        double c[3];
        table_basis(N, d, x, dx, ddx, c);
        __syncthreads();
        for (int q = 0; q < 3; q++) table_lin(N.dp[q], x, dx, ddx, p + q * F, dp + q * F, ddp + q * F);
        __syncthreads();
        table_row(pass, 3 * F, p, dp, c, fg, T + (size_t)g * 9 * F);
        __syncthreads();
    }
}

/* Each atom's position in double (the caller's units × to_unit), its slot in the caller's buffers
   and its sums cleared. Without sorted: thread i is atom i, at the slot of its particle. With
   OpenMM's reordered buffers (sorted: the particle at each slot), thread t is slot t, and the atom
   of its particle (atom_of, −1 for particles outside the plan) takes it: one pass, no inverse of
   the order first. */
__global__ void k_tn_positions(const void* __restrict__ positions, int format, const int* __restrict__ sorted,
                               const int* __restrict__ atom_of, int slots, const int* __restrict__ particle, int n, double to_unit,
                               nnp_double4* __restrict__ pos, int* __restrict__ force_index, int* __restrict__ flags, double* __restrict__ atom_e,
                               double* __restrict__ force) {
    pdl_start();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    int i = t, slot;
    if (sorted != NULL) {
        if (t >= slots) return;
        i = atom_of[sorted[t]], slot = t;
        if (i < 0) return;
    } else {
        if (t >= n) return;
        slot = particle[t];
    }
    atom_e[i] = 0; /* the members add to these (k_tn_out_e, k_tn_gather) */
    if (force) force[3 * (size_t)i] = force[3 * (size_t)i + 1] = force[3 * (size_t)i + 2] = 0;
    int at;
    bool finite;
    pos[i] = load_position<double>(positions, format, NULL, slot, to_unit, &at, &finite);
    force_index[i] = at;
    if (!finite) atomicMin(&flags[TN_FLAG_NONFINITE], i);
}

__device__ __forceinline__ void nbr_pair(const nnp_double4* __restrict__ pos, const nnp_double4& ri, int j, const Box<double>& box,
                                         double& dx, double& dy, double& dz, double& d2) {
    const nnp_double4 rj = pos[j];
    dx = rj.x - ri.x, dy = rj.y - ri.y, dz = rj.z - ri.z;
    min_image(dx, dy, dz, box);
    d2 = dx * dx + dy * dy + dz * dz;
}
__device__ __forceinline__ void nbr_all_pairs(const nnp_double4* __restrict__ pos, const int* __restrict__ order, int i, int q0, int q1,
                                              int cap, double rc2, const Box<double>& box, int* __restrict__ nbr_n, int* __restrict__ nbr_j,
                                              nnp_double4* __restrict__ nbr_r, int* __restrict__ flags) {
    const int lane = threadIdx.x % 32;
    const nnp_double4 ri = pos[i];
    int found = 0;
    for (int base = q0; base < q1; base += 32) {
        const int q = base + lane;
        bool hit = false;
        int j = -1;
        double dx = 0, dy = 0, dz = 0, d2 = 0;
        if (q < q1) {
            j = order[q];
            if (j != i) {
                nbr_pair(pos, ri, j, box, dx, dy, dz, d2);
                hit = d2 <= rc2;
                if (hit && d2 == 0) atomicMax(&flags[TN_FLAG_COINCIDENT], 1);
            }
        }
        const unsigned mask = __ballot_sync(0xffffffffu, hit);
        const int slot = found + __popc(mask & ((1u << lane) - 1));
        if (hit && slot < cap) {
            const size_t k = (size_t)i * cap + slot;
            nbr_j[k] = j;
            nnp_double4 r;
            r.x = dx, r.y = dy, r.z = dz, r.w = sqrt(d2);
            nbr_r[k] = r;
        }
        found += __popc(mask);
    }
    if (lane == 0) {
        nbr_n[i] = found < cap ? found : cap;
        if (found > cap) atomicMax(&flags[TN_FLAG_CAPACITY], found);
    }
}

/*
 * The cell grids of the batches of at least TN_NBR_CELL_ATOMS atoms, or TN_NBR_CELL_ATOMS_OPEN
 * without a box (k_tn_grid, a block per such batch, every evaluation): per axis, cells whose extent
 * (the distance between their faces: along the box's reciprocal axes when periodic, else along x, y,
 * z over the batch's bounding box) is at least the cutoff, at most about 2 per atom and TN_GRID_CELLS in all (fewer, wider cells on the longest
 * axes), as the CPU's neighbour search makes them (core/src/neighbors.c). Each atom's cell (cell_of);
 * each cell's atoms and their positions (atoms, pos: a cell's in any order; start: where each cell's
 * begin). A grid is marked unusable (dims[3] = 0: k_tn_neighbors then compares every pair) where a
 * periodic axis has fewer than 3 cells, for a coordinate or box that is not finite, or for an atom a
 * million boxes away.
 */
struct TnGrid {
    const int* batches; /* the batches with a grid, one block each */
    const int* off;     /* per batch: its cells' first entry in start (cells + 1 entries), or −1 */
    int *dims, *start, *cell_of, *slot, *atoms; /* dims: per batch n0, n1, n2, usable; cell_of: per atom; slot: per position q, its
                                                   place in its cell; atoms: a batch's entries q0 .. q1 − 1 in cell order, the atoms */
    nnp_double4* pos;                           /* ... and their positions */
};
__global__ void __launch_bounds__(TN_GRID_THREADS)
    k_tn_grid(const nnp_double4* __restrict__ pos, const int* __restrict__ order, const int* __restrict__ batch_start, double rc,
              Box<double> box, TnGrid g) {
    pdl_start();
    constexpr int W = TN_GRID_THREADS / 32;
    __shared__ int count[TN_GRID_CELLS];
    __shared__ double red[6][W];
    __shared__ double lo_s[3], ext_s[3];
    __shared__ int n_s[3], bad, sums[W];
    const int b = g.batches[blockIdx.x], q0 = batch_start[b], q1 = batch_start[b + 1], m = q1 - q0, t = threadIdx.x;
    const int lane = t % 32, warp = t / 32;
    if (!box.periodic && m < TN_NBR_CELL_ATOMS_OPEN) { /* every pair is as quick */
        if (t == 0) g.dims[4 * b + 3] = 0;
        return;
    }
    if (t == 0) bad = 0;
    if (!box.periodic) { /* the bounding box (fmin and fmax pass over NaN: the cells below catch it) */
        double v[6] = {INFINITY, INFINITY, INFINITY, -INFINITY, -INFINITY, -INFINITY};
        for (int q = q0 + t; q < q1; q += TN_GRID_THREADS) {
            const nnp_double4 r = pos[order[q]];
            v[0] = fmin(v[0], r.x), v[1] = fmin(v[1], r.y), v[2] = fmin(v[2], r.z);
            v[3] = fmax(v[3], r.x), v[4] = fmax(v[4], r.y), v[5] = fmax(v[5], r.z);
        }
#pragma unroll
        for (int k = 0; k < 6; k++) {
            for (int o = 16; o > 0; o >>= 1) {
                const double u = __shfl_xor_sync(0xffffffffu, v[k], o);
                v[k] = k < 3 ? fmin(v[k], u) : fmax(v[k], u);
            }
            if (lane == 0) red[k][warp] = v[k];
        }
        __syncthreads();
        if (t < 6) {
            double u = red[t][0];
            for (int w = 1; w < W; w++) u = t < 3 ? fmin(u, red[t][w]) : fmax(u, red[t][w]);
            red[t][0] = u;
        }
        __syncthreads();
        if (t < 3) lo_s[t] = red[t][0], ext_s[t] = red[t + 3][0] - red[t][0];
    } else if (t == 0) {
        /* reduced form: a = (ax, 0, 0), b = (bx, by, 0), c = (cx, cy, cz); the distances between
           opposite faces are V / |b × c|, V / |c × a|, V / |a × b| */
        const double ax = box.a[0], bx = box.a[3], by = box.a[4], cx = box.a[6], cy = box.a[7], cz = box.a[8];
        const double V = ax * by * cz, bc0 = by * cz, bc1 = -bx * cz, bc2 = bx * cy - by * cx, ca1 = cz * ax, ca2 = -cy * ax;
        ext_s[0] = V / sqrt(bc0 * bc0 + bc1 * bc1 + bc2 * bc2);
        ext_s[1] = V / sqrt(ca1 * ca1 + ca2 * ca2);
        ext_s[2] = cz;
        if (!(ax > 0 && by > 0 && cz > 0 && isfinite(ax * by * cz * bx * cx * cy))) bad = 1;
    }
    __syncthreads();
    if (t == 0) {
        const double margin = rc * (1 + 1e-6); /* cells a little wider than the cutoff: rounding cannot move a pair two cells apart */
        const double most = fmin(2.0 * m + 27, (double)TN_GRID_CELLS);
        int n[3];
        for (int k = 0; k < 3; k++) {
            const double c = floor(ext_s[k] / margin);
            if (!isfinite(ext_s[k])) bad = 1;
            n[k] = !(c >= 1) ? 1 : c > 1024 ? 1024 : (int)c;
            if (box.periodic && n[k] < 3) bad = 1;
        }
        while ((double)n[0] * n[1] * n[2] > most) {
            const int k = n[0] >= n[1] && n[0] >= n[2] ? 0 : n[1] >= n[2] ? 1 : 2;
            if (box.periodic && n[k] <= 3) break;
            n[k]--;
        }
        for (int k = 0; k < 3; k++) n_s[k] = n[k];
    }
    __syncthreads();
    const int n0 = n_s[0], n1 = n_s[1], n2 = n_s[2], cells = n0 * n1 * n2;
    if (bad) {
        if (t == 0) g.dims[4 * b + 3] = 0;
        return;
    }
    for (int c = t; c < cells; c += TN_GRID_THREADS) count[c] = 0;
    __syncthreads();
    /* each atom's cell, counted (its place among the cell's atoms: the order of the atomics); each
       thread's loads for TN_GRID_UNROLL atoms at a time */
    constexpr int U = TN_GRID_UNROLL;
    for (int qb = q0 + t; qb < q1; qb += U * TN_GRID_THREADS) {
        int iu[U];
        nnp_double4 ru[U];
#pragma unroll
        for (int u = 0; u < U; u++) iu[u] = qb + u * TN_GRID_THREADS < q1 ? order[qb + u * TN_GRID_THREADS] : -1;
#pragma unroll
        for (int u = 0; u < U; u++)
            if (iu[u] >= 0) ru[u] = pos[iu[u]];
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (iu[u] < 0) continue;
            const nnp_double4 r = ru[u];
            double s[3];
            bool ok = true;
            if (box.periodic) { /* fractional coordinates, wrapped into [0, 1) */
                s[2] = r.z / box.a[8];
                s[1] = (r.y - s[2] * box.a[7]) / box.a[4];
                s[0] = (r.x - s[1] * box.a[3] - s[2] * box.a[6]) / box.a[0];
#pragma unroll
                for (int k = 0; k < 3; k++) {
                    ok = ok && fabs(s[k]) < 1e6; /* a million boxes away: the wrap would lose the cells' margin */
                    s[k] -= floor(s[k]);
                }
            } else {
                const double x[3] = {r.x, r.y, r.z};
#pragma unroll
                for (int k = 0; k < 3; k++) s[k] = ext_s[k] > 0 ? (x[k] - lo_s[k]) / ext_s[k] : 0;
            }
            int c[3];
            const int nk[3] = {n0, n1, n2};
#pragma unroll
            for (int k = 0; k < 3; k++) {
                ok = ok && isfinite(s[k]);
                c[k] = ok ? (int)(s[k] * nk[k]) : 0;
                c[k] = c[k] < 0 ? 0 : c[k] >= nk[k] ? nk[k] - 1 : c[k];
            }
            if (!ok) atomicOr(&bad, 1);
            const int cell = (c[2] * n1 + c[1]) * n0 + c[0];
            g.cell_of[iu[u]] = cell;
            g.slot[qb + u * TN_GRID_THREADS] = atomicAdd(&count[cell], 1);
        }
    }
    __syncthreads();
    if (bad) {
        if (t == 0) g.dims[4 * b + 3] = 0;
        return;
    }
    /* the counts into each cell's first entry: an exclusive scan, each thread over a run of cells */
    const int per = (cells + TN_GRID_THREADS - 1) / TN_GRID_THREADS, c0 = t * per, c1 = min(c0 + per, cells);
    int run = 0;
    for (int c = c0; c < c1; c++) run += count[c];
    int x = run;
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) sums[warp] = x;
    __syncthreads();
    int before = x - run;
    for (int w = 0; w < warp; w++) before += sums[w];
    int* start = g.start + g.off[b];
    for (int c = c0; c < c1; c++) {
        const int k = count[c];
        count[c] = before, start[c] = before;
        before += k;
    }
    if (t == 0) start[cells] = m;
    __syncthreads();
    for (int qb = q0 + t; qb < q1; qb += U * TN_GRID_THREADS) {
        int iu[U], su[U], cu[U];
        nnp_double4 ru[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int q = qb + u * TN_GRID_THREADS;
            iu[u] = q < q1 ? order[q] : -1, su[u] = q < q1 ? g.slot[q] : 0;
        }
#pragma unroll
        for (int u = 0; u < U; u++)
            if (iu[u] >= 0) cu[u] = g.cell_of[iu[u]], ru[u] = pos[iu[u]];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (iu[u] >= 0) {
                const int e = q0 + count[cu[u]] + su[u];
                g.atoms[e] = iu[u], g.pos[e] = ru[u];
            }
    }
    if (t == 0) g.dims[4 * b] = n0, g.dims[4 * b + 1] = n1, g.dims[4 * b + 2] = n2, g.dims[4 * b + 3] = 1;
}

/* One warp per atom: the atoms of its batch within rc (d² ≤ rc²), in index order; in double. With
   a usable grid (k_tn_grid), only the atoms of the 27 cells around its own are compared, and the hits
   (at most cap, else every pair as without) are put in index order by their ranks: the same list. */
__global__ void __launch_bounds__(32 * TN_NBR_WARPS)
    k_tn_neighbors(const nnp_double4* __restrict__ pos, const int* __restrict__ batch, const int* __restrict__ order,
                   const int* __restrict__ batch_start, int n, int cap, double rc2, Box<double> box, TnGrid g, int* __restrict__ nbr_n,
                   int* __restrict__ nbr_j, nnp_double4* __restrict__ nbr_r, int* __restrict__ flags) {
    pdl_start();
    const int i = blockIdx.x * TN_NBR_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32, w = threadIdx.x / 32;
    if (i >= n) return;
    const int b = batch[i], q0 = batch_start[b], q1 = batch_start[b + 1];
    if (g.off == NULL || g.off[b] < 0 || g.dims[4 * b + 3] == 0) {
        nbr_all_pairs(pos, order, i, q0, q1, cap, rc2, box, nbr_n, nbr_j, nbr_r, flags);
        return;
    }
    __shared__ int hits[TN_NBR_WARPS][TN_CUDA_MAX_NEIGHBORS];
    __shared__ int cell_first[TN_NBR_WARPS][32], cell_base[TN_NBR_WARPS][32];
    const int n0 = g.dims[4 * b], n1 = g.dims[4 * b + 1], n2 = g.dims[4 * b + 2];
    const int* start = g.start + g.off[b];
    const int c = g.cell_of[i], c0 = c % n0, c1 = c / n0 % n1, c2 = c / (n0 * n1);
    /* lane k < 27: the cell at offset (k % 3, k / 3 % 3, k / 9) − 1 (distinct: at least 3 cells per
       periodic axis), its atoms numbered after those of the cells before it */
    int count = 0, first = 0;
    if (lane < 27) {
        int k0 = c0 + lane % 3 - 1, k1 = c1 + lane / 3 % 3 - 1, k2 = c2 + lane / 9 - 1;
        bool in = true;
        if (box.periodic)
            k0 = (k0 + n0) % n0, k1 = (k1 + n1) % n1, k2 = (k2 + n2) % n2;
        else
            in = k0 >= 0 && k0 < n0 && k1 >= 0 && k1 < n1 && k2 >= 0 && k2 < n2;
        if (in) {
            const int cc = (k2 * n1 + k1) * n0 + k0;
            first = start[cc], count = start[cc + 1] - first;
        }
    }
    int incl = count;
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
    }
    const int total = __shfl_sync(0xffffffffu, incl, 31);
    cell_first[w][lane] = q0 + first, cell_base[w][lane] = incl - count;
    __syncwarp();
    const nnp_double4 ri = pos[i];
    int found = 0;
    for (int base = 0; base < total; base += 64) { /* two candidates per lane: their loads in flight together */
        int j[2] = {-1, -1};
        nnp_double4 rj[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int u = base + 32 * h + lane;
            if (u < total) {
                int k = 0; /* the last cell whose first candidate is at most u (an empty cell's is its successor's) */
                for (int step = 16; step > 0; step >>= 1)
                    if (k + step < 27 && cell_base[w][k + step] <= u) k += step;
                const int e = cell_first[w][k] + (u - cell_base[w][k]);
                j[h] = g.atoms[e], rj[h] = g.pos[e]; /* pos[j], copied */
            }
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            bool hit = false;
            if (j[h] >= 0 && j[h] != i) {
                double dx = rj[h].x - ri.x, dy = rj[h].y - ri.y, dz = rj[h].z - ri.z;
                min_image(dx, dy, dz, box);
                const double d2 = dx * dx + dy * dy + dz * dz;
                hit = d2 <= rc2;
                if (hit && d2 == 0) atomicMax(&flags[TN_FLAG_COINCIDENT], 1);
            }
            const unsigned mask = __ballot_sync(0xffffffffu, hit);
            const int slot = found + __popc(mask & ((1u << lane) - 1));
            if (hit && slot < cap) hits[w][slot] = j[h];
            found += __popc(mask);
        }
    }
    if (found > cap) { /* too many: every pair, as without the grid (its first cap and the flag) */
        nbr_all_pairs(pos, order, i, q0, q1, cap, rc2, box, nbr_n, nbr_j, nbr_r, flags);
        return;
    }
    __syncwarp();
    /* a batch's atoms are in index order in the plan's order: ranks by index */
    for (int h = lane; h < found; h += 32) {
        const int j = hits[w][h];
        nnp_double4 r;
        double d2;
        nbr_pair(pos, ri, j, box, r.x, r.y, r.z, d2);
        int rank = 0;
        for (int h2 = 0; h2 < found; h2++) rank += hits[w][h2] < j;
        r.w = sqrt(d2);
        const size_t k = (size_t)i * cap + rank;
        nbr_j[k] = j;
        nbr_r[k] = r;
    }
    if (lane == 0) nbr_n[i] = found;
}

/*
 * The channel linears of all atoms as one GEMM: out[a][c][o] = Σ_k in[a][c][k] M_p(c)[k][o] for the
 * ten irreducible components c of every atom a (layout a · 10F + c · F + channel), p(c) = 0 (I),
 * 1 (A), 2 (S), where M_p is the p-th weight's transpose (forward: out = W in) or the weight itself
 * (backward: out = Wᵀ g), F × F row-major either way. A block computes 4 · AW atoms × 32 output
 * channels: each warp AW atoms, each lane one output channel of all their 10 · AW components, so a
 * weight read from shared memory serves 10 · AW products and the inputs are broadcast four k at a
 * time. k runs in chunks of TN_GEMM_K through shared memory (zeros past F), the next chunk's loads in
 * flight while one is multiplied; every output is one sum in k order, so the same inputs give the
 * same bits.
 */
template <typename real> struct ChanW {
    const real* m[3]; /* k_tn_chan_tc: pairs (float2) */
};
template <typename real, int AW>
__global__ void __launch_bounds__(128) k_tn_chan(const ChanW<real> W, int F, const real* __restrict__ in, real* __restrict__ out, int n) {
    pdl_start();
    typedef typename real4_of<real>::type real4;
    constexpr int GA = 4 * AW, K = TN_GEMM_K;
    __shared__ __align__(16) real xs[GA * TN_NI * K];
    __shared__ __align__(16) real ms[3 * K * 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int a0 = blockIdx.x * GA, o0 = blockIdx.y * 32;
    const size_t F10 = (size_t)TN_NI * F;
    real acc[AW][TN_NI];
#pragma unroll
    for (int a = 0; a < AW; a++)
#pragma unroll
        for (int c = 0; c < TN_NI; c++) acc[a][c] = 0;
    /* chunk k0's inputs and weights into registers, stored to shared memory when the previous chunk
       has been read: the loads of chunk k0 + K are in flight while chunk k0 is multiplied */
    constexpr int NX = GA * TN_NI * K / 128, NM = 3 * K * 32 / 128;
    static_assert(NX * 128 == GA * TN_NI * K && NM * 128 == 3 * K * 32, "the chunks fill the block");
    real xr[NX], mr[NM];
    /* thread (warp, lane) loads rows warp + 4r of the inputs at k = k0 + lane, and rows warp + 4r
       (r < 8: of M_0, then M_1, M_2) of the weights at output o0 + lane */
    static_assert(K == 32, "one lane per k and per output channel");
    auto fetch = [&](int k0) {
        const int k = k0 + lane;
#pragma unroll
        for (int r = 0; r < NX; r++) {
            const int row = warp + 4 * r, a = a0 + row / TN_NI, c = row % TN_NI;
            xr[r] = a < n && k < F ? in[(size_t)a * F10 + (size_t)c * F + k] : real(0);
        }
        const int o = o0 + lane;
#pragma unroll
        for (int r = 0; r < NM; r++) {
            const int kk = k0 + warp + 4 * (r % 8);
            const real* Mp = r < 8 ? W.m[0] : (r < 16 ? W.m[1] : W.m[2]);
            mr[r] = kk < F && o < F ? Mp[(size_t)kk * F + o] : real(0);
        }
    };
    fetch(0);
    for (int k0 = 0; k0 < F; k0 += K) {
        __syncthreads(); /* the previous chunk has been read */
#pragma unroll
        for (int r = 0; r < NX; r++) xs[threadIdx.x + 128 * r] = xr[r];
#pragma unroll
        for (int r = 0; r < NM; r++) ms[threadIdx.x + 128 * r] = mr[r];
        __syncthreads();
        if (k0 + K < F) fetch(k0 + K);
#pragma unroll 2
        for (int k = 0; k < K; k += 4) {
            real w[3][4];
#pragma unroll
            for (int p = 0; p < 3; p++)
#pragma unroll
                for (int j = 0; j < 4; j++) w[p][j] = ms[(p * K + k + j) * 32 + lane];
#pragma unroll
            for (int a = 0; a < AW; a++)
#pragma unroll
                for (int c = 0; c < TN_NI; c++) {
                    const real4 x = *(const real4*)(xs + ((warp * AW + a) * TN_NI + c) * K + k);
                    const int p = part_of(c);
                    real s = acc[a][c];
                    s += w[p][0] * x.x;
                    s += w[p][1] * x.y;
                    s += w[p][2] * x.z;
                    s += w[p][3] * x.w;
                    acc[a][c] = s;
                }
        }
    }
    const int o = o0 + lane;
    if (o >= F) return;
#pragma unroll
    for (int a = 0; a < AW; a++) {
        const int at = a0 + warp * AW + a;
        if (at >= n) continue;
#pragma unroll
        for (int c = 0; c < TN_NI; c++) out[(size_t)at * F10 + (size_t)c * F + o] = acc[a][c];
    }
}

/*
 * float32: the channel linears on the tensor cores, in three TF32 products per term (3xTF32: x =
 * x_hi + x_lo, both TF32; x·w ≈ x_lo·w_hi + x_hi·w_lo + x_hi·w_hi, float32-class accuracy). Each
 * part p is its own GEMM over its rows (atom a, component c of p: n, 3n, 6n rows) against M_p, as in
 * k_tn_chan; blockIdx.z is the part. A block computes 64 rows × 8J outputs, each warp 16 rows with
 * mma.m16n8k8 (J tiles of 8 outputs: 4, or 1 for few atoms, TN_CHAN_NARROW_ATOMS, where a block's
 * chain of dependent instructions is its time and four times the blocks share it, or 2 for some
 * more, TN_CHAN_MEDIUM_ATOMS); k runs in chunks
 * of K (32, or 64 for few atoms, where each
 * chunk's dependent loads are most of the time: TN_CHAN_DEEP_ATOMS) through shared memory (rows
 * padded against bank conflicts), the next chunk's loads in flight while one is multiplied. The
 * weights come split into their TF32 (high, low) pairs when the plan is made (tf32_pair), so the
 * inner loop only reads them. The
 * tensor cores' sums come in a fixed order, the same for either K, so the same inputs give the same
 * bits.
 */
__device__ __forceinline__ unsigned tf32_hi(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* k_tn_chan_step's tiles (ALL): TN_ALL_ATOMS atoms' rows of all three parts, one 16-row tile of
   part 0 (rows 0-15), one of part 1 (16-31), two of part 2 (32-63); row r's slot (atom · TN_NI +
   component, the atom counted from the block's first), or −1 for a padding row */
static_assert(TN_ALL_ATOMS <= 16 && 3 * TN_ALL_ATOMS <= 16 && 6 * TN_ALL_ATOMS <= 32, "k_tn_chan_step's atoms fill its tiles");
__device__ __forceinline__ int tile_slot(int r) {
    if (r < 16) return r < TN_ALL_ATOMS ? r * TN_NI : -1;
    if (r < 32) return r - 16 < 3 * TN_ALL_ATOMS ? (r - 16) / 3 * TN_NI + 1 + (r - 16) % 3 : -1;
    return r - 32 < 6 * TN_ALL_ATOMS ? (r - 32) / 6 * TN_NI + 4 + (r - 32) % 6 : -1;
}
template <int K, int J, bool ALL = false>
__device__ __forceinline__ void chan_tc_block(const ChanW<float>& W, int F, const float* __restrict__ in, float* __restrict__ out, int n,
                                              int bx, int by, int bz) {
    constexpr int OW = 8 * J; /* outputs per block */
    constexpr int AP = K + 4, BP = OW + 4, NX = 64 * K / 128, NM = K * OW / 128; /* BP: 8-byte reads of rows t .. t + 3 in distinct banks */
    constexpr int NP = ALL ? 3 : 1; /* the parts whose weights a block holds */
    static_assert(NM * 128 == K * OW, "the weights' chunk fills the block");
    __shared__ __align__(16) float as[64 * AP];
    __shared__ __align__(16) float2 bs[NP * K * BP];
    const int p = bz, nc = p == 0 ? 1 : (p == 1 ? 3 : 6), c0 = p == 0 ? 0 : (p == 1 ? 1 : 4);
    const int rows = ALL ? n : n * nc, r0 = ALL ? bx * TN_ALL_ATOMS : bx * 64, o0 = by * OW;
    if (r0 >= rows) return; /* the grid covers the largest part */
    const float2* M[NP];
    for (int q = 0; q < NP; q++) M[q] = (const float2*)(ALL ? W.m[q] : (p == 0 ? W.m[0] : (p == 1 ? W.m[1] : W.m[2])));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const size_t F10 = (size_t)TN_NI * F;
    float xr[NX];
    float2 mr[NP][NM];
    /* thread (warp, lane) loads rows warp + 4 (r % 16) at k0 + 32 (r / 16) + lane, and M's rows
       k0 + 128 / OW · r + threadIdx / OW at o0 + threadIdx % OW (OW = 32: rows warp + 4r at o0 + lane);
       each row's inputs found once per block (xrow: one division by the component count per row,
       not one per load), the weights by a pointer stepped over M's rows. ALL: warp 0's rows are
       part 0's, warp 1's part 1's, warps 2 and 3 part 2's, of atoms r0 .. r0 + TN_ALL_ATOMS − 1
       (tile_slot) */
    constexpr int MR = 128 / OW; /* M's rows per round */
    const int mrow = threadIdx.x / OW, mcol = threadIdx.x % OW;
    __shared__ long long xrow[64]; /* where the block's rows' inputs start in in, −1 past the part's rows */
    if (threadIdx.x < 64) {
        long long x = -1;
        if (ALL) {
            const int s = tile_slot(threadIdx.x), a = r0 + s / TN_NI;
            if (s >= 0 && a < n) x = (long long)((size_t)a * F10 + (size_t)(s % TN_NI) * F);
        } else {
            const int row = r0 + threadIdx.x;
            if (row < rows) x = (long long)((size_t)(row / nc) * F10 + (size_t)(c0 + row % nc) * F);
        }
        xrow[threadIdx.x] = x;
    }
    const size_t mstep = (size_t)MR * F;
    auto fetch_m = [&](int k0) {
        const int o = o0 + mcol;
#pragma unroll
        for (int q = 0; q < NP; q++) {
            const float2* mp = M[q] + (size_t)(k0 + mrow) * F + o;
#pragma unroll
            for (int r = 0; r < NM; r++, mp += mstep) {
                const int kk = k0 + mrow + MR * r;
                mr[q][r] = make_float2(0.0f, 0.0f);
                if (kk < F && o < F) mr[q][r] = *mp;
            }
        }
    };
    auto fetch_x = [&](int k0) {
#pragma unroll
        for (int r = 0; r < NX; r++) {
            const long long x = xrow[warp + 4 * (r % 16)];
            const int k = k0 + 32 * (r / 16) + lane;
            xr[r] = x >= 0 && k < F ? in[x + k] : 0.0f;
        }
    };
    /* the first chunk of the weights (constant) while the predecessor drains, then the inputs */
    fetch_m(0);
    __syncthreads(); /* xrow */
    pdl_start();
    fetch_x(0);
    float acc[J][4];
#pragma unroll
    for (int j = 0; j < J; j++)
#pragma unroll
        for (int q = 0; q < 4; q++) acc[j][q] = 0;
    for (int k0 = 0; k0 < F; k0 += K) {
        __syncthreads(); /* the previous chunk has been read */
#pragma unroll
        for (int r = 0; r < NX; r++) as[(warp + 4 * (r % 16)) * AP + 32 * (r / 16) + lane] = xr[r];
#pragma unroll
        for (int q = 0; q < NP; q++)
#pragma unroll
            for (int r = 0; r < NM; r++) bs[q * K * BP + (mrow + MR * r) * BP + mcol] = mr[q][r];
        __syncthreads();
        if (k0 + K < F) fetch_m(k0 + K), fetch_x(k0 + K);
        const float2* B = bs + (ALL ? (warp < 2 ? warp : 2) * K * BP : 0); /* this warp's part's weights */
#pragma unroll
        for (int ks = 0; ks < K; ks += 8) {
            const float* A0 = as + (16 * warp + g) * AP + ks + t;
            const float x[4] = {A0[0], A0[8 * AP], A0[4], A0[8 * AP + 4]};
            unsigned ahi[4], alo[4];
#pragma unroll
            for (int q = 0; q < 4; q++) ahi[q] = tf32_hi(x[q]), alo[q] = tf32_hi(x[q] - __uint_as_float(ahi[q]));
#pragma unroll
            for (int j = 0; j < J; j++) {
                const float2 w0 = B[(ks + t) * BP + 8 * j + g], w1 = B[(ks + t + 4) * BP + 8 * j + g];
                const unsigned h0 = __float_as_uint(w0.x), h1 = __float_as_uint(w1.x);
                const unsigned l0 = __float_as_uint(w0.y), l1 = __float_as_uint(w1.y);
                mma_tf32(acc[j], alo, h0, h1);
                mma_tf32(acc[j], ahi, l0, l1);
                mma_tf32(acc[j], ahi, h0, h1);
            }
        }
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        if (ALL) { /* out: shared, TN_ALL_ATOMS × TN_NI × OW, (atom, component, output) */
            const int s = tile_slot(16 * warp + g + 8 * h);
            if (s < 0) continue;
#pragma unroll
            for (int j = 0; j < J; j++) out[s * OW + 8 * j + 2 * t] = acc[j][2 * h], out[s * OW + 8 * j + 2 * t + 1] = acc[j][2 * h + 1];
            continue;
        }
        const int row = r0 + 16 * warp + g + 8 * h;
        if (row >= rows) continue;
        float* o_row = out + (size_t)(row / nc) * F10 + (size_t)(c0 + row % nc) * F;
#pragma unroll
        for (int j = 0; j < J; j++) {
            const int o = o0 + 8 * j + 2 * t;
            if (o < F) o_row[o] = acc[j][2 * h];
            if (o + 1 < F) o_row[o + 1] = acc[j][2 * h + 1];
        }
    }
}
template <int K, int J>
__global__ void __launch_bounds__(128) k_tn_chan_tc(const ChanW<float> W, int F, const float* __restrict__ in, float* __restrict__ out, int n) {
    chan_tc_block<K, J>(W, F, in, out, n, blockIdx.x, blockIdx.y, blockIdx.z);
}

/*
 * Dense layers of all atoms as one GEMM: z[a][o] = Σ_k in[a][k] M[k][o] (+ bias[o]) for rows a < n,
 * where M (kn × on, row-major) is a weight's transpose (forward: z = W x + b) or the weight itself
 * (backward: z = Wᵀ g), then by EPI: out = z; out = z and out2 = SiLU(z) (a layer and its
 * activation, the pre-activation kept); out = z · SiLU'(aux) (back through the previous layer's
 * activation). A block computes 4·RW rows × 32 outputs: each warp RW rows (4, or 1 for few atoms,
 * TN_ROWS_NARROW_ATOMS: more, shorter blocks), each lane one output; k runs in chunks of K
 * (TN_ROWS_K: fewer, longer chunks wait on fewer dependent loads) through shared memory, the next
 * chunk's loads in flight while one is multiplied.
 * Every output is one sum in k order, so the same inputs give the same bits.
 */
enum { TN_EPI_NONE = 0, TN_EPI_SILU = 1, TN_EPI_DSILU = 2 };
template <typename real> struct RowsIO {
    const real* M;
    int kn, on;
    const real* bias; /* on, or NULL */
    const real* in;   /* rows of kn, ld_in apart */
    real *out, *out2; /* rows of on, ld_out apart (out2: TN_EPI_SILU) */
    const real* aux;  /* rows of on, ld_aux apart (TN_EPI_DSILU) */
    int ld_in, ld_out, ld_aux;
    int act; /* the activation of TN_EPI_SILU and TN_EPI_DSILU (TN_ACT_*) */
};
/* The epilogue of the row GEMMs: rows a0 .. a0 + R − 1 (those < n) at output o from the sums acc. */
template <typename real, int EPI, int R>
__device__ __forceinline__ void rows_out(const RowsIO<real>& io, int n, int a0, int o, const real (&acc)[R]) {
    if (o >= io.on) return;
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int a = a0 + r;
        if (a >= n) continue;
        const real z = acc[r] + (io.bias ? io.bias[o] : real(0));
        if (EPI == TN_EPI_DSILU) {
            io.out[(size_t)a * io.ld_out + o] = z * act_d(io.act, io.aux[(size_t)a * io.ld_aux + o]);
        } else {
            io.out[(size_t)a * io.ld_out + o] = z;
            if (EPI == TN_EPI_SILU) io.out2[(size_t)a * io.ld_out + o] = act(io.act, z);
        }
    }
}
template <typename real, int EPI, int K, int RW>
__device__ __forceinline__ void rows_block(const RowsIO<real>& io, int n, int bx, int by, int kb = 0, int ke = 1 << 30, real* part = NULL) {
    typedef typename real4_of<real>::type real4;
    constexpr int BR = 4 * RW, NX = BR * K / 128, NM = K * 32 / 128; /* BR: rows per block */
    static_assert(NX * 128 == BR * K, "the inputs' chunk fills the block");
    __shared__ __align__(16) real xs[BR * K];
    __shared__ __align__(16) real ms[K * 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int r0 = bx * BR, o0 = by * 32, o = o0 + lane;
    real acc[RW];
#pragma unroll
    for (int r = 0; r < RW; r++) acc[r] = 0;
    real xr[NX], mr[NM];
    /* thread (warp, lane) loads rows warp + 4 (r % RW) of the inputs at k0 + 32 (r / RW) + lane (its
       RW rows found once), and rows k0 + warp + 4r of M at output o (a pointer stepped over them) */
    const real* xp[RW];
#pragma unroll
    for (int q = 0; q < RW; q++) {
        const int a = r0 + warp + 4 * q;
        xp[q] = a < n ? io.in + (size_t)a * io.ld_in : NULL;
    }
    const size_t mstep = (size_t)4 * io.on;
    auto fetch_m = [&](int k0) {
        const real* mp = io.M + (size_t)(k0 + warp) * io.on + o;
#pragma unroll
        for (int r = 0; r < NM; r++, mp += mstep) {
            const int kk = k0 + warp + 4 * r;
            mr[r] = kk < io.kn && o < io.on ? *mp : real(0);
        }
    };
    auto fetch_x = [&](int k0) {
#pragma unroll
        for (int r = 0; r < NX; r++) {
            const int k = k0 + 32 * (r / RW) + lane;
            xr[r] = xp[r % RW] != NULL && k < io.kn ? xp[r % RW][k] : real(0);
        }
    };
    /* the first chunk of the weights (constant) while the predecessor drains, then the inputs */
    const int kend = min(io.kn, ke);
    fetch_m(kb);
    pdl_start();
    fetch_x(kb);
    for (int k0 = kb; k0 < kend; k0 += K) {
        __syncthreads(); /* the previous chunk has been read */
#pragma unroll
        for (int r = 0; r < NX; r++) xs[(warp + 4 * (r % RW)) * K + 32 * (r / RW) + lane] = xr[r];
#pragma unroll
        for (int r = 0; r < NM; r++) ms[threadIdx.x + 128 * r] = mr[r];
        __syncthreads();
        if (k0 + K < kend) fetch_m(k0 + K), fetch_x(k0 + K);
#pragma unroll 2
        for (int k = 0; k < K; k += 4) {
            real w[4];
#pragma unroll
            for (int j = 0; j < 4; j++) w[j] = ms[(k + j) * 32 + lane];
#pragma unroll
            for (int r = 0; r < RW; r++) {
                const real4 x = *(const real4*)(xs + (warp * RW + r) * K + k);
                real s = acc[r];
                s += w[0] * x.x;
                s += w[1] * x.y;
                s += w[2] * x.z;
                s += w[3] * x.w;
                acc[r] = s;
            }
        }
    }
    if (part != NULL) {
#pragma unroll
        for (int r = 0; r < RW; r++) part[r] = acc[r];
        return;
    }
    rows_out<real, EPI, RW>(io, n, r0 + warp * RW, o, acc);
}
template <typename real, int EPI, int K, int RW> __global__ void __launch_bounds__(128) k_tn_rows(const RowsIO<real> io, int n) {
    rows_block<real, EPI, K, RW>(io, n, blockIdx.x, blockIdx.y);
}
/* float32, few atoms (TN_ROWS_SPLIT_ATOMS, sm_90): k_tn_rows split over k, gridDim.z parts of
   kpart (whole chunks of K) each, a tile's parts one thread-block cluster: parts 1.. store their
   sums into slots of part 0's shared memory and leave, part 0 adds them in part order (the same bits
   whatever the schedule) and runs the epilogue; a chain of kpart / K chunks instead of kn / K. */
template <int EPI, int K, int RW>
__device__ __forceinline__ void rows_split_block(const RowsIO<float>& io, int n, int bx, int by, int q, int parts, int kpart, float* slots) {
    cluster_arrive_relaxed(); /* started: the others may store into this block's slots after their wait */
    float acc[RW];
    rows_block<float, EPI, K, RW>(io, n, bx, by, q * kpart, (q + 1) * kpart, acc);
    cluster_wait(); /* every block has started */
    if (q != 0) {
#pragma unroll
        for (int r = 0; r < RW; r++) cluster_store(slots + ((size_t)(q - 1) * RW + r) * 128 + threadIdx.x, 0, acc[r]);
        cluster_arrive_release();
        return;
    }
    cluster_arrive_release();
    cluster_wait(); /* the other parts' sums are in the slots */
    for (int p = 1; p < parts; p++)
#pragma unroll
        for (int r = 0; r < RW; r++) acc[r] += slots[((size_t)(p - 1) * RW + r) * 128 + threadIdx.x];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    rows_out<float, EPI, RW>(io, n, bx * 4 * RW + warp * RW, by * 32 + lane, acc);
}
template <int EPI, int K, int RW> __global__ void __launch_bounds__(128) k_tn_rows_split(const RowsIO<float> io, int n, int kpart) {
    __shared__ float slots[(TN_ROWS_SPLIT_MAX - 1) * RW * 128];
    rows_split_block<EPI, K, RW>(io, n, blockIdx.x, blockIdx.y, blockIdx.z, gridDim.z, kpart, slots);
}
/* A channel linear beside a row GEMM split over k that does not depend on it (up to
   TN_ROWS_SPLIT_ATOMS atoms), one launch: columns x < cx of the grid (cx + rgx) × rgy × parts are
   the channel linear's tiles (cgx × cgy × 3 of k_tn_chan_tc<64, J>, numbered across the columns'
   blocks; their clusters run no cluster step), the rest k_tn_rows_split's, its slots in the dynamic
   shared memory ((parts − 1) · RW · 128 floats). */
static_assert(TN_ROWS_SPLIT_ATOMS <= TN_CHAN_MEDIUM_ATOMS, "k_tn_chan_rows_split pairs the medium tiles of the channel linears");
template <int EPI, int RW, int J>
__global__ void __launch_bounds__(128) k_tn_chan_rows_split(const ChanW<float> W, int F, const float* __restrict__ in, float* __restrict__ out,
                                                            int cgx, int cgy, int cx, const RowsIO<float> io, int n, int kpart) {
    extern __shared__ __align__(16) float slots_dyn[];
    if ((int)blockIdx.x < cx) {
        const int t = ((int)blockIdx.x * (int)gridDim.y + (int)blockIdx.y) * (int)gridDim.z + (int)blockIdx.z;
        if (t < cgx * cgy * 3) chan_tc_block<64, J>(W, F, in, out, n, t % cgx, t / cgx % cgy, t / (cgx * cgy));
        return;
    }
    rows_split_block<EPI, TN_ROWS_K, RW>(io, n, blockIdx.x - cx, blockIdx.y, blockIdx.z, gridDim.z, kpart, slots_dyn);
}

/* A channel linear and a row GEMM that do not depend on each other as one launch, one link fewer
   in the chain of launches (float32): blocks [0, cgx · cgy · 3) are the channel linear's
   (k_tn_chan_tc's grid cgx × cgy × 3), the rest the row GEMM's (k_tn_rows' grid rgx × ·). */
static_assert(TN_CHAN_NARROW_ATOMS == TN_ROWS_NARROW_ATOMS, "k_tn_chan_rows pairs the narrow tiles of both");
template <int EPI, int RW, int K, int J>
__global__ void __launch_bounds__(128) k_tn_chan_rows(const ChanW<float> W, int F, const float* __restrict__ in, float* __restrict__ out,
                                                      int cgx, int cgy, const RowsIO<float> io, int n, int rgx) {
    const int cb = cgx * cgy * 3, b = blockIdx.x;
    if (b < cb)
        chan_tc_block<K, J>(W, F, in, out, n, b % cgx, b / cgx % cgy, b / (cgx * cgy));
    else
        rows_block<float, EPI, TN_ROWS_K, RW>(io, n, (b - cb) % rgx, (b - cb) / rgx);
}

/* Z_ij = emb2(emb(z_i) ‖ emb(z_j)) split per element, once per plan (outside any evaluation):
   zp_z = W_p e_z + b, zq_z = W_q e_z for every row z of the embedding; one block per row. */
template <typename real>
__global__ void __launch_bounds__(TN_THREADS) k_tn_z(const TnNet<real> N, real* __restrict__ zp, real* __restrict__ zq) {
    extern __shared__ __align__(16) unsigned char tn_smem[];
    real* e = (real*)tn_smem;
    const int z = blockIdx.x, F = N.F;
    const real* row = N.emb + (size_t)z * F;
    for (int k = threadIdx.x; k < F; k += TN_THREADS) e[k] = row[k];
    __syncthreads();
    for (int o = threadIdx.x; o < F; o += TN_THREADS) {
        real p = N.emb2.b[o], q = 0;
        for (int k = 0; k < F; k++) p += N.emb2.wt[(size_t)k * F + o] * e[k], q += N.emb2.wt[(size_t)(F + k) * F + o] * e[k];
        zp[(size_t)z * F + o] = p, zq[(size_t)z * F + o] = q;
    }
}

/* One edge's term of the embedding, channel by channel: x += w₁ Id + skew(w₂ u) + w₃ (u uᵀ − |u|²/3 Id). */
template <typename real> __device__ __forceinline__ void embed_edge(const real (&w)[3], const real (&u)[3], real (&x)[9]) {
    const real uu = u[0] * u[0] + u[1] * u[1] + u[2] * u[2];
    const real v0 = w[1] * u[0], v1 = w[1] * u[1], v2 = w[1] * u[2];
    for (int r = 0; r < 3; r++)
        for (int q = 0; q < 3; q++) x[r * 3 + q] += w[2] * u[r] * u[q];
    const real diag = w[0] - w[2] * uu / real(3);
    x[0] += diag, x[4] += diag, x[8] += diag;
    x[1] -= v2, x[3] += v2;
    x[2] += v1, x[6] -= v1;
    x[5] -= v0, x[7] += v0;
}
/* The irreducible parts of X / (|X|² + 1), the input of a layer's first channel linear. */
template <typename real> __device__ __forceinline__ void normalized_parts(const real (&m)[9], real (&t)[TN_NI]) {
    const real nx = norm1(m);
    real x[9];
    for (int c = 0; c < 9; c++) x[c] = m[c] / nx;
    decompose(x, t);
}

/* An atom's edges [s0, s1) in shared memory, for the table paths: those within [cl, cu) (and the
   self loop, s = 0) in slot order, each with its neighbour j, j's element, its slot s, u and its
   place in the tables. Warp 0 compacts them (ballot) while the block waits, so the per-channel loops
   over the edges that follow have no branches and no dependent loads of the geometry. */
template <typename real> struct EdgeChunk {
    int *j, *zj, *slot, *g, *count;
    real *t, *u; /* t: the position in the table interval; u: 3 per edge */
    __device__ void take(Arena<real>& A) {
        j = (int*)A.take(TN_EDGE_CHUNK), zj = (int*)A.take(TN_EDGE_CHUNK), slot = (int*)A.take(TN_EDGE_CHUNK);
        g = (int*)A.take(TN_EDGE_CHUNK), count = (int*)A.take(2), t = A.take(TN_EDGE_CHUNK), u = A.take(3 * TN_EDGE_CHUNK);
    }
    __device__ RadialPoint point(const TnNet<real>& N, int e) const {
        RadialPoint p;
        p.g = g[e], p.s = t[e], p.h = N.th; /* not a division per edge and thread */
        return p;
    }
};
template <typename real>
__device__ int edge_chunk(const TnNet<real>& N, const TnBuf<real>& b, int i, int s0, int s1, EdgeChunk<real>& E) {
    __syncthreads(); /* the previous chunk has been read */
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        int count = 0;
        for (int base = s0; base < s1; base += 32) {
            const int s = base + lane;
            double d = 0;
            real u[3] = {0, 0, 0};
            int j = i;
            bool keep = false;
            if (s < s1) {
                j = edge_geometry(b, i, s, &d, u);
                keep = s == 0 || edge_on(N, d);
            }
            const unsigned mask = __ballot_sync(0xffffffffu, keep);
            const int e = count + __popc(mask & ((1u << lane) - 1));
            if (keep) {
                const RadialPoint p = radial_point(N, d);
                E.j[e] = j, E.zj[e] = b.z[j], E.slot[e] = s, E.g[e] = p.g, E.t[e] = (real)p.s;
                E.u[3 * e] = u[0], E.u[3 * e + 1] = u[1], E.u[3 * e + 2] = u[2];
            }
            count += __popc(mask);
        }
        if (lane == 0) *E.count = count;
    }
    __syncthreads();
    return *E.count;
}

/* The per-channel sums of atom i over its edges when gridDim.y blocks share them (each every
   gridDim.y-th edge): every block calls this with its partial sums of kf reals in shared memory
   (sm, group_reals(kf) reserved). Where the atom's blocks are one thread-block cluster
   (TN_CLUSTER_SUM), blocks 1..G-1 store their sums into block 0's shared memory (slots: (G − 1) kf
   reals after sm), arrive at the cluster barrier and leave (false); block 0 waits there once, adds the
   slots in group order into sm and returns true. Else each writes them to b.split, and the last to
   finish adds all in group order. The same order either way: the same bits. Every thread of the
   block calls it, and, with clusters, group_begin() first, before anything that may wait long. */
__device__ __forceinline__ bool group_cluster() { return gridDim.y > 1 && cluster_blocks() == gridDim.y; }
/* The shared memory of group_sum's sm for kf reals: with clusters, the slots follow the sums. */
__device__ __forceinline__ size_t group_reals(size_t kf) { return group_cluster() ? (kf + 1) / 2 * 2 * gridDim.y : kf; }
/* The barrier's first phase: that every block of the cluster has started (and so has shared memory
   to store into) before any stores into another's; it is passed by the time the sums are done. */
__device__ __forceinline__ void group_begin() {
    if (group_cluster()) cluster_arrive_relaxed();
}
template <typename real> __device__ bool group_sum(const TnBuf<real>& b, int i, real* sm, int kf) {
    if (gridDim.y == 1) return true;
    const int G = gridDim.y;
    if (group_cluster()) {
        real* slots = sm + (kf + 1) / 2 * 2;
        cluster_wait(); /* every block has started */
        if (blockIdx.y != 0) {
            __syncthreads(); /* sm complete */
            real* mine = slots + (size_t)(blockIdx.y - 1) * kf;
            for (int q = threadIdx.x; q < kf; q += blockDim.x) cluster_store(mine + q, 0, sm[q]);
            cluster_arrive_release(); /* the stores visible to block 0 after its wait */
            return false;
        }
        cluster_arrive_release();
        cluster_wait(); /* every other block's sums are in the slots (also orders sm's writes before the reads below) */
        for (int q = threadIdx.x; q < kf; q += blockDim.x) {
            real x = sm[q];
            for (int g = 1; g < G; g++) x += slots[(size_t)(g - 1) * kf + q];
            sm[q] = x;
        }
        __syncthreads(); /* block 0's sums visible to all its threads */
        return true;
    }
    __shared__ int last;
    __syncthreads(); /* sm complete */
    real* mine = b.split + ((size_t)i * G + blockIdx.y) * kf;
    for (int q = threadIdx.x; q < kf; q += blockDim.x) __stcg(mine + q, sm[q]);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(b.split_count + i, 1) == G - 1;
    __syncthreads();
    if (!last) return false;
    __threadfence();
    const real* all = b.split + (size_t)i * G * kf;
    for (int q = threadIdx.x; q < kf; q += blockDim.x) {
        real x = __ldcg(all + q);
        for (int g = 1; g < G; g++) x += __ldcg(all + (size_t)g * kf + q);
        sm[q] = x;
    }
    if (threadIdx.x == 0) b.split_count[i] = 0; /* for the next launch */
    __syncthreads();
    return true;
}
/* The embedding, atom i (block): Xe_i = Σ_j embed_edge over its edges (the self loop included);
   the irreducible parts of Xe into S1 (for the channel linear elt), then the LayerNorm of |Xe|²
   into ln, the input of the norm MLP nrm = SiLU(els₁ SiLU(els₀ ·)) (k_tn_rows); kept for the
   backward pass: Xe, xhat, rstd. */
template <typename real> __global__ void __launch_bounds__(TN_THREADS) k_tn_embed(const TnNet<real> N, const TnBuf<real> b) {
    pdl_start();
    extern __shared__ __align__(16) unsigned char tn_smem[];
    Arena<real> A = {(real*)tn_smem};
    const int i = blockIdx.x, F = N.F;
    real* red = A.take(TN_THREADS / 32);
    real *Xe = A.take(group_reals(9 * F)), *rb = A.take(N.R), *sq = A.take(F);
    EdgeChunk<real> E;
    E.take(A);
    group_begin();
    const int ns = 1 + b.nbr_n[i];
    const real* zpi = N.zp + (size_t)b.z[i] * F;
    if (N.emb_table) { /* each thread its channels, summed in registers; the table is 0 where C(d) is;
                          block blockIdx.y of gridDim.y every gridDim.y-th edge (group_sum) */
        const int grp = blockIdx.y, groups = gridDim.y;
        for (int c0 = 0; c0 < ns; c0 += TN_EDGE_CHUNK) {
            const int ne = edge_chunk(N, b, i, c0, min(ns, c0 + TN_EDGE_CHUNK), E);
            for (int f = threadIdx.x; f < F; f += TN_THREADS) {
                real x[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
                if (c0 > 0) ld(Xe, F, f, x);
                const real zp = zpi[f];
#pragma unroll tn_edge_unroll
                for (int e = grp; e < ne; e += groups) {
                    const RadialPoint rp = E.point(N, e);
                    const real zij = zp + N.zq[(size_t)E.zj[e] * F + f];
                    const real u[3] = {E.u[3 * e], E.u[3 * e + 1], E.u[3 * e + 2]};
                    real w[3];
                    for (int q = 0; q < 3; q++) w[q] = radial_value(N.emb_table, 3 * F, rp, q * F + f, (real*)NULL) * zij;
                    embed_edge(w, u, x);
                }
                st(Xe, F, f, x);
            }
        }
        if (!group_sum(b, i, Xe, 9 * F)) return;
    } else {
        for (int q = threadIdx.x; q < 9 * F; q += TN_THREADS) Xe[q] = 0;
        for (int s = 0; s < ns; s++) {
            double d;
            real u[3];
            const int j = edge_geometry(b, i, s, &d, u);
            if (s > 0 && !edge_on(N, d)) continue;
            real c, dc;
            cutoff_fn(N, d, &c, &dc);
            if (c == 0) continue;
            __syncthreads(); /* the previous edge's rb has been read (and Xe cleared) */
            rbf_sh(N, d, rb, (real*)NULL);
            __syncthreads();
            for (int f = threadIdx.x; f < F; f += TN_THREADS) {
                const real zij = zpi[f] + N.zq[(size_t)b.z[j] * F + f];
                real w[3], x[9];
                for (int q = 0; q < 3; q++) {
                    const Lin<real>& L = N.dp[q];
                    real s2 = L.b[f];
                    for (int r = 0; r < N.R; r++) s2 += L.wt[(size_t)r * F + f] * rb[r];
                    w[q] = s2 * c * zij;
                }
                ld(Xe, F, f, x);
                embed_edge(w, u, x);
                st(Xe, F, f, x);
            }
        }
    }
    __syncthreads();
    real part = 0;
    for (int f = threadIdx.x; f < F; f += TN_THREADS) {
        real m[9], t[TN_NI];
        ld(Xe, F, f, m);
        st(b.Xe + (size_t)i * 9 * F, F, f, m);
        decompose(m, t);
        st(b.S1 + (size_t)i * TN_NI * F, F, f, t);
        real s = 0;
        for (int c = 0; c < 9; c++) s += m[c] * m[c];
        sq[f] = s;
        part += s;
    }
    const real mean = block_sum(part, red) / real(F);
    part = 0;
    for (int f = threadIdx.x; f < F; f += TN_THREADS) part += (sq[f] - mean) * (sq[f] - mean);
    const real var = block_sum(part, red) / real(F);
    const real r = real(1) / dsqrt(var + real(TN_LN_EPS));
    if (threadIdx.x == 0) b.rstd[i] = r;
    for (int f = threadIdx.x; f < F; f += TN_THREADS) {
        const real xh = (sq[f] - mean) * r;
        b.xhat[(size_t)i * F + f] = xh;
        b.ln[(size_t)i * F + f] = xh * N.init_w[f] + N.init_b[f];
    }
}

/* X⁰ = compose(nrm_p(c) · WT_c) (WT: the channel linear elt of the embedding's parts), and the first
   layer's input parts into S3 and t, for atom channel (i, f) given its WT. */
template <typename real>
__device__ __forceinline__ void x0_step(const TnNet<real>& N, const TnBuf<real>& b, int i, int f, const real (&wt)[TN_NI], real (&t)[TN_NI]) {
    const int F = N.F;
    real m[9];
    for (int c = 0; c < TN_NI; c++) t[c] = b.nrm[(size_t)i * 3 * F + part_of(c) * F + f] * wt[c];
    compose(t, m);
    st(b.X + (size_t)i * 9 * F, F, f, m);
    normalized_parts(m, t);
    st(b.S3 + (size_t)i * TN_NI * F, F, f, t);
}

/* The table factors (DERIV: their derivatives d/dd) of channel f (3: one per part) of the block's first TN_EDGE_PRE edges of the
   first chunk (e = grp, grp + groups, ...: those of its group), before the wait: they depend only on
   the distances and the tables. The same values as radial_value's in the loop after the wait. */
template <bool DERIV, typename real>
__device__ __forceinline__ void edge_pre(const real* __restrict__ T, const TnNet<real>& N, const EdgeChunk<real>& E, int ne, int grp, int groups,
                                         int f, real (&pre)[TN_EDGE_PRE][3]) {
#pragma unroll
    for (int k = 0; k < TN_EDGE_PRE; k++) {
        const int e = grp + k * groups;
        if (e >= ne || f >= N.F) break;
        const RadialPoint rp = E.point(N, e);
#pragma unroll
        for (int q = 0; q < 3; q++)
            pre[k][q] = DERIV ? radial_deriv(T, 3 * N.F, rp, q * N.F + f) : radial_value(T, 3 * N.F, rp, q * N.F + f, (real*)NULL);
    }
}

/* Layer l, atom channel (i, f), given its messages' parts mt: Mirr and the product B = cq (M Y + Y M)
   (O(3)) or 2 Y M (SO(3)) stored, the parts of B / (|B|² + 1) (the second channel linear's input) into t. */
template <typename real>
__device__ __forceinline__ void layer_product(const TnNet<real>& N, const TnBuf<real>& b, int l, int i, int f, const real (&mt)[TN_NI],
                                              real (&t)[TN_NI]) {
    const int F = N.F;
    const size_t at = (size_t)l * b.n + i, F10 = (size_t)TN_NI * F;
    const real cq = b.cq[i];
    real yt[TN_NI], msg[9], Y[9], B[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    st(b.Mirr + at * F10, F, f, mt);
    ld(b.Yirr + at * F10, F, f, yt);
    compose(mt, msg);
    compose(yt, Y);
    if (N.group == TN_GROUP_O3) {
        mm_add(cq, msg, Y, B);
        mm_add(cq, Y, msg, B);
    } else {
        mm_add(real(2), Y, msg, B);
    }
    st(b.B + at * 9 * F, F, f, B);
    normalized_parts(B, t);
}

/* Layer l, atom i (block), after its first channel linear (Y in Yirr): messages M_i = Σ_j f(d_ij) ⊙
   Y_j, the product B = cq (M Y + Y M) (O(3)) or 2 Y M (SO(3)), and the parts of B / (|B|² + 1)
   into S1 for the second channel linear. */
template <typename real, bool EARLY>
__global__ void __launch_bounds__(TN_THREADS) k_tn_layer_b(const TnNet<real> N, const TnLayer<real> Ly, const TnBuf<real> b, int l) {
    extern __shared__ __align__(16) unsigned char tn_smem[];
    Arena<real> A = {(real*)tn_smem};
    const int i = blockIdx.x, F = N.F;
    const size_t at = (size_t)l * b.n + i, F10 = (size_t)TN_NI * F;
    real *Mi = A.take(group_reals(F10)), *rb = A.take(N.R), *h1 = A.take(F), *h2 = A.take(2 * F), *h3 = A.take(3 * F), *a = A.take(2 * F),
         *fac = A.take(3 * F);
    EdgeChunk<real> E;
    E.take(A);
    group_begin();
    const int ns = 1 + b.nbr_n[i], ne0 = Ly.table ? edge_chunk(N, b, i, 0, min(ns, TN_EDGE_CHUNK), E) : 0; /* before the wait */
    const int grp = blockIdx.y, groups = gridDim.y;
    const bool early = EARLY && Ly.table; /* EARLY: up to TN_EDGE_PRE_ATOMS atoms (their own instance: the registers of pre) */
    real pre[TN_EDGE_PRE][3];
    if (early) edge_pre<false>(Ly.table, N, E, ne0, grp, groups, (int)threadIdx.x, pre);
    pdl_start();
    if (Ly.table) { /* each thread its channels, summed in registers; block blockIdx.y of gridDim.y
                       every gridDim.y-th edge (group_sum) */
        const real* Y = b.Yirr + (size_t)l * b.n * F10;
        for (int c0 = 0; c0 < ns; c0 += TN_EDGE_CHUNK) {
            const int ne = c0 == 0 ? ne0 : edge_chunk(N, b, i, c0, min(ns, c0 + TN_EDGE_CHUNK), E);
            for (int f = threadIdx.x; f < F; f += TN_THREADS) {
                real m[TN_NI];
                for (int c = 0; c < TN_NI; c++) m[c] = 0;
                if (c0 > 0) ld(Mi, F, f, m);
                int e = grp;
                if (early && c0 == 0 && f == (int)threadIdx.x)
#pragma unroll
                    for (int k = 0; k < TN_EDGE_PRE && e < ne; k++, e += groups) {
                        const real* Yj = Y + (size_t)E.j[e] * F10;
                        for (int c = 0; c < TN_NI; c++) m[c] += pre[k][part_of(c)] * Yj[c * F + f];
                    }
#pragma unroll tn_edge_unroll
                for (; e < ne; e += groups) {
                    const real* Yj = Y + (size_t)E.j[e] * F10;
                    const RadialPoint rp = E.point(N, e);
                    real fq[3];
                    for (int q = 0; q < 3; q++) fq[q] = radial_value(Ly.table, 3 * F, rp, q * F + f, (real*)NULL);
                    for (int c = 0; c < TN_NI; c++) m[c] += fq[part_of(c)] * Yj[c * F + f];
                }
                st(Mi, F, f, m);
            }
        }
        if (!group_sum(b, i, Mi, (int)F10)) return;
    } else {
        for (int q = threadIdx.x; q < (int)F10; q += TN_THREADS) Mi[q] = 0;
        for (int s = 0; s < ns; s++) {
            double d;
            real u[3];
            const int j = edge_geometry(b, i, s, &d, u);
            if (s > 0 && !edge_on(N, d)) continue;
            const real* Yj = b.Yirr + ((size_t)l * b.n + j) * F10;
            __syncthreads(); /* the previous edge's fac has been read (and Mi cleared) */
            edge_mlp(N, Ly, d, rb, (real*)NULL, h1, h2, h3, a, fac);
            __syncthreads();
            for (int f = threadIdx.x; f < F; f += TN_THREADS)
                for (int c = 0; c < TN_NI; c++) Mi[c * F + f] += fac[part_of(c) * F + f] * Yj[c * F + f];
        }
    }
    __syncthreads();
    for (int f = threadIdx.x; f < F; f += TN_THREADS) {
        real mt[TN_NI], t[TN_NI];
        ld(Mi, F, f, mt);
        layer_product(N, b, l, i, f, mt, t);
        st(b.S1 + (size_t)i * F10, F, f, t);
    }
}

/* Layer l's update of atom channel (i, f), given D's parts (its second channel linear's output):
   dX = compose(D), X^{l+1} = X^l / (|X^l|² + 1) + dX + cq dX² (both stored), and, but after the last
   layer (false), the next layer's input parts into t. */
template <typename real>
__device__ __forceinline__ bool update_core(const TnNet<real>& N, const TnBuf<real>& b, int l, int i, int f, const real (&Dt)[TN_NI],
                                            real (&t)[TN_NI]) {
    const int F = N.F;
    const size_t at = (size_t)l * b.n + i;
    real dX[9], X[9], Xo[9];
    compose(Dt, dX);
    st(b.dX + at * 9 * F, F, f, dX);
    ld(b.X + at * 9 * F, F, f, X);
    const real nx = norm1(X);
    for (int c = 0; c < 9; c++) Xo[c] = X[c] / nx + dX[c];
    mm_add(b.cq[i], dX, dX, Xo);
    st(b.X + ((size_t)(l + 1) * b.n + i) * 9 * F, F, f, Xo);
    if (l + 1 >= N.L) return false;
    normalized_parts(Xo, t);
    return true;
}
/* update_core with the next layer's input parts into S3. */
template <typename real>
__device__ __forceinline__ void update_step(const TnNet<real>& N, const TnBuf<real>& b, int l, int i, int f, const real (&Dt)[TN_NI]) {
    real t[TN_NI];
    if (update_core(N, b, l, i, f, Dt, t)) st(b.S3 + (size_t)i * TN_NI * N.F, N.F, f, t);
}

__host__ __device__ __forceinline__ size_t smem_round(size_t n) { return (n + 3) / 4 * 4; } /* 16-byte steps */
/* k_tn_out_a's and k_tn_out_b's shared memory with the output linear inside (LIN): its weights, then
   2W + 3F reals (tn_smem_reals' out) and the linear's output and input gradients, + rounding */
template <typename real> static size_t out_lin_bytes(const TnNet<real>& N) {
    const size_t no = (size_t)N.linear.n_out, ni = (size_t)N.linear.n_in;
    return (smem_round(ni * no) + 2 * TN_THREADS / 32 + 3 * (size_t)N.F + no + ni + 16) * sizeof(real);
}
/* count reals from global to shared memory, by cp.async, 16 bytes a copy where both are aligned */
template <typename real> __device__ __forceinline__ void copy_async(real* dst, const real* src, size_t count) {
    constexpr size_t V = 16 / sizeof(real);
    size_t q = threadIdx.x;
    if ((((size_t)dst | (size_t)src) & 15) == 0) {
        for (size_t v = threadIdx.x; v < count / V; v += blockDim.x) cp_async16(dst + v * V, src + v * V, true);
        q = count / V * V + threadIdx.x;
    }
    for (; q < count; q += blockDim.x) {
        if (sizeof(real) == 4) cp_async4(dst + q, src + q, true);
        else cp_async8(dst + q, src + q, true);
    }
}
/* The output, part 1, atom i (block): with interaction layers first the last one's update_step
   (its second channel linear's output D in S2) for the atom's channels, then the parts T of X^L
   (into S1, for part 2), x = (3|I|², |A|², |S|²) per channel and its LayerNorm over the 3F values:
   xhat, rstd kept, y = xhat · w + b the input of the output MLP; with LIN (few atoms) also the
   output linear and its SiLU (into oyl, oh; else k_tn_rows), its weights (wt) copied into shared
   memory by cp.async before the wait for the predecessor. */
template <typename real, bool LIN> __global__ void __launch_bounds__(TN_THREADS) k_tn_out_a(const TnNet<real> N, const TnBuf<real> b) {
    extern __shared__ __align__(16) unsigned char tn_smem[];
    const int i = blockIdx.x, F = N.F;
    const size_t nw = LIN ? (size_t)N.linear.n_in * N.linear.n_out : 0;
    real* wlin = (real*)tn_smem;
    if (LIN) copy_async(wlin, N.linear.wt, nw), cp_async_commit();
    pdl_start();
    Arena<real> A = {(real*)tn_smem + smem_round(nw)};
    real *red = A.take(TN_THREADS / 32), *x = A.take(3 * F);
    const real* X = b.X + ((size_t)N.L * b.n + i) * 9 * F;
    real part = 0;
    for (int f = threadIdx.x; f < F; f += TN_THREADS) {
        real m[9], t[TN_NI];
        if (N.L > 0) { /* X^L of channel f, written by this thread */
            ld(b.S2 + (size_t)i * TN_NI * F, F, f, t);
            update_step(N, b, N.L - 1, i, f, t);
        }
        ld(X, F, f, m);
        decompose(m, t);
        st(b.S1 + (size_t)i * TN_NI * F, F, f, t);
        x[f] = real(3) * t[0] * t[0];
        x[F + f] = real(2) * (t[1] * t[1] + t[2] * t[2] + t[3] * t[3]);
        x[2 * F + f] = t[4] * t[4] + t[5] * t[5] + t[6] * t[6] + real(2) * (t[7] * t[7] + t[8] * t[8] + t[9] * t[9]);
        part += x[f] + x[F + f] + x[2 * F + f];
    }
    const real mean = block_sum(part, red) / real(3 * F);
    part = 0;
    for (int q = threadIdx.x; q < 3 * F; q += TN_THREADS) part += (x[q] - mean) * (x[q] - mean); /* block_sum synchronised */
    const real var = block_sum(part, red) / real(3 * F);
    const real rstd = real(1) / dsqrt(var + real(TN_LN_EPS));
    if (threadIdx.x == 0) b.orstd[i] = rstd;
    for (int q = threadIdx.x; q < 3 * F; q += TN_THREADS) {
        const real xh = (x[q] - mean) * rstd;
        b.oxhat[(size_t)i * 3 * F + q] = xh;
        if (LIN) x[q] = xh * N.out_w[q] + N.out_b[q]; /* each thread its own q: no barrier before */
        else b.oy[(size_t)i * 3 * F + q] = xh * N.out_w[q] + N.out_b[q];
    }
    if (!LIN) return;
    cp_async_wait_all();
    __syncthreads();
    /* the output linear (k_tn_rows' sums: in k order, then the bias) and its SiLU */
    const int no = N.linear.n_out, ni = N.linear.n_in;
    for (int o = threadIdx.x; o < no; o += TN_THREADS) {
        real acc = 0;
#pragma unroll 8
        for (int k = 0; k < ni; k++) acc += wlin[(size_t)k * no + o] * x[k];
        const real z = acc + (N.linear.b ? N.linear.b[o] : real(0));
        b.oyl[(size_t)i * no + o] = z;
        b.oh[(size_t)i * no + o] = act(N.act, z);
    }
}

/* The atoms' energies: the head's last layer at the energy's column (its last), a dot product of
   its weights' row with the layer's input (in, n_in per atom; the lanes' sums added in a fixed tree
   order), + bias, · std + atomref, × scale into atom_e; and with forces the head's last layer
   backward: dE/d(its output) is std at the energy's column and 0 at the others, so dE/d(its
   input) is std · that row of its weight, times SiLU' of the input's pre-activation (aux, n_in per
   atom) into g (the row GEMM's sum and epilogue, in one step). One warp per atom, lanes over the
   inputs. */
template <typename real>
__global__ void k_tn_out_e(const TnNet<real> N, const TnBuf<real> b, const real* __restrict__ in, real* __restrict__ g,
                           const real* __restrict__ aux, double scale) {
    pdl_start();
    const int i = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    if (i >= b.n) return; /* whole warps */
    const Lin<real>& Lh = N.head[N.H - 1];
    const int on = Lh.n_out, ni = Lh.n_in;
    const real *x = in + (size_t)i * ni, *w = Lh.w + (size_t)(on - 1) * ni;
    real part = 0;
    for (int k = lane; k < ni; k += 32) part += w[k] * x[k];
    for (int o = 16; o > 0; o >>= 1) part += __shfl_down_sync(0xffffffffu, part, o);
    if (lane == 0) {
        const real last = part + (Lh.b ? Lh.b[on - 1] : real(0));
        const double e = (double)last * (double)N.stdv + (N.atomref ? N.atomref[b.z[i]] : 0.0);
        b.atom_e[i] += scale * e;
    }
    if (g)
        for (int o = lane; o < ni; o += 32)
            g[(size_t)i * ni + o] = (N.stdv * Lh.w[(size_t)(on - 1) * ni + o] + real(0)) * act_d(N.act, aux[(size_t)i * ni + o]);
}

/*
 * The whole head for few atoms, one launch instead of the row GEMMs of its layers forward and
 * backward and k_tn_out_e: one block per atom from oh, the output linear's activation, through the
 * head's hidden layers (SiLU after each) to the energy at the last layer's last column (as
 * k_tn_out_e), and with forces back to dE/d(the linear's pre-activation) into g (n × F, the linear's
 * backward input). The hidden layers' weights are copied into shared memory by cp.async (16 bytes a
 * copy) before the wait for the predecessor, both as wt (forward: threads over the outputs read a
 * row's consecutive reals) and as w (backward: threads over the inputs). Each output's sum is split
 * over as many threads as the block has to spare (head_sums), the parts added in a fixed order,
 * so the same inputs give the same bits.
 */
/* k_tn_head's shared memory in reals: the hidden layers' weights (wt, w), the last layer's energy
   row; the atom's input and the linear's pre-activation, each hidden layer's pre-activation and
   activation, two gradients, the partial sums. */
/* the head's widest input */
template <typename real> __host__ __device__ size_t head_wide(const TnNet<real>& N) {
    size_t wide = 0;
    for (int h = 0; h < N.H; h++)
        if ((size_t)N.head[h].n_in > wide) wide = (size_t)N.head[h].n_in;
    return wide;
}
template <typename real> __host__ __device__ size_t head_reals(const TnNet<real>& N) {
    size_t w = 0, per = 2 * (size_t)N.head[0].n_in;
    for (int h = 0; h + 1 < N.H; h++)
        w += 2 * smem_round((size_t)N.head[h].n_in * N.head[h].n_out), per += 2 * (size_t)N.head[h].n_out;
    return w + smem_round((size_t)N.head[N.H - 1].n_in) + per + 2 * head_wide(N) + TN_HEAD_THREADS;
}
/* y[o] = Σ_k w[k · no + o] x[k] for o < no, k < nk (forward: w = wt; backward: w, n_out × n_in, its
   inputs the outputs o), then out(o, y[o]), by the block:
   each sum split into ks = blockDim / no parts of k (one where no ≥ blockDim), each part in k order,
   the parts through red added in part order. Ends synchronised (out's writes visible). */
template <typename real, typename Out>
__device__ __forceinline__ void head_sums(const real* w, const real* x, int nk, int no, real* red, Out out) {
    const int T = blockDim.x, ks = no < T ? T / no : 1;
    for (int o0 = 0; o0 < no; o0 += T) {
        const int t = threadIdx.x, o = o0 + t % no, part = t / no;
        const bool mine = o < no && part < ks; /* no < T < 2 no: threads t >= no have no part */
        real s = 0;
        if (mine) {
            const int k0 = part * nk / ks, k1 = (part + 1) * nk / ks;
#pragma unroll 8 /* the loads of 8 k in flight */
            for (int k = k0; k < k1; k++) s += w[(size_t)k * no + o] * x[k];
        }
        if (ks > 1) {
            red[t] = s;
            __syncthreads();
            if (t < no) {
                s = red[t];
                for (int q = 1; q < ks; q++) s += red[q * no + t];
                out(t, s);
            }
        } else if (mine) {
            out(o, s);
        }
        __syncthreads();
    }
}
template <typename real>
__global__ void __launch_bounds__(TN_HEAD_THREADS) k_tn_head(const TnNet<real> N, const TnBuf<real> b, real* __restrict__ g, double scale) {
    extern __shared__ __align__(16) unsigned char tn_smem[];
    const int H = N.H, i = blockIdx.x;
    real* p = (real*)tn_smem;
    for (int h = 0; h + 1 < H; h++) { /* the weights (constant) while the predecessor drains */
        const Lin<real>& Lh = N.head[h];
        const size_t nw = (size_t)Lh.n_in * Lh.n_out;
        copy_async(p, Lh.wt, nw);
        copy_async(p + smem_round(nw), Lh.w, nw);
        p += 2 * smem_round(nw);
    }
    const Lin<real>& Ll = N.head[H - 1];
    const int nl = Ll.n_in, ni0 = N.head[0].n_in;
    real* wl = p;
    copy_async(wl, Ll.w + (size_t)(Ll.n_out - 1) * nl, (size_t)nl);
    p += smem_round((size_t)nl);
    const size_t wide = head_wide(N);
    real *x0 = p, *y0 = x0 + ni0; /* y0: the linear's pre-activation (oyl), for the backward's last step */
    cp_async_commit();
    pdl_start();
    for (int k = threadIdx.x; k < ni0; k += blockDim.x) x0[k] = b.oh[(size_t)i * ni0 + k], y0[k] = b.oyl[(size_t)i * ni0 + k];
    cp_async_wait_all();
    __syncthreads();
    /* forward through the hidden layers: pre-activations z and activations a after y0 */
    const real* w = (const real*)tn_smem;
    const real* x = x0;
    real* za = y0 + ni0;
    size_t zlen = 0;
    for (int h = 0; h + 1 < H; h++) zlen += 2 * (size_t)N.head[h].n_out;
    real* red = za + zlen + 2 * wide;
    for (int h = 0; h + 1 < H; h++) {
        const Lin<real>& Lh = N.head[h];
        const int no = Lh.n_out;
        real *z = za, *a = za + no;
        head_sums(w, x, Lh.n_in, no, red, [&](int o, real y) {
            y += Lh.b ? Lh.b[o] : real(0);
            z[o] = y, a[o] = act(N.act, y);
        });
        w += 2 * smem_round((size_t)Lh.n_in * no), x = a, za = a + no;
    }
    /* the energy (as k_tn_out_e, warp 0) */
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        real part = 0;
        for (int k = lane; k < nl; k += 32) part += wl[k] * x[k];
        for (int o = 16; o > 0; o >>= 1) part += __shfl_down_sync(0xffffffffu, part, o);
        if (lane == 0) {
            const real last = part + (Ll.b ? Ll.b[Ll.n_out - 1] : real(0));
            const double e = (double)last * (double)N.stdv + (N.atomref ? N.atomref[b.z[i]] : 0.0);
            b.atom_e[i] += scale * e;
        }
    }
    if (!g) return;
    /* backward: dE/d(the last layer's input) is std times its energy row, then through each hidden
       layer's activation and weights; its pre-activation is that layer's z, or the linear's (y0) */
    real *ga = za, *gb = za + wide;
    const real* zl = H > 1 ? x - N.head[H - 2].n_out : NULL; /* the last hidden layer's z, just before its a */
    for (int k = threadIdx.x; k < nl; k += blockDim.x) {
        const real v = (N.stdv * wl[k] + real(0)) * act_d(N.act, H > 1 ? zl[k] : y0[k]);
        if (H > 1) ga[k] = v;
        else g[(size_t)i * nl + k] = v;
    }
    __syncthreads();
    for (int h = H - 2; h >= 0; h--) {
        const Lin<real>& Lh = N.head[h];
        const int no = Lh.n_out, ni = Lh.n_in;
        const size_t nw = (size_t)ni * no;
        w -= 2 * smem_round(nw);
        const real* zp = h > 0 ? zl - 2 * N.head[h - 1].n_out : NULL; /* layer h − 1's z (zl: layer h's) */
        /* dE/d(input k) = Σ_o w[o][k] ga[o] */
        head_sums(w + smem_round(nw), ga, no, ni, red, [&](int k, real y) {
            const real v = (y + real(0)) * act_d(N.act, h > 0 ? zp[k] : y0[k]);
            if (h > 0) gb[k] = v;
            else g[(size_t)i * ni + k] = v;
        });
        real* t = ga;
        ga = gb, gb = t;
        zl = zp;
    }
}

/* The parts of dE/d(dX) of layer l for its second channel linear, into S3, given dE/dX^{l+1}
   (gXo) of channel f of atom i: X^{l+1} = ... + dX + cq dX² gives gXo + cq (gXo dXᵀ + dXᵀ gXo). */
template <typename real>
__device__ __forceinline__ void update_back(const TnBuf<real>& b, int F, int l, int i, int f, const real (&gXo)[9]) {
    real dX[9], gdX[9], t[TN_NI];
    ld(b.dX + ((size_t)l * b.n + i) * 9 * F, F, f, dX);
    const real cq = b.cq[i];
    for (int c = 0; c < 9; c++) gdX[c] = gXo[c];
    mm_nt_add(cq, gXo, dX, gdX);
    mm_tn_add(cq, dX, gXo, gdX);
    compose_adj(gdX, t);
    st(b.S3 + (size_t)i * TN_NI * F, F, f, t);
}
/* The output backward, part 2, atom i (block): from dE/dy (gy, 3F per atom) through the LayerNorm
   to dE/dX^L (gX); with LIN (few atoms) gy is dE/d(the output linear's output), F per atom, and
   the block first takes it back through the linear (its weights w copied into shared memory by
   cp.async before the wait for the predecessor; else k_tn_rows). */
template <typename real, bool LIN>
__global__ void __launch_bounds__(TN_THREADS) k_tn_out_b(const TnNet<real> N, const TnBuf<real> b, const real* __restrict__ gy) {
    extern __shared__ __align__(16) unsigned char tn_smem[];
    const size_t nw = LIN ? (size_t)N.linear.n_in * N.linear.n_out : 0;
    real* wlin = (real*)tn_smem;
    if (LIN) copy_async(wlin, N.linear.w, nw), cp_async_commit();
    pdl_start();
    Arena<real> A = {(real*)tn_smem + smem_round(nw)};
    const int i = blockIdx.x, F = N.F;
    { /* atom i's edge gradients, which the layers backward and k_tn_eb2 add to: its slots in use */
        const size_t e0 = (size_t)i * (b.cap + 1);
        const int ns = 1 + b.nbr_n[i]; /* nbr_n <= cap */
        for (int q = threadIdx.x; q < ns; q += TN_THREADS) b.gd[e0 + q] = 0;
        for (int q = threadIdx.x; q < 3 * ns; q += TN_THREADS) b.gu[3 * e0 + q] = 0;
    }
    real *red = A.take(2 * TN_THREADS / 32), *ga = A.take(3 * F);
    const real *g = LIN ? NULL : gy + (size_t)i * 3 * F, *xhat = b.oxhat + (size_t)i * 3 * F;
    if (LIN) { /* dE/dy = linearᵀ gy (k_tn_rows' sums: in the linear's output order) */
        const int no = N.linear.n_out, ni = N.linear.n_in;
        real *gz = A.take(no), *gl = A.take(ni);
        for (int o = threadIdx.x; o < no; o += TN_THREADS) gz[o] = gy[(size_t)i * no + o];
        cp_async_wait_all();
        __syncthreads();
        for (int k = threadIdx.x; k < ni; k += TN_THREADS) {
            real acc = 0;
#pragma unroll 8
            for (int o = 0; o < no; o++) acc += wlin[(size_t)o * ni + k] * gz[o];
            gl[k] = acc + real(0);
        }
        __syncthreads();
        g = gl;
    }
    real p[2] = {0, 0};
    for (int q = threadIdx.x; q < 3 * F; q += TN_THREADS) {
        const real v = g[q] * N.out_w[q];
        p[0] += v, p[1] += v * xhat[q];
    }
    block_sums(p, red);
    const real m1 = p[0] / real(3 * F), m2 = p[1] / real(3 * F);
    const real rstd = b.orstd[i];
    for (int q = threadIdx.x; q < 3 * F; q += TN_THREADS) ga[q] = rstd * (g[q] * N.out_w[q] - m1 - xhat[q] * m2);
    __syncthreads();
    for (int f = threadIdx.x; f < F; f += TN_THREADS) {
        real t[TN_NI], gT[TN_NI], gm[9];
        ld(b.S1 + (size_t)i * TN_NI * F, F, f, t);
        gT[0] = real(6) * t[0] * ga[f];
        for (int c = 1; c <= 3; c++) gT[c] = real(4) * t[c] * ga[F + f];
        for (int c = 4; c <= 6; c++) gT[c] = real(2) * t[c] * ga[2 * F + f];
        for (int c = 7; c <= 9; c++) gT[c] = real(4) * t[c] * ga[2 * F + f];
        decompose_adj(gT, gm);
        st(b.gX + (size_t)i * 9 * F, F, f, gm);
        if (N.L > 0) update_back(b, F, N.L - 1, i, f, gm);
    }
}

/* Per-edge sums over the block without a barrier per edge: each warp's part of edge s goes to
   red[((s − s0) · K + k) · W + warp] (W = TN_THREADS / 32) for the edges of a chunk [s0, s0 +
   TN_EDGE_CHUNK); edge_sum then adds the W parts in warp order. */
template <typename real, int K> __device__ __forceinline__ void edge_part(real* red, int s, real (&v)[K]) {
#pragma unroll
    for (int k = 0; k < K; k++) {
        real x = v[k];
        for (int o = 16; o > 0; o >>= 1) x += __shfl_down_sync(0xffffffffu, x, o);
        if ((threadIdx.x & 31) == 0) red[(s * K + k) * (TN_THREADS / 32) + (threadIdx.x >> 5)] = x;
    }
}
template <typename real> __device__ __forceinline__ real edge_sum(const real* red, int s, int K, int k) {
    real x = 0;
    for (int w = 0; w < TN_THREADS / 32; w++) x += red[(s * K + k) * (TN_THREADS / 32) + w];
    return x;
}

/* Layer l, atom channel (i, f), given g = dE/d(the second channel linear's input parts): back through
   B / (|B|² + 1) and the product (cq: the atom's charge factor); dE/dM's 10 parts go to outM, then
   the direct dE/dY's to outY. The same maths as k_tn_b1's loop over its channels, which keeps its
   own copy: through this function its float32 instance spilled more and ran slower beyond 64 atoms. */
template <typename real, typename OutM, typename OutY>
__device__ __forceinline__ void product_back(const TnNet<real>& N, const TnBuf<real>& b, int l, int i, real cq, int f, const real (&g)[TN_NI],
                                             OutM outM, OutY outY) {
    const int F = N.F;
    const size_t at = (size_t)l * b.n + i, F10 = (size_t)TN_NI * F;
    real gCn[9], B[9], gB[9], mt[TN_NI], yt[TN_NI], msg[9], Y[9];
    decompose_adj(g, gCn);
    ld(b.B + at * 9 * F, F, f, B);
    real nc = 1, dot = 0;
    for (int c = 0; c < 9; c++) nc += B[c] * B[c], dot += gCn[c] * B[c];
    for (int c = 0; c < 9; c++) gB[c] = gCn[c] / nc - real(2) * B[c] * dot / (nc * nc);
    ld(b.Mirr + at * F10, F, f, mt);
    ld(b.Yirr + at * F10, F, f, yt);
    compose(mt, msg);
    compose(yt, Y);
    real gmsg[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0}, gYf[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    if (N.group == TN_GROUP_O3) {
        mm_nt_add(cq, gB, Y, gmsg);
        mm_tn_add(cq, Y, gB, gmsg);
        mm_tn_add(cq, msg, gB, gYf);
        mm_nt_add(cq, gB, msg, gYf);
    } else {
        mm_nt_add(real(2), gB, msg, gYf);
        mm_tn_add(real(2), Y, gB, gmsg);
    }
    real o[TN_NI];
    compose_adj(gmsg, o);
    outM(o);
    compose_adj(gYf, o);
    outY(o);
}

/* Layer backward part 1, atom i (block), after the second channel linear's backward (dE/dC's parts
   in S2): dE/dM_i (gM), the direct dE/dY_i (gY), and dE/dd of i's edges (gd) through the radial
   filter (float32: from the table; else the filter network, whose values go to fac for k_tn_b2). */
template <typename real, bool EARLY>
__global__ void __launch_bounds__(TN_THREADS) k_tn_b1(const TnNet<real> N, const TnLayer<real> Ly, const TnBuf<real> b, int l) {
    extern __shared__ __align__(16) unsigned char tn_smem[];
    Arena<real> A = {(real*)tn_smem};
    const int i = blockIdx.x, F = N.F;
    const size_t at = (size_t)l * b.n + i, F10 = (size_t)TN_NI * F;
    /* with the table, blockIdx.y of gridDim.y takes every gridDim.y-th edge of each chunk (the same
       sums: each edge's in one block); block 0 writes gM, gY, every block keeps dE/dM_i in gMs */
    const int grp = blockIdx.y, groups = gridDim.y;
    real* red = A.take(TN_THREADS / 32);
    real *rb = NULL, *drb = NULL, *h1 = NULL, *h2 = NULL, *h3 = NULL, *a = NULL, *gfac = NULL, *work = NULL, *gMs = NULL;
    if (Ly.table) gMs = A.take(F10);
    else
        rb = A.take(N.R), drb = A.take(N.R), h1 = A.take(F), h2 = A.take(2 * F), h3 = A.take(3 * F), a = A.take(2 * F),
        gfac = A.take(3 * F), work = A.take(6 * F + N.R);
    real* ered = A.take(TN_EDGE_CHUNK * (TN_THREADS / 32));
    EdgeChunk<real> E;
    E.take(A);
    const int ns = 1 + b.nbr_n[i], ne0 = Ly.table && ns > 1 ? edge_chunk(N, b, i, 1, min(ns, 1 + TN_EDGE_CHUNK), E) : 0; /* before the wait */
    const bool early = EARLY && Ly.table; /* EARLY: up to TN_EDGE_PRE_ATOMS atoms (their own instance: the registers of pre) */
    real pre[TN_EDGE_PRE][3];
    if (early) edge_pre<true>(Ly.table, N, E, ne0, grp, groups, (int)threadIdx.x, pre);
    pdl_start();
    const real cq = b.cq[i];
    for (int f = threadIdx.x; f < F; f += TN_THREADS) {
        real g[TN_NI], gCn[9], B[9], gB[9], mt[TN_NI], yt[TN_NI], msg[9], Y[9];
        ld(b.S2 + (size_t)i * F10, F, f, g);
        decompose_adj(g, gCn);
        ld(b.B + at * 9 * F, F, f, B);
        real nc = 1, dot = 0;
        for (int c = 0; c < 9; c++) nc += B[c] * B[c], dot += gCn[c] * B[c];
        for (int c = 0; c < 9; c++) gB[c] = gCn[c] / nc - real(2) * B[c] * dot / (nc * nc);
        ld(b.Mirr + at * F10, F, f, mt);
        ld(b.Yirr + at * F10, F, f, yt);
        compose(mt, msg);
        compose(yt, Y);
        real gmsg[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0}, gYf[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
        if (N.group == TN_GROUP_O3) {
            mm_nt_add(cq, gB, Y, gmsg);
            mm_tn_add(cq, Y, gB, gmsg);
            mm_tn_add(cq, msg, gB, gYf);
            mm_nt_add(cq, gB, msg, gYf);
        } else {
            mm_nt_add(real(2), gB, msg, gYf);
            mm_tn_add(real(2), Y, gB, gmsg);
        }
        real o[TN_NI];
        compose_adj(gmsg, o);
        if (grp == 0) st(b.gM + (size_t)i * F10, F, f, o);
        if (gMs) st(gMs, F, f, o);
        compose_adj(gYf, o);
        if (grp == 0) st(b.gY + (size_t)i * F10, F, f, o);
    }
    const real* gMi = gMs ? gMs : b.gM + (size_t)i * F10; /* each thread reads back only its own channels */
    const size_t e0 = (size_t)i * (b.cap + 1);
    if (Ly.table) { /* dE/dd = Σ dE/dfac · dfac/dd from the table; k_tn_b2 reads the factors there too */
        const real* Y = b.Yirr + (size_t)l * b.n * F10;
        for (int c0 = 1; c0 < ns; c0 += TN_EDGE_CHUNK) {
            const int ne = c0 == 1 ? ne0 : edge_chunk(N, b, i, c0, min(ns, c0 + TN_EDGE_CHUNK), E); /* also: ered has been read */
            int e = grp;
            if (early && c0 == 1)
#pragma unroll
                for (int k = 0; k < TN_EDGE_PRE && e < ne; k++, e += groups) {
                    const real* Yj = Y + (size_t)E.j[e] * F10;
                    const RadialPoint rp = E.point(N, e);
                    real part[1] = {0};
                    for (int f = threadIdx.x; f < F; f += TN_THREADS) {
                        real g3[3] = {0, 0, 0};
                        for (int c = 0; c < TN_NI; c++) g3[part_of(c)] += gMi[c * F + f] * Yj[c * F + f];
                        for (int q = 0; q < 3; q++)
                            part[0] += g3[q] * (f == (int)threadIdx.x ? pre[k][q] : radial_deriv(Ly.table, 3 * F, rp, q * F + f));
                    }
                    edge_part(ered, e, part);
                }
#pragma unroll tn_edge_unroll
            for (; e < ne; e += groups) {
                const real* Yj = Y + (size_t)E.j[e] * F10;
                const RadialPoint rp = E.point(N, e);
                real part[1] = {0};
                for (int f = threadIdx.x; f < F; f += TN_THREADS) {
                    real g3[3] = {0, 0, 0};
                    for (int c = 0; c < TN_NI; c++) g3[part_of(c)] += gMi[c * F + f] * Yj[c * F + f];
                    for (int q = 0; q < 3; q++) part[0] += g3[q] * radial_deriv(Ly.table, 3 * F, rp, q * F + f);
                }
                edge_part(ered, e, part);
            }
            __syncthreads();
            for (int e = threadIdx.x; e < ne; e += TN_THREADS)
                if (e % groups == grp) b.gd[e0 + E.slot[e]] += edge_sum(ered, e, 1, 0);
        }
        return;
    }
    for (int s = 0; s < ns; s++) {
        double d;
        real u[3];
        const int j = edge_geometry(b, i, s, &d, u);
        if (s > 0 && !edge_on(N, d)) continue;
        const real* Yj = b.Yirr + ((size_t)l * b.n + j) * F10;
        real* fe = b.fac + (e0 + s) * 3 * F;
        __syncthreads();
        edge_mlp(N, Ly, d, rb, drb, h1, h2, h3, a, fe);
        if (s == 0) continue; /* the self loop does not move */
        for (int f = threadIdx.x; f < F; f += TN_THREADS) {
            real g3[3] = {0, 0, 0};
            for (int c = 0; c < TN_NI; c++) g3[part_of(c)] += gMi[c * F + f] * Yj[c * F + f];
            gfac[f] = g3[0], gfac[F + f] = g3[1], gfac[2 * F + f] = g3[2];
        }
        __syncthreads();
        const real gd = edge_mlp_back(N, Ly, d, gfac, drb, h1, h2, h3, work, red);
        if (threadIdx.x == 0) b.gd[e0 + s] += gd;
    }
}

/* Layer backward part 2, atom j (block): dE/dY_j = gY_j + Σ over the messages that read Y_j, into
   S1 for the first channel linear's backward. */
template <typename real, bool EARLY>
__global__ void __launch_bounds__(TN_THREADS) k_tn_b2(const TnNet<real> N, const TnLayer<real> Ly, const TnBuf<real> b, int l) {
    extern __shared__ __align__(16) unsigned char tn_smem[];
    Arena<real> A = {(real*)tn_smem};
    const int j = blockIdx.x, F = N.F;
    const size_t F10 = (size_t)TN_NI * F;
    real* gYt = A.take(group_reals(F10));
    EdgeChunk<real> E;
    E.take(A);
    group_begin();
    const int ns = 1 + b.nbr_n[j], ne0 = Ly.table ? edge_chunk(N, b, j, 0, min(ns, TN_EDGE_CHUNK), E) : 0; /* before the wait */
    const int grp = blockIdx.y, groups = gridDim.y;
    const bool early = EARLY && Ly.table; /* EARLY: up to TN_EDGE_PRE_ATOMS atoms (their own instance: the registers of pre) */
    real pre[TN_EDGE_PRE][3];
    if (early) edge_pre<false>(Ly.table, N, E, ne0, grp, groups, (int)threadIdx.x, pre);
    pdl_start();
    const size_t e0 = (size_t)j * (b.cap + 1);
    real* out = b.S1 + (size_t)j * F10;
    if (Ly.table) { /* each thread its channels, in registers (between chunks in gYt); block
                       blockIdx.y of gridDim.y every gridDim.y-th edge, the first from gY (group_sum) */
        for (int c0 = 0; c0 < ns; c0 += TN_EDGE_CHUNK) {
            const int ne = c0 == 0 ? ne0 : edge_chunk(N, b, j, c0, min(ns, c0 + TN_EDGE_CHUNK), E);
            for (int f = threadIdx.x; f < F; f += TN_THREADS) {
                real g[TN_NI];
                if (c0 > 0) ld(gYt, F, f, g);
                else if (grp == 0) ld(b.gY + (size_t)j * F10, F, f, g);
                else
                    for (int c = 0; c < TN_NI; c++) g[c] = 0;
                int e = grp;
                if (early && c0 == 0 && f == (int)threadIdx.x)
#pragma unroll
                    for (int k = 0; k < TN_EDGE_PRE && e < ne; k++, e += groups) {
                        const real* gMi = b.gM + (size_t)E.j[e] * F10;
                        for (int c = 0; c < TN_NI; c++) g[c] += pre[k][part_of(c)] * gMi[c * F + f];
                    }
#pragma unroll tn_edge_unroll
                for (; e < ne; e += groups) {
                    /* the filter of edge (j, i) equals that of (i, j): the same distance */
                    const real* gMi = b.gM + (size_t)E.j[e] * F10;
                    const RadialPoint rp = E.point(N, e);
                    real fq[3];
                    for (int q = 0; q < 3; q++) fq[q] = radial_value(Ly.table, 3 * F, rp, q * F + f, (real*)NULL);
                    for (int c = 0; c < TN_NI; c++) g[c] += fq[part_of(c)] * gMi[c * F + f];
                }
                st(groups > 1 || c0 + TN_EDGE_CHUNK < ns ? gYt : out, F, f, g);
            }
        }
        if (groups == 1 || !group_sum(b, j, gYt, (int)F10)) return;
        for (int q = threadIdx.x; q < (int)F10; q += TN_THREADS) out[q] = gYt[q];
        return;
    }
    for (int q = threadIdx.x; q < (int)F10; q += TN_THREADS) gYt[q] = b.gY[(size_t)j * F10 + q];
    for (int s = 0; s < ns; s++) {
        double d;
        real u[3];
        const int i = edge_geometry(b, j, s, &d, u);
        if (s > 0 && !edge_on(N, d)) continue;
        const real* gMi = b.gM + (size_t)i * F10;
        const real* fe = b.fac + (e0 + s) * 3 * F;
        for (int q = threadIdx.x; q < (int)F10; q += TN_THREADS) {
            const int c = q / F, f = q - c * F;
            gYt[q] += fe[part_of(c) * F + f] * gMi[q];
        }
    }
    for (int q = threadIdx.x; q < (int)F10; q += TN_THREADS) out[q] = gYt[q];
}

/* Embedding backward part 1, atom channel (i, f): from dE/dX⁰ (gX) to dE/dWT's parts (into S3, for
   the channel linear elt's backward) and dE/dnrm through its SiLU (gn, for the norm MLP's backward). */
template <typename real> __device__ __forceinline__ void embed_back1(const TnNet<real>& N, const TnBuf<real>& b, int i, int f, const real (&m)[9]) {
    const int F = N.F;
    const size_t F10 = (size_t)TN_NI * F;
    const real *WT = b.WT + (size_t)i * F10, *nrm = b.nrm + (size_t)i * 3 * F, *h2 = b.h2 + (size_t)i * 3 * F;
    real gx[TN_NI], gw[TN_NI];
    compose_adj(m, gx);
    real g3[3] = {0, 0, 0};
    for (int c = 0; c < TN_NI; c++) {
        const int p = part_of(c);
        g3[p] += gx[c] * WT[c * F + f];
        gw[c] = nrm[p * F + f] * gx[c];
    }
    st(b.S3 + (size_t)i * F10, F, f, gw);
    for (int p = 0; p < 3; p++) b.gn[(size_t)i * 3 * F + p * F + f] = g3[p] * act_d(N.act, h2[p * F + f]);
}

/* After the first channel linear's backward (dE/dT's parts in S2), atom channel (j, f): dE/dX^l =
   the adjoint of X / (|X|² + 1) applied to the parts' and the direct path's gradient, into gX; then
   the update backward of layer l − 1 (update_back), or for layer 0 the embedding backward's first
   step (embed_back1), for atom channel (j, f) given the parts' gradient g. */
template <typename real>
__device__ __forceinline__ void bx_step(const TnNet<real>& N, const TnBuf<real>& b, int l, int j, int f, const real (&g)[TN_NI]) {
    const int F = N.F;
    real gXn[9], x[9], go[9];
    decompose_adj(g, gXn);
    real* gX = b.gX + (size_t)j * 9 * F;
    ld(b.X + ((size_t)l * b.n + j) * 9 * F, F, f, x);
    ld(gX, F, f, go);
    real nx = 1, dot = 0;
    for (int c = 0; c < 9; c++) {
        gXn[c] += go[c]; /* Xout = Xn + ...: the direct path */
        nx += x[c] * x[c];
        dot += gXn[c] * x[c];
    }
    for (int c = 0; c < 9; c++) go[c] = gXn[c] / nx - real(2) * x[c] * dot / (nx * nx);
    st(gX, F, f, go);
    if (l > 0) update_back(b, F, l - 1, j, f, go);
    else embed_back1(N, b, j, f, go);
}

/* The per-channel steps after a channel linear, for atom channel (i, f) given its 10 outputs t:
   x0_step, update_step, bx_step, one thread per atom channel (k_tn_step), reading t from WT or S2
   (TN_CH_EB1: embed_back1 from gX, for a model without interaction layers, where no bx_step of
   layer 0 runs it). */
enum { TN_CH_X0 = 1, TN_CH_UPDATE = 2, TN_CH_BX = 3, TN_CH_EB1 = 4 };
template <typename real, int STEP> __global__ void k_tn_step(const TnNet<real> N, const TnBuf<real> b, int l) {
    pdl_start();
    const size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= (size_t)b.n * N.F) return;
    const int i = (int)(q / N.F), f = (int)(q % N.F);
    if (STEP == TN_CH_EB1) {
        real m[9];
        ld(b.gX + (size_t)i * 9 * N.F, N.F, f, m);
        embed_back1(N, b, i, f, m);
        return;
    }
    real t[TN_NI];
    ld((STEP == TN_CH_X0 ? b.WT : b.S2) + (size_t)i * TN_NI * N.F, N.F, f, t);
    if (STEP == TN_CH_X0) x0_step(N, b, i, f, t, t);
    if (STEP == TN_CH_UPDATE) update_step(N, b, l, i, f, t);
    if (STEP == TN_CH_BX) bx_step(N, b, l, i, f, t);
}

/* float32, few atoms (TN_CHAN_STEP_ATOMS): a channel linear and the per-channel step after it
   (TN_CH_UPDATE or TN_CH_BX) as one launch, one link fewer in the chain: a block computes the
   outputs o0 .. o0 + 8J − 1 of all
   three parts of TN_ALL_ATOMS atoms (chan_tc_block's ALL tiles: the same sums, so the same bits as
   k_tn_chan_tc) into shared memory, then a thread per atom channel runs the step on them; the
   linear's outputs are not stored (only the step reads them). */
static_assert(TN_CHAN_STEP_ATOMS <= TN_CHAN_NARROW_ATOMS, "k_tn_chan_step runs the narrow tiles");
template <int K, int J, int STEP>
__global__ void __launch_bounds__(128) k_tn_chan_step(const ChanW<float> W, const TnNet<float> N, const TnBuf<float> b, const float* __restrict__ in, int l) {
    constexpr int OW = 8 * J;
    __shared__ float tb[TN_ALL_ATOMS * TN_NI * OW];
    chan_tc_block<K, J, true>(W, N.F, in, tb, b.n, blockIdx.x, blockIdx.y, 0);
    __syncthreads();
    const int a = threadIdx.x / OW, o = threadIdx.x % OW, i = blockIdx.x * TN_ALL_ATOMS + a, f = blockIdx.y * OW + o;
    if (a >= TN_ALL_ATOMS || i >= b.n || f >= N.F) return;
    float t[TN_NI];
#pragma unroll
    for (int c = 0; c < TN_NI; c++) t[c] = tb[(a * TN_NI + c) * OW + o];
    if (STEP == TN_CH_UPDATE) update_step(N, b, l, i, f, t);
    if (STEP == TN_CH_BX) bx_step(N, b, l, i, f, t);
}

/*
 * float32 with tables and thread-block clusters, few atoms (TN_LAYER_FUSE_ATOMS): layer l's messages
 * and product (as k_tn_layer_b), its second channel linear and, but for the last layer, update_step
 * and the next layer's first channel linear (Y^{l+1}) as one launch: two links fewer in the chain
 * (the last layer: one; its update runs in k_tn_out_a, which reads the linear's output from S2).
 * Atom i's CG = F / 32 blocks (blockIdx.y) are one cluster, block c owning channels [32c, 32c + 32):
 * lane = channel, warp w summing every TN_LF_WARPS-th edge from w, the warps' sums added in warp
 * order; the product per channel, whose parts every block stores into each block's copy of the
 * linear's input row (10 × F in shared memory, st.shared::cluster) before one cluster barrier; then
 * each block's 10 × 32 outputs, warp w over its F / TN_LF_WARPS of k with those weights in registers
 * (loaded before the wait: they are constant), the warps' sums added in warp order. Every sum in a
 * fixed order: the same inputs give the same bits.
 */
#define TN_LF_KT (TN_LF_MAX_F / TN_LF_WARPS) /* k_tn_layer_f: k per warp at most */
/* A channel linear's three weights (forward: wt, k × F) at output o for k in [kb, kb + kn), zeros past kn. */
__device__ __forceinline__ void lf_weights(const ChanW<float>& W, int F, int kb, int kn, int o, float (&w)[3][TN_LF_KT]) {
#pragma unroll
    for (int p = 0; p < 3; p++)
#pragma unroll
        for (int k = 0; k < TN_LF_KT; k++) w[p][k] = k < kn ? W.m[p][(size_t)(kb + k) * F + o] : 0.0f;
}
/* The block's part of a channel linear from the input row x (10 × F, shared): each warp's partial
   sums over its k into red (TN_LF_WARPS × 10 × 32), then out(c, o) = their sum in warp order for the
   10 components c and 32 outputs o (q = 32 c + o over the block's threads; the caller passes out). */
template <typename Out>
__device__ __forceinline__ void lf_linear(const float* x, int F, int kb, int kn, const float (&w)[3][TN_LF_KT], float* red, Out out) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float acc[TN_NI];
#pragma unroll
    for (int c = 0; c < TN_NI; c++) acc[c] = 0;
#pragma unroll
    for (int k = 0; k < TN_LF_KT; k += 4) {
        if (k >= kn) break;
#pragma unroll
        for (int c = 0; c < TN_NI; c++) {
            const float4 v = *reinterpret_cast<const float4*>(x + c * F + kb + k);
            const int p = part_of(c);
            acc[c] += v.x * w[p][k] + v.y * w[p][k + 1] + v.z * w[p][k + 2] + v.w * w[p][k + 3];
        }
    }
#pragma unroll
    for (int c = 0; c < TN_NI; c++) red[(warp * TN_NI + c) * 32 + lane] = acc[c];
    __syncthreads();
    for (int q = threadIdx.x; q < TN_NI * 32; q += blockDim.x) {
        float s = 0;
#pragma unroll
        for (int v = 0; v < TN_LF_WARPS; v++) s += red[v * TN_NI * 32 + q];
        out(q / 32, q % 32, s);
    }
}
/* Channel f's sums over atom i's edges (the self loop included) of each edge's table factors times
   the neighbour's 10 parts in src (rows of 10F per atom), warp w every TN_LF_WARPS-th edge from w;
   ne0: the first chunk's edges, compacted into E before the wait. */
__device__ __forceinline__ void lf_messages(const TnNet<float>& N, const TnBuf<float>& b, const float* table, const float* src, int i, int ns,
                                            int ne0, EdgeChunk<float>& E, int f, float (&m)[TN_NI]) {
    const int F = N.F, warp = threadIdx.x >> 5;
    const size_t F10 = (size_t)TN_NI * F;
#pragma unroll
    for (int c = 0; c < TN_NI; c++) m[c] = 0;
    for (int c0 = 0; c0 < ns; c0 += TN_EDGE_CHUNK) {
        const int ne = c0 == 0 ? ne0 : edge_chunk(N, b, i, c0, min(ns, c0 + TN_EDGE_CHUNK), E);
#pragma unroll tn_edge_unroll
        for (int e = warp; e < ne; e += TN_LF_WARPS) {
            const float* sj = src + (size_t)E.j[e] * F10;
            const RadialPoint rp = E.point(N, e);
            float fq[3];
#pragma unroll
            for (int q = 0; q < 3; q++) fq[q] = radial_value(table, 3 * F, rp, q * F + f, (float*)NULL);
#pragma unroll
            for (int c = 0; c < TN_NI; c++) m[c] += fq[part_of(c)] * sj[c * F + f];
        }
    }
}
/* Stores a channel's 10 parts t into every block's copy of the input row x (channel f). */
__device__ __forceinline__ void lf_push(float* x, int F, int f, const float (&t)[TN_NI]) {
    const int blocks = (int)gridDim.y;
    for (int r = 0; r < blocks; r++)
#pragma unroll
        for (int c = 0; c < TN_NI; c++) cluster_store(x + c * F + f, r, t[c]);
}
template <bool LAST>
__global__ void __launch_bounds__(32 * TN_LF_WARPS) k_tn_layer_f(const TnNet<float> N, const TnLayer<float> Ly, const ChanW<float> Wn,
                                                                  const TnBuf<float> b, int l) {
    __shared__ __align__(16) float x1[TN_NI * TN_LF_MAX_F], x2[TN_NI * TN_LF_MAX_F], red[TN_LF_WARPS * TN_NI * 32];
    __shared__ __align__(16) float edges[8 * TN_EDGE_CHUNK + 8];
    const int i = blockIdx.x, F = N.F, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, f = (int)blockIdx.y * 32 + lane;
    const int kn = F / TN_LF_WARPS, kb = warp * kn;
    const size_t F10 = (size_t)TN_NI * F;
    cluster_arrive_relaxed(); /* started: the others may store into this block's rows after their first wait */
    Arena<float> A = {edges};
    EdgeChunk<float> E;
    E.take(A);
    const int ns = 1 + b.nbr_n[i], ne0 = edge_chunk(N, b, i, 0, min(ns, TN_EDGE_CHUNK), E); /* before the wait */
    float w2[3][TN_LF_KT], wn[3][TN_LF_KT];
    const ChanW<float> W2 = {{Ly.llt[3].wt, Ly.llt[4].wt, Ly.llt[5].wt}};
    lf_weights(W2, F, kb, kn, f, w2);
    if (!LAST) lf_weights(Wn, F, kb, kn, f, wn);
    pdl_start();
    float m[TN_NI];
    lf_messages(N, b, Ly.table, b.Yirr + (size_t)l * b.n * F10, i, ns, ne0, E, f, m);
#pragma unroll
    for (int c = 0; c < TN_NI; c++) red[(warp * TN_NI + c) * 32 + lane] = m[c];
    __syncthreads();
    cluster_wait(); /* every block of the atom has started */
    if (warp == 0) {
        float mt[TN_NI], t[TN_NI];
#pragma unroll
        for (int c = 0; c < TN_NI; c++) {
            float s = 0;
#pragma unroll
            for (int v = 0; v < TN_LF_WARPS; v++) s += red[(v * TN_NI + c) * 32 + lane];
            mt[c] = s;
        }
        layer_product(N, b, l, i, f, mt, t);
        lf_push(x1, F, f, t);
    }
    cluster_arrive_release();
    cluster_wait(); /* x1 complete in every block (and red read) */
    if (LAST) {
        float* out = b.S2 + (size_t)i * F10 + (size_t)blockIdx.y * 32;
        lf_linear(x1, F, kb, kn, w2, red, [&](int c, int o, float v) { out[(size_t)c * F + o] = v; });
        return;
    }
    float* D = x2; /* the linear's outputs, 10 × 32, before x2 is written (after the next cluster wait) */
    lf_linear(x1, F, kb, kn, w2, red, [&](int c, int o, float v) { D[c * 32 + o] = v; });
    __syncthreads();
    float t[TN_NI] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    if (warp == 0) {
        float Dt[TN_NI];
#pragma unroll
        for (int c = 0; c < TN_NI; c++) Dt[c] = D[c * 32 + lane];
        update_core(N, b, l, i, f, Dt, t);
    }
    cluster_arrive_release(); /* D read: every block may now store into x2 */
    cluster_wait();
    if (warp == 0) lf_push(x2, F, f, t);
    cluster_arrive_release();
    cluster_wait(); /* x2 complete in every block */
    float* out = b.Yirr + ((size_t)(l + 1) * b.n + i) * F10 + (size_t)blockIdx.y * 32;
    lf_linear(x2, F, kb, kn, wn, red, [&](int c, int o, float v) { out[(size_t)c * F + o] = v; });
}

/*
 * float32 with clusters, up to TN_LAYER_FUSE_ATOMS atoms (k_tn_layer_f's conditions): x0_step and
 * the first layer's first channel linear (Y⁰, weights W) as one launch, one link fewer in the chain:
 * atom i's F / 32 blocks one cluster, warp 0 of block c running x0_step for channels [32c, 32c + 32)
 * and pushing their parts into every block's copy of the linear's input row, then, after one cluster
 * barrier, each block's 10 × 32 outputs (lf_linear, the same sums in the same order as
 * k_tn_layer_f's linears).
 */
__global__ void __launch_bounds__(32 * TN_LF_WARPS) k_tn_x0_f(const TnNet<float> N, const ChanW<float> W, const TnBuf<float> b) {
    __shared__ __align__(16) float x1[TN_NI * TN_LF_MAX_F], red[TN_LF_WARPS * TN_NI * 32];
    const int i = blockIdx.x, F = N.F, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, f = (int)blockIdx.y * 32 + lane;
    const int kn = F / TN_LF_WARPS, kb = warp * kn;
    const size_t F10 = (size_t)TN_NI * F;
    cluster_arrive_relaxed(); /* started: the others may store into this block's row after their wait */
    float w[3][TN_LF_KT];
    lf_weights(W, F, kb, kn, f, w);
    pdl_start();
    cluster_wait(); /* every block of the atom has started */
    if (warp == 0) {
        float wt[TN_NI], t[TN_NI];
        ld(b.WT + (size_t)i * F10, F, f, wt);
        x0_step(N, b, i, f, wt, t);
        lf_push(x1, F, f, t);
    }
    cluster_arrive_release();
    cluster_wait(); /* x1 complete in every block */
    float* out = b.Yirr + (size_t)i * F10 + (size_t)blockIdx.y * 32;
    lf_linear(x1, F, kb, kn, w, red, [&](int c, int o, float v) { out[(size_t)c * F + o] = v; });
}

/*
 * float32 with tables and clusters, up to TN_LAYER_FUSE_ATOMS atoms (k_tn_layer_f's): layer l's
 * second channel linear backward and k_tn_b1 as one launch, one link fewer in the chain. Atom i's
 * F / 32 blocks one cluster, block c owning channels [32c, 32c + 32): each reads the atom's whole
 * dE/dD row (S3) into shared memory and computes its 32 channels of Wᵀ g (lf_linear, the weights in
 * registers before the wait), then per channel product_back (gM, gY stored), then per edge its
 * channels' part of dE/dd (warp w every 8th edge, lanes = channels, a butterfly sum over the lanes),
 * stored into block 0's slots; block 0 adds the blocks' parts in block order to gd. The atom's
 * edges (at most TN_LAYER_FUSE_ATOMS − 1) fit one chunk.
 */
static_assert(TN_LAYER_FUSE_ATOMS - 1 <= TN_EDGE_CHUNK, "k_tn_back_f: one chunk of edges per atom");
__global__ void __launch_bounds__(32 * TN_LF_WARPS) k_tn_back_f(const TnNet<float> N, const TnLayer<float> Ly, const TnBuf<float> b, int l) {
    __shared__ __align__(16) float x1[TN_NI * TN_LF_MAX_F], red[TN_LF_WARPS * TN_NI * 32], gms[TN_NI * 32];
    __shared__ __align__(16) float edges[8 * TN_EDGE_CHUNK + 8], slots[(TN_LF_MAX_F / 32) * TN_EDGE_CHUNK];
    const int i = blockIdx.x, F = N.F, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, f = (int)blockIdx.y * 32 + lane;
    const int kn = F / TN_LF_WARPS, kb = warp * kn;
    const size_t F10 = (size_t)TN_NI * F;
    cluster_arrive_relaxed(); /* started: the others may store into block 0's slots after their first wait */
    Arena<float> A = {edges};
    EdgeChunk<float> E;
    E.take(A);
    const int ns = 1 + b.nbr_n[i], ne = ns > 1 ? edge_chunk(N, b, i, 1, ns, E) : 0; /* before the wait; not the self loop */
    float w2[3][TN_LF_KT];
    const ChanW<float> W2 = {{Ly.llt[3].w, Ly.llt[4].w, Ly.llt[5].w}}; /* backward: Wᵀ g, the weights as they are (o × k) */
    lf_weights(W2, F, kb, kn, f, w2);
    pdl_start();
    const float* g = b.S3 + (size_t)i * F10;
    for (int q = threadIdx.x; q < (int)F10; q += blockDim.x) x1[q] = g[q];
    __syncthreads();
    lf_linear(x1, F, kb, kn, w2, red, [&](int c, int o, float v) { gms[c * 32 + o] = v; });
    __syncthreads();
    if (warp == 0) {
        float gt[TN_NI];
#pragma unroll
        for (int c = 0; c < TN_NI; c++) gt[c] = gms[c * 32 + lane];
        product_back(
            N, b, l, i, b.cq[i], f, gt,
            [&](const float(&gm)[TN_NI]) {
                st(b.gM + (size_t)i * F10, F, f, gm);
#pragma unroll
                for (int c = 0; c < TN_NI; c++) gms[c * 32 + lane] = gm[c]; /* each lane rewrites only its own channel */
            },
            [&](const float(&gy)[TN_NI]) { st(b.gY + (size_t)i * F10, F, f, gy); });
    }
    __syncthreads();
    cluster_wait(); /* every block of the atom has started */
    const float* Y = b.Yirr + (size_t)l * b.n * F10;
    for (int e = warp; e < ne; e += TN_LF_WARPS) {
        const float* Yj = Y + (size_t)E.j[e] * F10;
        const RadialPoint rp = E.point(N, e);
        float g3[3] = {0, 0, 0};
#pragma unroll
        for (int c = 0; c < TN_NI; c++) g3[part_of(c)] += gms[c * 32 + lane] * Yj[c * F + f];
        float part = 0;
#pragma unroll
        for (int q = 0; q < 3; q++) part += g3[q] * radial_deriv(Ly.table, 3 * F, rp, q * F + f);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
        if (lane == 0) cluster_store(slots + blockIdx.y * TN_EDGE_CHUNK + e, 0, part);
    }
    cluster_arrive_release(); /* the parts visible to block 0 after its wait */
    if (blockIdx.y != 0) return;
    cluster_wait();
    const size_t e0 = (size_t)i * (b.cap + 1);
    for (int e = threadIdx.x; e < ne; e += blockDim.x) {
        float v = 0;
        for (int c = 0; c < (int)gridDim.y; c++) v += slots[c * TN_EDGE_CHUNK + e];
        b.gd[e0 + E.slot[e]] += v;
    }
}

/*
 * float32 with tables and clusters, up to TN_LAYER_FUSE_ATOMS atoms: k_tn_b2 (dE/dY of atom j: its
 * direct part and the messages' backward gathered over its edges) and the first channel linear's
 * backward with bx_step as one launch, one link fewer in the chain: atom j's F / 32 blocks one
 * cluster, block c's channels gathered as in k_tn_layer_f (gY first, then the warps' sums in warp
 * order), pushed into every block's copy of the row, one cluster barrier, its 32 channels of W1ᵀ g,
 * then bx_step per channel.
 */
__global__ void __launch_bounds__(32 * TN_LF_WARPS) k_tn_back_g(const TnNet<float> N, const TnLayer<float> Ly, const TnBuf<float> b, int l) {
    __shared__ __align__(16) float x1[TN_NI * TN_LF_MAX_F], red[TN_LF_WARPS * TN_NI * 32];
    __shared__ __align__(16) float edges[8 * TN_EDGE_CHUNK + 8];
    const int j = blockIdx.x, F = N.F, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, f = (int)blockIdx.y * 32 + lane;
    const int kn = F / TN_LF_WARPS, kb = warp * kn;
    const size_t F10 = (size_t)TN_NI * F;
    cluster_arrive_relaxed(); /* started: the others may store into this block's row after their first wait */
    Arena<float> A = {edges};
    EdgeChunk<float> E;
    E.take(A);
    const int ns = 1 + b.nbr_n[j], ne0 = edge_chunk(N, b, j, 0, min(ns, TN_EDGE_CHUNK), E); /* before the wait */
    float w1[3][TN_LF_KT];
    const ChanW<float> W1 = {{Ly.llt[0].w, Ly.llt[1].w, Ly.llt[2].w}}; /* backward: Wᵀ g */
    lf_weights(W1, F, kb, kn, f, w1);
    pdl_start();
    float m[TN_NI];
    lf_messages(N, b, Ly.table, b.gM, j, ns, ne0, E, f, m); /* the filter of edge (j, i) equals that of (i, j) */
#pragma unroll
    for (int c = 0; c < TN_NI; c++) red[(warp * TN_NI + c) * 32 + lane] = m[c];
    __syncthreads();
    cluster_wait(); /* every block of the atom has started */
    if (warp == 0) {
        float g[TN_NI];
        ld(b.gY + (size_t)j * F10, F, f, g);
#pragma unroll
        for (int c = 0; c < TN_NI; c++)
#pragma unroll
            for (int v = 0; v < TN_LF_WARPS; v++) g[c] += red[(v * TN_NI + c) * 32 + lane];
        lf_push(x1, F, f, g);
    }
    cluster_arrive_release();
    cluster_wait(); /* x1 complete in every block (and red read) */
    __shared__ float gl[TN_NI * 32]; /* W1ᵀ g of the block's channels */
    lf_linear(x1, F, kb, kn, w1, red, [&](int c, int o, float v) { gl[c * 32 + o] = v; });
    __syncthreads();
    if (warp == 0) {
        float g[TN_NI];
#pragma unroll
        for (int c = 0; c < TN_NI; c++) g[c] = gl[c * 32 + lane];
        bx_step(N, b, l, j, f, g);
    }
}

/* Forces, without atomics: per atom (one warp), the force of each of its edges (i, j) on i, −dE/dr_i
   from the edge's dE/dd and dE/du, in the plan's units and × the member's weight (edge_force), and,
   with the sign turned, that of each partner edge (j, i) (the lists are symmetric and in index
   order, so the partner slot is found by bisection); lane k takes neighbours k, k + 32, ..., then
   the lanes' sums are added in a fixed tree order, in double, and added to the member sum in member
   order. The last member rounds each atom's sum once to the caller's format (out: fixed-point at
   force_index with the stride, or double xyz); the others leave it in force. */
template <typename real> struct EdgeAt { /* an edge and its geometry, for edge_force */
    size_t e;
    double d;
    real u[3];
};
template <typename real> __device__ __forceinline__ EdgeAt<real> edge_at(const TnBuf<real>& b, int i, int s) {
    EdgeAt<real> g;
    g.e = (size_t)i * (b.cap + 1) + s;
    edge_geometry(b, i, s, &g.d, g.u);
    return g;
}
template <typename real>
__device__ __forceinline__ void edge_force_of(const EdgeAt<real>& g, double gd, const double (&gu)[3], double factor, double (&f)[3]) {
    const double gu_u = gu[0] * g.u[0] + gu[1] * g.u[1] + gu[2] * g.u[2];
    for (int c = 0; c < 3; c++) f[c] = factor * (gd * g.u[c] + (gu[c] - gu_u * g.u[c]) / g.d);
}
template <typename real> __device__ __forceinline__ void edge_force(const TnBuf<real>& b, const EdgeAt<real>& g, double factor, double (&f)[3]) {
    const double gu[3] = {b.gu[g.e * 3], b.gu[g.e * 3 + 1], b.gu[g.e * 3 + 2]};
    edge_force_of(g, (double)b.gd[g.e], gu, factor, f);
}
/* The slot (1 + its index) of i in j's neighbour list (symmetric, in index order: bisection), or 0. */
template <typename real> __device__ __forceinline__ int partner_slot(const TnBuf<real>& b, int i, int j) {
    const int* list = b.nbr_j + (size_t)j * b.cap;
    int lo = 0, hi = b.nbr_n[j] - 1;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (list[mid] < i) lo = mid + 1;
        else hi = mid;
    }
    return hi >= 0 && list[lo] == i ? 1 + lo : 0;
}
struct TnForcesOut {
    void* out; /* NULL: not the last member */
    int fixed;
    const int* force_index;
    long long stride;
};
/* What the end of an evaluation needs (tn_sums, tn_flags). */
struct TnFinish {
    const double* atom_e;
    const int *order, *batch_start;
    int n_batches, energy_is_double;
    double mean, unit;
    double* batch_e;
    void* energy;
    int *flags, *host_flags;
};
/* The end of an evaluation, by one whole block, in two parts. tn_sums: the per-batch energies in
   atom order (into batch_e) and their total (returned to thread 0); it reads only the atom energies,
   complete after the last member's head, and the batch layout. tn_flags, after every kernel of the
   evaluation that may raise a flag: the total into the caller's energy, the error flags (only raised
   ones reach the host). */
__device__ double tn_sums(const TnFinish& e) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    for (int bt = warp; bt < e.n_batches; bt += warps) {
        const int q0 = e.batch_start[bt], q1 = e.batch_start[bt + 1];
        double s = 0;
        for (int q = q0 + lane; q < q1; q += 32) s += e.atom_e[e.order[q]];
        for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
        if (lane == 0) e.batch_e[bt] = (q1 > q0 ? s + e.mean : 0.0) * e.unit;
    }
    __syncthreads(); /* batch_e complete */
    double total = 0;
    if (threadIdx.x == 0)
        for (int bt = 0; bt < e.n_batches; bt++) total += e.batch_e[bt];
    return total;
}
__device__ void tn_flags(const TnFinish& e, double total) {
    if (threadIdx.x != 0) return;
    const bool finite = isfinite(total);
    if (!finite) e.flags[TN_FLAG_ENERGY] = 1;
    if (e.energy != NULL && finite) {
        if (e.energy_is_double) *(double*)e.energy += total;
        else *(float*)e.energy += (float)total;
    }
    for (int k = 0; k < TN_FLAGS; k++)
        if (e.flags[k] != (k == TN_FLAG_NONFINITE ? 0x7fffffff : 0)) {
            e.host_flags[k] = e.flags[k];
            e.flags[k] = k == TN_FLAG_NONFINITE ? 0x7fffffff : 0;
        }
}
/* Per atom (a warp): its edges' forces and its partners' edges' forces on it, in double; with fin
   (the last member), block 0 then ends the evaluation (tn_flags), a launch fewer. What does not
   depend on the previous kernel comes before the wait: the geometry of each lane's first edge and of
   its partner edge and the partner's slot (the neighbour lists), and block 0's tn_sums (the atom
   energies, complete since the head). */
template <typename real>
__global__ void k_tn_gather(const TnBuf<real> b, double factor, double* __restrict__ force, const TnForcesOut fo, const TnFinish fin,
                            int with_finish) {
    const int i = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    const int ns = i < b.n ? b.nbr_n[i] : 0;
    EdgeAt<real> g0 = {}, g1 = {}; /* neighbour k of i, and its partner edge (when p1) */
    int p1 = 0;
    auto find = [&](int k) {
        g0 = edge_at(b, i, 1 + k);
        const int j = b.nbr_j[(size_t)i * b.cap + k];
        p1 = partner_slot(b, i, j);
        if (p1) g1 = edge_at(b, j, p1);
    };
    if (lane < ns) find(lane);
    const double total = with_finish && blockIdx.x == 0 ? tn_sums(fin) : 0.0;
    pdl_start();
    if (i < b.n) { /* whole warps */
        double f[3] = {0, 0, 0}, fe[3], prev[3] = {0, 0, 0};
        if (lane == 0)
            for (int c = 0; c < 3; c++) prev[c] = force[3 * (size_t)i + c];
        for (int k = lane; k < ns; k += 32) {
            if (k > lane) find(k);
            edge_force(b, g0, factor, fe);
            for (int c = 0; c < 3; c++) f[c] += fe[c];
            if (p1) {
                edge_force(b, g1, factor, fe);
                for (int c = 0; c < 3; c++) f[c] -= fe[c];
            }
        }
        for (int o = 16; o > 0; o >>= 1)
            for (int c = 0; c < 3; c++) f[c] += __shfl_down_sync(0xffffffffu, f[c], o);
        if (lane == 0) {
            for (int c = 0; c < 3; c++) f[c] += prev[c];
            if (fo.out == NULL)
                for (int c = 0; c < 3; c++) force[3 * (size_t)i + c] = f[c];
            else if (!fo.fixed)
                for (int c = 0; c < 3; c++) ((double*)fo.out)[3 * (size_t)i + c] = f[c];
            else
                for (int c = 0; c < 3; c++) add_fixed((unsigned long long*)fo.out + (size_t)fo.force_index[i] + c * fo.stride, f[c]);
        }
    }
    if (with_finish && blockIdx.x == 0) tn_flags(fin, total);
}

/* The end of an evaluation without forces (or atoms): tn_sums and tn_flags. */
__global__ void __launch_bounds__(256) k_tn_finish(const TnFinish fin) {
    pdl_start();
    tn_flags(fin, tn_sums(fin));
}

/* Embedding backward part 2, atom i (block), after the channel linear elt's backward (dE/dT's parts
   in S2): dE/dXe, then dE/dd and dE/du of i's edges. SCATTER (float32 with the tables, forces to
   OpenMM's fixed-point buffer: fo.out): instead of storing them for k_tn_gather, each edge (i, j)'s
   force (edge_force, × factor) is added to i's and, with the sign turned, to j's fixed-point sums,
   whose integer additions give the same bits in any order; with_finish (the last member) block 0
   ends the evaluation (tn_sums before its wait, tn_flags after it: the kernels that raise flags have
   ended), a launch fewer than with k_tn_gather. */
template <typename real, bool SCATTER>
__global__ void __launch_bounds__(TN_THREADS) k_tn_eb2(const TnNet<real> N, const TnBuf<real> b, const TnForcesOut fo, double factor,
                                                       const TnFinish fin, int with_finish) {
    extern __shared__ __align__(16) unsigned char tn_smem[];
    Arena<real> A = {(real*)tn_smem};
    const int i = blockIdx.x, F = N.F, R = N.R, grp = blockIdx.y, groups = gridDim.y;
    real* red = A.take(2 * TN_THREADS / 32);
    real *gXe = A.take(9 * F), *rb = A.take(R), *drb = A.take(R), *grb = A.take(R), *pk = A.take(3 * F), *gp = A.take(3 * F),
         *ered = A.take(4 * TN_EDGE_CHUNK * (TN_THREADS / 32));
    EdgeChunk<real> E;
    E.take(A);
    const int ns = 1 + b.nbr_n[i], ne0 = N.emb_table && ns > 1 ? edge_chunk(N, b, i, 1, min(ns, 1 + TN_EDGE_CHUNK), E) : 0; /* before the wait */
    const bool finish = SCATTER && with_finish && blockIdx.x == 0 && blockIdx.y == 0;
    const double total = finish ? tn_sums(fin) : 0.0; /* the atom energies are complete since the head */
    pdl_start();
    if (finish) tn_flags(fin, total); /* every kernel that raises a flag has ended */
    const real* zpi = N.zp + (size_t)b.z[i] * F;
    /* the LayerNorm of |Xe|² backward: from dE/dln (in ln) to dE/d|Xe|² (gtn) */
    const real *gln = b.ln + (size_t)i * F, *xhat = b.xhat + (size_t)i * F;
    real p[2] = {0, 0};
    for (int f = threadIdx.x; f < F; f += TN_THREADS) {
        const real g = gln[f] * N.init_w[f];
        p[0] += g, p[1] += g * xhat[f];
    }
    block_sums(p, red);
    const real m1 = p[0] / real(F), m2 = p[1] / real(F), rstd = b.rstd[i];
    for (int f = threadIdx.x; f < F; f += TN_THREADS) {
        real g[TN_NI], gm[9], Xe[9];
        ld(b.S2 + (size_t)i * TN_NI * F, F, f, g);
        decompose_adj(g, gm);
        ld(b.Xe + (size_t)i * 9 * F, F, f, Xe);
        const real gtn = rstd * (gln[f] * N.init_w[f] - m1 - xhat[f] * m2);
        for (int c = 0; c < 9; c++) gXe[c * F + f] = gm[c] + real(2) * Xe[c] * gtn;
    }
    const size_t e0 = (size_t)i * (b.cap + 1);
    if (N.emb_table) { /* the factors dp_q(rbf) · C and their derivatives from the table */
        for (int c0 = 1; c0 < ns; c0 += TN_EDGE_CHUNK) {
            const int ne = c0 == 1 ? ne0 : edge_chunk(N, b, i, c0, min(ns, c0 + TN_EDGE_CHUNK), E); /* also: ered has been read */
#pragma unroll tn_edge_unroll
            for (int e = grp; e < ne; e += groups) { /* as k_tn_b1: every gridDim.y-th edge */
                const real u[3] = {E.u[3 * e], E.u[3 * e + 1], E.u[3 * e + 2]};
                real sums[4] = {0, 0, 0, 0}; /* dE/dd, dE/du */
                {
                    const real uu = u[0] * u[0] + u[1] * u[1] + u[2] * u[2];
                    const RadialPoint rp = E.point(N, e);
                    for (int f = threadIdx.x; f < F; f += TN_THREADS) {
                        real G[9], ev[3], de[3];
                        ld(gXe, F, f, G); /* written by this thread above */
                        for (int q = 0; q < 3; q++) ev[q] = radial_value(N.emb_table, 3 * F, rp, q * F + f, &de[q]);
                        const real zij = zpi[f] + N.zq[(size_t)E.zj[e] * F + f];
                        const real w2 = ev[1] * zij, w3 = ev[2] * zij;
                        const real tr = G[0] + G[4] + G[8];
                        const real gv[3] = {G[7] - G[5], G[2] - G[6], G[3] - G[1]};
                        real Gu[3];
                        for (int r = 0; r < 3; r++)
                            Gu[r] = (G[r * 3 + 0] + G[0 * 3 + r]) * u[0] + (G[r * 3 + 1] + G[1 * 3 + r]) * u[1] +
                                    (G[r * 3 + 2] + G[2 * 3 + r]) * u[2];
                        const real uGu = real(0.5) * (Gu[0] * u[0] + Gu[1] * u[1] + Gu[2] * u[2]);
                        const real gw1 = tr, gw2 = gv[0] * u[0] + gv[1] * u[1] + gv[2] * u[2], gw3 = uGu - uu * tr / real(3);
                        for (int r = 0; r < 3; r++) sums[1 + r] += w2 * gv[r] + w3 * (Gu[r] - real(2) / real(3) * u[r] * tr);
                        sums[0] += zij * (gw1 * de[0] + gw2 * de[1] + gw3 * de[2]);
                    }
                }
                edge_part(ered, e, sums);
            }
            __syncthreads();
            for (int e = threadIdx.x; e < ne; e += TN_THREADS) {
                if (e % groups != grp) continue;
                const size_t s = e0 + E.slot[e];
                if (!SCATTER) {
                    b.gd[s] += edge_sum(ered, e, 4, 0);
                    for (int r = 0; r < 3; r++) b.gu[s * 3 + r] += edge_sum(ered, e, 4, 1 + r);
                    continue;
                }
                /* the same float sums as stored above, then k_tn_gather's edge_force */
                const real gd = b.gd[s] + edge_sum(ered, e, 4, 0);
                double gu[3], f[3];
                for (int r = 0; r < 3; r++) gu[r] = (double)(b.gu[s * 3 + r] + edge_sum(ered, e, 4, 1 + r));
                edge_force_of(edge_at(b, i, E.slot[e]), (double)gd, gu, factor, f);
                unsigned long long *fi = (unsigned long long*)fo.out + (size_t)fo.force_index[i],
                                   *fj = (unsigned long long*)fo.out + (size_t)fo.force_index[E.j[e]];
                for (int c = 0; c < 3; c++) {
                    add_fixed(fi + c * fo.stride, f[c]);
                    add_fixed(fj + c * fo.stride, -f[c]);
                }
            }
        }
        return;
    }
    for (int s = 1; s < ns; s++) {
        double d;
        real u[3];
        const int j = edge_geometry(b, i, s, &d, u);
        if (!edge_on(N, d)) continue;
        const real uu = u[0] * u[0] + u[1] * u[1] + u[2] * u[2];
        real c, dc;
        cutoff_fn(N, d, &c, &dc);
        __syncthreads(); /* gXe written, the previous edge's rb, pk, gp read */
        rbf_sh(N, d, rb, drb);
        __syncthreads();
        for (int q = threadIdx.x; q < 3 * F; q += TN_THREADS) {
            const int p = q / F, f = q - p * F;
            const Lin<real>& L = N.dp[p];
            real s2 = L.b[f];
            for (int r = 0; r < R; r++) s2 += L.wt[(size_t)r * F + f] * rb[r];
            pk[q] = s2;
        }
        __syncthreads();
        real gu[3] = {0, 0, 0}, gcut = 0;
        for (int f = threadIdx.x; f < F; f += TN_THREADS) {
            real G[9];
            ld(gXe, F, f, G);
            const real zij = zpi[f] + N.zq[(size_t)b.z[j] * F + f], Cf = c * zij;
            const real w2 = pk[F + f] * Cf, w3 = pk[2 * F + f] * Cf;
            const real tr = G[0] + G[4] + G[8];
            const real gv[3] = {G[7] - G[5], G[2] - G[6], G[3] - G[1]};
            real Gu[3];
            for (int r = 0; r < 3; r++)
                Gu[r] = (G[r * 3 + 0] + G[0 * 3 + r]) * u[0] + (G[r * 3 + 1] + G[1 * 3 + r]) * u[1] + (G[r * 3 + 2] + G[2 * 3 + r]) * u[2];
            const real uGu = real(0.5) * (Gu[0] * u[0] + Gu[1] * u[1] + Gu[2] * u[2]);
            const real gw1 = tr, gw2 = gv[0] * u[0] + gv[1] * u[1] + gv[2] * u[2], gw3 = uGu - uu * tr / real(3);
            for (int r = 0; r < 3; r++) gu[r] += w2 * gv[r] + w3 * (Gu[r] - real(2) / real(3) * u[r] * tr);
            gp[f] = gw1 * Cf, gp[F + f] = gw2 * Cf, gp[2 * F + f] = gw3 * Cf;
            gcut += (gw1 * pk[f] + gw2 * pk[F + f] + gw3 * pk[2 * F + f]) * zij;
        }
        const real gcs = block_sum(gcut, red); /* also the barrier after gp */
        const real gu0 = block_sum(gu[0], red), gu1 = block_sum(gu[1], red), gu2 = block_sum(gu[2], red);
        for (int r = threadIdx.x; r < R; r += TN_THREADS) {
            real s2 = 0;
            for (int p = 0; p < 3; p++) {
                const Lin<real>& L = N.dp[p];
                for (int o = 0; o < F; o++) s2 += L.w[(size_t)o * R + r] * gp[p * F + o];
            }
            grb[r] = s2 * drb[r];
        }
        real part3 = 0;
        for (int r = threadIdx.x; r < R; r += TN_THREADS) part3 += grb[r];
        const real gd = gcs * dc + block_sum(part3, red);
        if (threadIdx.x == 0) {
            b.gd[e0 + s] += gd;
            b.gu[(e0 + s) * 3 + 0] += gu0, b.gu[(e0 + s) * 3 + 1] += gu1, b.gu[(e0 + s) * 3 + 2] += gu2;
        }
    }
}

/* ------------------------------------------------------------------ host side */

typedef struct tn_cuda_state {
    nnp_cuda_base base;
    int precision, n, n_batches, cap, first, last;
    size_t smem; /* dynamic shared memory of the per-atom kernels */
    int edge_groups; /* blocks per atom of the per-edge kernels with tables (few atoms; tn_build) */
    int clusters;    /* the GPU launches thread-block clusters (group_sum through shared memory) */
    int head;        /* the head as one launch (k_tn_head; few atoms, its weights in shared memory) */
    int linear;      /* the output linear in k_tn_out_a, k_tn_out_b (few atoms, its weights in shared memory) */
    int layer_fuse;  /* float32, few atoms: each layer's forward after its first linear as one launch (k_tn_layer_f), and k_tn_x0_f, k_tn_back_f, k_tn_back_g */
    void* split;     /* edge_groups > 1: the groups' partial sums (TnBuf::split), and per atom a count */
    int* split_count;
    void* weights;                              /* every member's weights in the evaluation's precision */
    float* tables;                              /* float32: every member's radial tables (RadialTable) */
    void* ztab;                                 /* every member's zp, zq (k_tn_z) */
    void* nets;                                 /* host: TnNet<real> per member */
    void* layers;                               /* host: TnLayer<real> per member and layer */
    double* atomref;                            /* device, double: every member's means, betas and atomref */
    int *z, *batch, *order, *batch_start, *particle, *atom_of, *force_index, *nbr_n, *nbr_j, *flags;
    int* grid;       /* the cell grids' device data (TnGrid, tn_grid), or NULL where no batch has TN_NBR_CELL_ATOMS atoms */
    int n_grid;      /* ... the batches with a grid */
    int n_grid_open; /* ... of them, those of at least TN_NBR_CELL_ATOMS_OPEN atoms (a grid without a box too) */
    size_t grid_cells; /* ... their cells' entries (TnGrid::start: tn_grid_entries) */
    void *pos, *nbr_r, *cq, *work;              /* work: the per-atom and per-edge buffers */
    size_t work_bytes, edge_bytes;              /* edge_bytes: the part (gd, gu) at its end */
    void* gd;                                   /* start of gd, gu in work */
    double *atom_e, mean_sum;
    double* force;                              /* per atom (3): the members' force sum in double */
    int* host_flags;                            /* mapped pinned memory */
    int* host_flags_dev;
    CUcontext context;
} tn_cuda_state;

/* The cell grids in s->grid: the ints batches (n_grid), off (n_batches), dims (4 n_batches), start
   (grid_cells), cell_of, slot, atoms (n each), then pos (n, 16-byte aligned); all NULL without
   grids. A batch of m atoms has at most 2 m + 27 cells and TN_GRID_CELLS, and one entry more. */
static size_t tn_grid_entries(int m) { return (size_t)(2 * (size_t)m + 27 < TN_GRID_CELLS ? 2 * (size_t)m + 27 : TN_GRID_CELLS) + 1; }
static size_t tn_grid_ints(const tn_cuda_state* s) {
    return ((size_t)s->n_grid + 5 * (size_t)s->n_batches + s->grid_cells + 3 * (size_t)s->n + 3) / 4 * 4;
}
static TnGrid tn_grid(const tn_cuda_state* s) {
    TnGrid g = {};
    if (s->grid == NULL) return g;
    int* p = s->grid;
    g.batches = p, p += s->n_grid;
    g.off = p, p += s->n_batches;
    g.dims = p, p += 4 * (size_t)s->n_batches;
    g.start = p, p += s->grid_cells;
    g.cell_of = p, p += s->n;
    g.slot = p, p += s->n;
    g.atoms = p;
    g.pos = (nnp_double4*)(s->grid + tn_grid_ints(s));
    return g;
}

/* x as TF32 high + low parts, as k_tn_chan_tc's tf32_hi splits its inputs: cvt.rna.tf32.f32 (round
   to nearest, ties away from zero, the low 13 bits zero), then the remainder (exact in float) so. */
static float tf32_round(float x) {
    unsigned u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u; /* finite values */
    float r;
    memcpy(&r, &u, sizeof r);
    return r;
}
static void tf32_pair(float x, float* hi, float* lo) {
    *hi = tf32_round(x);
    *lo = tf32_round(x - *hi);
}

static void tn_state_free(tn_cuda_state* s) {
    if (s == NULL) return;
    CUcontext pushed = NULL;
    if (s->context != NULL && nnp_cuda_driver.loaded) nnp_cuda_driver.ctxPushCurrent(s->context), pushed = s->context;
#if TN_TIMELINE
    tn_timeline_print(s->n);
#endif
    void* dev[] = {s->weights, s->tables, s->ztab, s->atomref, s->z, s->batch, s->order, s->batch_start, s->particle, s->atom_of, s->force_index,
                   s->nbr_n, s->nbr_j, s->flags, s->pos, s->nbr_r, s->cq, s->work, s->atom_e, s->force, s->base.batch_energy,
                   s->split, s->split_count, s->grid};
    for (size_t k = 0; k < sizeof dev / sizeof dev[0]; k++)
        if (dev[k]) cudaFree(dev[k]);
    if (s->host_flags) cudaFreeHost(s->host_flags);
    if (pushed) {
        CUcontext popped;
        nnp_cuda_driver.ctxPopCurrent(&popped);
    }
    free(s->nets);
    free(s->layers);
    free(s);
}

#define TN_ALLOC(ptr, bytes)                                                                                  \
    do {                                                                                                      \
        if (cudaMalloc((void**)&(ptr), (bytes) > 0 ? (bytes) : 16) != cudaSuccess) {                          \
            cudaGetLastError();                                                                               \
            return nnp_fail(NNP_ERR_MEMORY, "out of GPU memory for TensorNet (%zu bytes)", (size_t)(bytes)); \
        }                                                                                                     \
    } while (0)
#define TN_UPLOAD(dst, src, bytes) CUDA_TRY(cudaMemcpy((dst), (src), (bytes), cudaMemcpyHostToDevice))

/* Every member's weights converted to real, with transposes; the device descriptors. */
template <typename real> static nnp_status tn_upload_weights(const tn_model* tm, tn_cuda_state* s) {
    /* A first pass counts, a second copies (the same walk). */
    real* host = NULL;
    size_t used = 0;
    TnNet<real>* nets = (TnNet<real>*)calloc((size_t)(s->last - s->first), sizeof(TnNet<real>));
    TnLayer<real>* layers = (TnLayer<real>*)calloc((size_t)(s->last - s->first) * TN_MAX_LAYERS, sizeof(TnLayer<real>));
    if (nets == NULL || layers == NULL) {
        free(nets), free(layers);
        return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    }
    s->nets = nets, s->layers = layers;
    real* base = NULL;
    for (int pass = 0; pass < 2; pass++) {
        used = 0;
        auto arr = [&](const double* v, size_t n) -> const real* {
            const size_t at = used;
            used += (n + 3) / 4 * 4; /* 16-byte aligned arrays (k_tn_head copies them with cp.async) */
            if (pass == 1 && v != NULL)
                for (size_t q = 0; q < n; q++) host[at + q] = (real)v[q];
            return base + at;
        };
        auto lin = [&](const tn_linear& L) -> Lin<real> {
            Lin<real> o;
            o.n_out = L.n_out, o.n_in = L.n_in;
            o.w = arr(L.w, (size_t)L.n_out * L.n_in);
            const size_t at = used;
            used += ((size_t)L.n_out * L.n_in + 3) / 4 * 4;
            if (pass == 1)
                for (int r = 0; r < L.n_out; r++)
                    for (int c = 0; c < L.n_in; c++) host[at + (size_t)c * L.n_out + r] = (real)L.w[(size_t)r * L.n_in + c];
            o.wt = base + at;
            o.b = L.b ? arr(L.b, (size_t)L.n_out) : NULL;
            o.w2 = o.wt2 = NULL;
            return o;
        };
        /* a channel linear: in float32 also w and wt as TF32 pairs, (high, low) adjacent */
        auto chan_lin = [&](const tn_linear& L) -> Lin<real> {
            Lin<real> o = lin(L);
            if (sizeof(real) != sizeof(float)) return o;
            const size_t nw = (size_t)L.n_out * L.n_in, at = used;
            used += 4 * nw;
            if (pass == 1)
                for (int r = 0; r < L.n_out; r++)
                    for (int c = 0; c < L.n_in; c++) {
                        float hi, lo;
                        tf32_pair((float)L.w[(size_t)r * L.n_in + c], &hi, &lo);
                        real* w2 = host + at + 2 * ((size_t)r * L.n_in + c);
                        real* wt2 = host + at + 2 * nw + 2 * ((size_t)c * L.n_out + r);
                        w2[0] = wt2[0] = (real)hi, w2[1] = wt2[1] = (real)lo;
                    }
            o.w2 = base + at, o.wt2 = base + at + 2 * nw;
            return o;
        };
        for (int k = s->first; k < s->last; k++) {
            const tn_member* m = &tm->members[k];
            TnNet<real>& N = nets[k - s->first];
            N.F = m->F, N.R = m->R, N.L = m->L, N.H = m->n_head, N.group = m->group, N.act = m->activation, N.rbf = m->rbf;
            N.cl = m->cl, N.cu = m->cu, N.alpha = m->alpha, N.stdv = (real)m->std;
            N.th = (m->cu - (m->cl > 0 ? m->cl : 0.0)) / (TN_TABLE_POINTS - 1); /* IEEE division, as the GPU's: the same step */
            N.emb = arr(m->emb, (size_t)m->max_z * m->F);
            N.init_w = arr(m->init_w, (size_t)m->F), N.init_b = arr(m->init_b, (size_t)m->F);
            N.out_w = arr(m->out_w, (size_t)3 * m->F), N.out_b = arr(m->out_b, (size_t)3 * m->F);
            N.emb2 = lin(m->emb2);
            for (int q = 0; q < 3; q++) N.dp[q] = lin(m->dp[q]), N.elt[q] = chan_lin(m->elt[q]);
            for (int q = 0; q < 2; q++) N.els[q] = lin(m->els[q]);
            N.linear = lin(m->linear);
            N.wide = 3 * m->F;
            for (int h = 0; h < m->n_head; h++) {
                N.head[h] = lin(m->head[h]);
                if (m->head[h].n_out > N.wide) N.wide = m->head[h].n_out;
                if (m->head[h].n_in > N.wide) N.wide = m->head[h].n_in;
            }
            for (int l = 0; l < m->L; l++) {
                TnLayer<real>& Ly = layers[(size_t)(k - s->first) * TN_MAX_LAYERS + l];
                for (int q = 0; q < 3; q++) Ly.lls[q] = lin(m->lls[l][q]);
                for (int q = 0; q < 6; q++) Ly.llt[q] = chan_lin(m->llt[l][q]);
            }
            N.atomref = NULL; /* set below */
        }
        if (pass == 0) {
            host = (real*)calloc(used + 1, sizeof(real));
            if (host == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory for TensorNet's weights");
            if (cudaMalloc(&s->weights, (used + 1) * sizeof(real)) != cudaSuccess) {
                cudaGetLastError();
                free(host);
                return nnp_fail(NNP_ERR_MEMORY, "out of GPU memory for TensorNet's weights");
            }
            base = (real*)s->weights;
        }
    }
    nnp_status st = NNP_OK;
    if (cudaMemcpy(s->weights, host, used * sizeof(real), cudaMemcpyHostToDevice) != cudaSuccess)
        st = nnp_fail(NNP_ERR_CUDA, "uploading TensorNet's weights: %s", cudaGetErrorString(cudaGetLastError()));
    free(host);
    if (st != NNP_OK) return st;
    /* in double, per member: the radial basis' means and betas, the atomref */
    size_t n_dbl = 0;
    for (int k = s->first; k < s->last; k++)
        n_dbl += 2 * (size_t)tm->members[k].R + (tm->members[k].has_atomref ? (size_t)tm->members[k].max_z : 0);
    TN_ALLOC(s->atomref, n_dbl * sizeof(double));
    size_t at = 0;
    for (int k = s->first; k < s->last; k++) {
        const tn_member* m = &tm->members[k];
        TnNet<real>& N = nets[k - s->first];
        TN_UPLOAD(s->atomref + at, m->means, (size_t)m->R * sizeof(double));
        N.means = s->atomref + at, at += (size_t)m->R;
        TN_UPLOAD(s->atomref + at, m->betas, (size_t)m->R * sizeof(double));
        N.betas = s->atomref + at, at += (size_t)m->R;
        if (!m->has_atomref) continue;
        TN_UPLOAD(s->atomref + at, m->atomref, (size_t)m->max_z * sizeof(double));
        N.atomref = s->atomref + at, at += (size_t)m->max_z;
    }
    return NNP_OK;
}

/* float32: the radial tables of every member, computed in double on the GPU from a double copy of
   the weights (freed after). */
static nnp_status tn_build_tables(const tn_model* tm, tn_cuda_state* s) {
    tn_cuda_state* t = (tn_cuda_state*)calloc(1, sizeof *t);
    if (t == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    t->first = s->first, t->last = s->last, t->context = NULL;
    nnp_status st = tn_upload_weights<double>(tm, t);
    size_t total = 0;
    for (int k = s->first; k < s->last; k++)
        total += (size_t)(tm->members[k].L + 1) * TN_TABLE_POINTS * 9 * (size_t)tm->members[k].F;
    if (st == NNP_OK && cudaMalloc((void**)&s->tables, total * sizeof(float)) != cudaSuccess) {
        cudaGetLastError();
        st = nnp_fail(NNP_ERR_MEMORY, "out of GPU memory for TensorNet's radial tables (%zu bytes)", total * sizeof(float));
    }
    const TnNet<double>* dn = (const TnNet<double>*)t->nets;
    const TnLayer<double>* dl = (const TnLayer<double>*)t->layers;
    TnNet<float>* nets = (TnNet<float>*)s->nets;
    TnLayer<float>* layers = (TnLayer<float>*)s->layers;
    float* next = s->tables;
    for (int k = 0; st == NNP_OK && k < s->last - s->first; k++) {
        const int F = dn[k].F;
        const size_t smem = (size_t)(3 * dn[k].R + 21 * F + 32) * sizeof(double);
        allow_dynamic_smem(k_tn_table_layer);
        allow_dynamic_smem(k_tn_table_embed);
        for (int l = 0; l < dn[k].L; l++) {
            k_tn_table_layer<<<TN_TABLE_POINTS, TN_THREADS, smem>>>(dn[k], dl[(size_t)k * TN_MAX_LAYERS + l], next);
            layers[(size_t)k * TN_MAX_LAYERS + l].table = next;
            next += (size_t)TN_TABLE_POINTS * 9 * F;
        }
        k_tn_table_embed<<<TN_TABLE_POINTS, TN_THREADS, smem>>>(dn[k], next);
        nets[k].emb_table = next;
        next += (size_t)TN_TABLE_POINTS * 9 * F;
    }
    if (st == NNP_OK) {
        cudaError_t e = cudaDeviceSynchronize();
        if (e == cudaSuccess) e = cudaGetLastError();
        if (e != cudaSuccess) st = nnp_fail(NNP_ERR_CUDA, "computing TensorNet's radial tables: %s", cudaGetErrorString(e));
    }
    tn_state_free(t);
    return st;
}

/* The largest dynamic shared memory any per-atom kernel takes (reals), for a member. */
static size_t tn_smem_reals(const tn_member* m) {
    const size_t F = (size_t)m->F, R = (size_t)m->R;
    /* each take() rounds up to 2: at most 1 more per array, counted as + 16 below */
    const size_t W = TN_THREADS / 32;
    const size_t embed = W + 10 * F + R;
    const size_t layer_b = 21 * F + R;
    const size_t b1 = W + 17 * F + 3 * R + TN_EDGE_CHUNK * W;
    const size_t b2 = 10 * F;
    const size_t eb2 = 2 * W + 15 * F + 3 * R + 4 * TN_EDGE_CHUNK * W;
    const size_t out = 2 * W + 3 * F;
    const size_t edges = 8 * TN_EDGE_CHUNK + 2 + 7; /* EdgeChunk: j, zj, slot, g, t, u (3), count (2); rounding */
    const size_t all[] = {embed + edges, layer_b + edges, b1 + edges, b2 + edges, eb2 + edges, out, F};
    size_t n = 0;
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        if (all[k] > n) n = all[k];
    n += 16;
    return n + 64;
}

template <typename real> static void tn_configure() {
    allow_dynamic_smem(k_tn_z<real>);
    allow_dynamic_smem(k_tn_embed<real>);
    allow_dynamic_smem(k_tn_layer_b<real, false>);
    allow_dynamic_smem(k_tn_layer_b<real, true>);
    allow_dynamic_smem(k_tn_out_a<real, false>);
    allow_dynamic_smem(k_tn_out_b<real, false>);
    allow_dynamic_smem(k_tn_out_a<real, true>);
    allow_dynamic_smem(k_tn_out_b<real, true>);
    allow_dynamic_smem(k_tn_b1<real, false>);
    allow_dynamic_smem(k_tn_b1<real, true>);
    if constexpr (sizeof(real) == sizeof(float)) {
        allow_dynamic_smem(k_tn_chan_rows_split<TN_EPI_SILU, 1, 1>);
        allow_dynamic_smem(k_tn_chan_rows_split<TN_EPI_SILU, 4, 2>);
        allow_dynamic_smem(k_tn_chan_rows_split<TN_EPI_DSILU, 1, 1>);
        allow_dynamic_smem(k_tn_chan_rows_split<TN_EPI_DSILU, 4, 2>);
    }
    allow_dynamic_smem(k_tn_b2<real, false>);
    allow_dynamic_smem(k_tn_b2<real, true>);
    allow_dynamic_smem(k_tn_eb2<real, false>);
    if constexpr (sizeof(real) == sizeof(float)) allow_dynamic_smem(k_tn_eb2<real, true>);
    allow_dynamic_smem(k_tn_head<real>);
}

/* Every member's zp, zq per element (k_tn_z), once per plan. */
template <typename real> static nnp_status tn_build_z(const tn_model* tm, tn_cuda_state* s) {
    size_t total = 0;
    for (int k = s->first; k < s->last; k++) total += 2 * (size_t)tm->members[k].max_z * tm->members[k].F;
    TN_ALLOC(s->ztab, total * sizeof(real));
    TnNet<real>* nets = (TnNet<real>*)s->nets;
    real* next = (real*)s->ztab;
    for (int k = 0; k < s->last - s->first; k++) {
        const size_t rows = (size_t)tm->members[s->first + k].max_z * nets[k].F;
        nets[k].zp = next, nets[k].zq = next + rows;
        k_tn_z<real><<<tm->members[s->first + k].max_z, TN_THREADS, s->smem>>>(nets[k], (real*)nets[k].zp, (real*)nets[k].zq);
        next += 2 * rows;
    }
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) return nnp_fail(NNP_ERR_CUDA, "computing TensorNet's embedding pairs: %s", cudaGetErrorString(e));
    return NNP_OK;
}

template <typename real> static nnp_status tn_build(nnp_plan* plan, tn_cuda_state* s, int n_particles) {
    typedef typename real4_of<real>::type real4;
    const tn_model* tm = (const tn_model*)plan->model->family_data;
    const int n = plan->n_atoms, nb = plan->n_batches;
    s->precision = plan->cuda_precision;
    s->n = n, s->n_batches = nb, s->base.n_particles = n_particles;
    s->first = plan->member < 0 ? 0 : plan->member;
    s->last = plan->member < 0 ? tm->n_members : plan->member + 1;
    for (int i = 0; i < n; i++)
        for (int k = s->first; k < s->last; k++)
            if (plan->atomic_numbers[i] >= tm->members[k].max_z)
                return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "atom %d: atomic number %d is beyond the TensorNet embedding (%d rows)", i,
                                plan->atomic_numbers[i], tm->members[k].max_z);
    int largest = 1;
    for (int b = 0; b < nb; b++)
        if (plan->batch_start[b + 1] - plan->batch_start[b] > largest) largest = plan->batch_start[b + 1] - plan->batch_start[b];
    s->cap = largest - 1 < 1 ? 1 : (largest - 1 < TN_CUDA_MAX_NEIGHBORS ? largest - 1 : TN_CUDA_MAX_NEIGHBORS);
    /* shared memory */
    size_t smem = 0;
    int F = 0, L = 0;
    for (int k = s->first; k < s->last; k++) {
        const size_t r = tn_smem_reals(&tm->members[k]);
        if (r > smem) smem = r;
        if (tm->members[k].F > F) F = tm->members[k].F;
        if (tm->members[k].L > L) L = tm->members[k].L;
    }
    s->smem = smem * sizeof(real);
    int dev = 0, optin = 0, sms = 0;
    CUDA_TRY(cudaGetDevice(&dev));
    CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    if (cudaDeviceGetAttribute(&s->clusters, cudaDevAttrClusterLaunch, dev) != cudaSuccess) s->clusters = 0;
    s->clusters = s->clusters && TN_CLUSTER_SUM;
    /* few atoms: the per-edge kernels' edges over several blocks per atom, so that the GPU has
       TN_BLOCKS_PER_SM blocks per SM (one molecule: 22 atoms would fill 22 of 132 SMs) */
    s->edge_groups = n > 0 ? (TN_BLOCKS_PER_SM * sms + n - 1) / n : 1;
    if (s->edge_groups > TN_EDGE_GROUPS) s->edge_groups = TN_EDGE_GROUPS;
    if (s->edge_groups < 1) s->edge_groups = 1;
    if (s->clusters && s->edge_groups > 1 && sizeof(real) == sizeof(float)) /* group_sum's slots (tables: float32 only) */
        s->smem += ((size_t)(s->edge_groups - 1) * TN_NI * F + 2) * sizeof(real);
    if (s->smem > (size_t)optin)
        return nnp_fail(NNP_ERR_UNSUPPORTED, "this TensorNet (F = %d) needs %zu bytes of shared memory per block in %s precision, "
                        "more than this GPU's %d: use a smaller model, single precision, or the CPU platform",
                        F, s->smem, s->precision == NNP_PRECISION_DOUBLE ? "double" : "single", optin);
    tn_configure<real>();
    nnp_status st = tn_upload_weights<real>(tm, s);
    if (st == NNP_OK && sizeof(real) == sizeof(float)) st = tn_build_tables(tm, s);
    if (st == NNP_OK) st = tn_build_z<real>(tm, s);
    if (st != NNP_OK) return st;
    s->head = n <= TN_HEAD_ATOMS;
    s->linear = n <= TN_LINEAR_ATOMS;
    for (int k = 0; k < s->last - s->first; k++) {
        if (head_reals(((const TnNet<real>*)s->nets)[k]) * sizeof(real) > (size_t)optin) s->head = 0;
        if (out_lin_bytes(((const TnNet<real>*)s->nets)[k]) > (size_t)optin) s->linear = 0;
    }
    s->layer_fuse = sizeof(real) == sizeof(float) && s->clusters && s->tables != NULL && n <= TN_LAYER_FUSE_ATOMS;
    for (int k = s->first; k < s->last; k++)
        if (tm->members[k].F % 32 != 0 || tm->members[k].F > TN_LF_MAX_F) s->layer_fuse = 0;
    /* atoms */
    const size_t N = (size_t)n, E = N * (size_t)(s->cap + 1), Fz = (size_t)F;
    TN_ALLOC(s->z, N * sizeof(int));
    TN_ALLOC(s->batch, N * sizeof(int));
    TN_ALLOC(s->order, N * sizeof(int));
    TN_ALLOC(s->batch_start, (size_t)(nb + 1) * sizeof(int));
    TN_ALLOC(s->particle, N * sizeof(int));
    TN_ALLOC(s->force_index, N * sizeof(int));
    TN_ALLOC(s->atom_of, (size_t)(n_particles > 0 ? n_particles : 1) * sizeof(int));
    TN_ALLOC(s->nbr_n, N * sizeof(int));
    TN_ALLOC(s->nbr_j, N * (size_t)s->cap * sizeof(int));
    TN_ALLOC(s->flags, sizeof(TN_FLAG_CLEAR));
    TN_ALLOC(s->pos, N * sizeof(nnp_double4));
    TN_ALLOC(s->nbr_r, N * (size_t)s->cap * sizeof(nnp_double4));
    TN_ALLOC(s->cq, N * sizeof(real));
    TN_ALLOC(s->atom_e, N * sizeof(double));
    TN_ALLOC(s->force, 3 * N * sizeof(double));
    TN_ALLOC(s->base.batch_energy, (size_t)(nb > 0 ? nb : 1) * sizeof(double));
    /* per-atom and per-edge buffers: Xe 9F; X (L+1)·9F; Yirr, Mirr L·10F; B, dX L·9F; gX 9F; gM, gY
       10F; WT 10F, nrm 3F, h1 2F, h2 3F, xhat F, S1, S2, S3 10F, ln F, a1 2F, gn 3F, rstd 1; fac E·3F;
       gd E; gu 3E; the output's oxhat, oy 3F, oyl, oh F, orstd 1, the head's hpre, hact, gA, gB (head) */
    size_t head = 0;
    for (int k = s->first; k < s->last; k++) {
        const tn_member* m = &tm->members[k];
        size_t total = 0, wide = 3 * (size_t)m->F;
        for (int h = 0; h < m->n_head; h++) {
            total += (size_t)m->head[h].n_out;
            if ((size_t)m->head[h].n_out > wide) wide = (size_t)m->head[h].n_out;
            if ((size_t)m->head[h].n_in > wide) wide = (size_t)m->head[h].n_in;
        }
        if (2 * total + 2 * wide > head) head = 2 * total + 2 * wide;
    }
    const size_t atom_reals = N * (Fz * (9 + (size_t)(L + 1) * 9 + (size_t)L * 38 + 9 + 20 + 10 + 3 + 2 + 3 + 1 + 30 + 6 + 8) + 2 + head) +
                              (s->tables ? 0 : E * 3 * Fz); /* fac: the tables replace it */
    s->edge_bytes = 4 * E * sizeof(real);
    s->work_bytes = atom_reals * sizeof(real) + s->edge_bytes;
    TN_ALLOC(s->work, s->work_bytes);
    s->gd = (char*)s->work + atom_reals * sizeof(real);
    if (!s->tables) s->edge_groups = 1; /* the exact filter networks: one block per atom */
    if (s->edge_groups > 1) {
        TN_ALLOC(s->split, N * (size_t)s->edge_groups * TN_NI * Fz * sizeof(real));
        TN_ALLOC(s->split_count, N * sizeof(int));
        if (cudaMemset(s->split_count, 0, N * sizeof(int)) != cudaSuccess)
            return nnp_fail(NNP_ERR_CUDA, "clearing the edge groups' counts: %s", cudaGetErrorString(cudaGetLastError()));
    }
    if (cudaHostAlloc((void**)&s->host_flags, sizeof(TN_FLAG_CLEAR), cudaHostAllocMapped) != cudaSuccess ||
        cudaHostGetDevicePointer((void**)&s->host_flags_dev, s->host_flags, 0) != cudaSuccess) {
        cudaGetLastError();
        return nnp_fail(NNP_ERR_MEMORY, "out of pinned host memory");
    }
    memcpy(s->host_flags, TN_FLAG_CLEAR, sizeof(TN_FLAG_CLEAR));
    TN_UPLOAD(s->flags, TN_FLAG_CLEAR, sizeof(TN_FLAG_CLEAR));
    TN_UPLOAD(s->z, plan->atomic_numbers, N * sizeof(int));
    TN_UPLOAD(s->batch, plan->batches, N * sizeof(int));
    TN_UPLOAD(s->order, plan->order, N * sizeof(int));
    TN_UPLOAD(s->batch_start, plan->batch_start, (size_t)(nb + 1) * sizeof(int));
    /* the cell grids of the large batches (k_tn_grid) */
    static_assert(TN_NBR_CELL_ATOMS_OPEN >= TN_NBR_CELL_ATOMS, "the open batches with a grid are among the periodic ones");
    s->n_grid = 0, s->n_grid_open = 0, s->grid_cells = 0;
    for (int b = 0; b < nb; b++) {
        const int m = plan->batch_start[b + 1] - plan->batch_start[b];
        if (m >= TN_NBR_CELL_ATOMS) s->n_grid++, s->grid_cells += tn_grid_entries(m);
        if (m >= TN_NBR_CELL_ATOMS_OPEN) s->n_grid_open++;
    }
    if (s->n_grid > 0) {
        int* host = (int*)malloc(((size_t)s->n_grid + nb) * sizeof(int));
        if (host == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory");
        TN_ALLOC(s->grid, tn_grid_ints(s) * sizeof(int) + N * sizeof(nnp_double4));
        int g = 0;
        size_t off = 0;
        for (int b = 0; b < nb; b++) {
            const int m = plan->batch_start[b + 1] - plan->batch_start[b];
            host[s->n_grid + b] = m >= TN_NBR_CELL_ATOMS ? (int)off : -1;
            if (m >= TN_NBR_CELL_ATOMS) host[g++] = b, off += tn_grid_entries(m);
        }
        const cudaError_t e = cudaMemcpy(s->grid, host, ((size_t)s->n_grid + nb) * sizeof(int), cudaMemcpyHostToDevice);
        free(host);
        if (e != cudaSuccess) return nnp_fail(NNP_ERR_CUDA, "uploading the cell grids: %s", cudaGetErrorString(cudaGetLastError()));
    }
    const size_t P = (size_t)(n_particles > 0 ? n_particles : 1);
    int* particle = (int*)malloc(N * sizeof(int) + 1);
    int* atom_of = (int*)malloc(P * sizeof(int));
    real* cq = (real*)malloc(N * sizeof(real) + 1);
    if (particle == NULL || atom_of == NULL || cq == NULL) {
        free(particle), free(atom_of), free(cq);
        return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    }
    for (size_t p = 0; p < P; p++) atom_of[p] = -1;
    for (int i = 0; i < n; i++) {
        particle[i] = plan->particles ? plan->particles[i] : i;
        if (particle[i] >= 0 && particle[i] < n_particles) atom_of[particle[i]] = i;
        cq[i] = (real)(1 + 0.1 * plan->batch_charges[plan->batches[i]]);
    }
    cudaError_t e1 = cudaMemcpy(s->particle, particle, N * sizeof(int), cudaMemcpyHostToDevice);
    cudaError_t e2 = cudaMemcpy(s->cq, cq, N * sizeof(real), cudaMemcpyHostToDevice);
    cudaError_t e3 = cudaMemcpy(s->atom_of, atom_of, P * sizeof(int), cudaMemcpyHostToDevice);
    free(particle), free(atom_of), free(cq);
    if (e1 != cudaSuccess || e2 != cudaSuccess || e3 != cudaSuccess)
        return nnp_fail(NNP_ERR_CUDA, "uploading the atoms: %s", cudaGetErrorString(cudaGetLastError()));
    s->mean_sum = 0;
    for (int k = s->first; k < s->last; k++) s->mean_sum += tm->members[k].mean / (s->last - s->first);
    return NNP_OK;
}

template <typename real> static TnBuf<real> tn_buffers(const tn_cuda_state* s, const TnNet<real>& N) {
    TnBuf<real> b;
    const size_t n = (size_t)s->n, F = (size_t)N.F, E = n * (size_t)(s->cap + 1);
    b.n = s->n, b.cap = s->cap;
    b.z = s->z, b.nbr_n = s->nbr_n, b.nbr_j = s->nbr_j;
    b.nbr_r = (const nnp_double4*)s->nbr_r;
    b.cq = (const real*)s->cq;
    real* p = (real*)s->work;
    b.Xe = p, p += n * 9 * F;
    b.X = p, p += (size_t)(N.L + 1) * n * 9 * F;
    b.Yirr = p, p += (size_t)N.L * n * 10 * F;
    b.Mirr = p, p += (size_t)N.L * n * 10 * F;
    b.B = p, p += (size_t)N.L * n * 9 * F;
    b.dX = p, p += (size_t)N.L * n * 9 * F;
    b.gX = p, p += n * 9 * F;
    b.gM = p, p += n * 10 * F;
    b.gY = p, p += n * 10 * F;
    b.WT = p, p += n * 10 * F;
    b.nrm = p, p += n * 3 * F;
    b.h1 = p, p += n * 2 * F;
    b.h2 = p, p += n * 3 * F;
    b.xhat = p, p += n * F;
    b.S1 = p, p += n * 10 * F;
    b.S2 = p, p += n * 10 * F;
    b.S3 = p, p += n * 10 * F;
    b.ln = p, p += n * F;
    b.a1 = p, p += n * 2 * F;
    b.gn = p, p += n * 3 * F;
    b.rstd = p, p += n;
    b.oxhat = p, p += n * 3 * F;
    b.oy = p, p += n * 3 * F;
    b.oyl = p, p += n * F;
    b.oh = p, p += n * F;
    b.orstd = p, p += n;
    size_t head_total = 0;
    for (int k = 0; k < N.H; k++) head_total += (size_t)N.head[k].n_out;
    b.hpre = p, p += n * head_total;
    b.hact = p, p += n * head_total;
    b.gA = p, p += n * (size_t)N.wide;
    b.gB = p, p += n * (size_t)N.wide;
    b.fac = p;
    b.gd = (real*)s->gd;
    b.split = (real*)s->split, b.split_count = s->split_count;
    b.gu = b.gd + E;
    b.atom_e = s->atom_e;
    return b;
}


/* k_tn_rows with RW rows per warp and the epilogue epi (TN_EPI_*) over n rows */
template <typename real, int RW> static void launch_rows(bool pdl, int epi, const RowsIO<real>& io, int n, cudaStream_t stream) {
    const dim3 grid((n + 4 * RW - 1) / (4 * RW), (io.on + 31) / 32);
    if (epi == TN_EPI_SILU)
        launch_k(pdl, k_tn_rows<real, TN_EPI_SILU, TN_ROWS_K, RW>, grid, dim3(128), 0, stream, io, n);
    else if (epi == TN_EPI_DSILU)
        launch_k(pdl, k_tn_rows<real, TN_EPI_DSILU, TN_ROWS_K, RW>, grid, dim3(128), 0, stream, io, n);
    else
        launch_k(pdl, k_tn_rows<real, TN_EPI_NONE, TN_ROWS_K, RW>, grid, dim3(128), 0, stream, io, n);
}
/* k_tn_rows_split: the tiles of launch_rows, each a cluster of `parts` blocks over k, kpart of it each */
template <int RW> static void launch_rows_split(bool pdl, int epi, const RowsIO<float>& io, int n, int parts, int kpart, cudaStream_t stream) {
    const dim3 grid((unsigned)((n + 4 * RW - 1) / (4 * RW)), (unsigned)((io.on + 31) / 32), (unsigned)parts);
    if (epi == TN_EPI_SILU)
        launch_kc(pdl, (unsigned)parts, k_tn_rows_split<TN_EPI_SILU, TN_ROWS_K, RW>, grid, dim3(128), 0, stream, io, n, kpart);
    else if (epi == TN_EPI_DSILU)
        launch_kc(pdl, (unsigned)parts, k_tn_rows_split<TN_EPI_DSILU, TN_ROWS_K, RW>, grid, dim3(128), 0, stream, io, n, kpart);
    else
        launch_kc(pdl, (unsigned)parts, k_tn_rows_split<TN_EPI_NONE, TN_ROWS_K, RW>, grid, dim3(128), 0, stream, io, n, kpart);
}

template <typename real>
static nnp_status tn_launch(nnp_plan* plan, tn_cuda_state* s, const nnp_cuda_io* io, cudaStream_t stream, const Box<double>& box,
                            double to_model, double energy_unit, double force_factor) {
    const tn_model* tm = (const tn_model*)plan->model->family_data;
    const int n = s->n;
    const int forces = io->forces_format != NNP_FORCES_NONE;
    const bool pdl = TN_PDL; /* every kernel but the first a programmatic dependent launch (pdl_wait) */
    TnFinish fin;
    fin.atom_e = s->atom_e, fin.order = s->order, fin.batch_start = s->batch_start, fin.n_batches = s->n_batches;
    fin.energy_is_double = io->energy_is_double, fin.mean = s->mean_sum, fin.unit = energy_unit, fin.batch_e = s->base.batch_energy;
    fin.energy = io->energy, fin.flags = s->flags, fin.host_flags = s->host_flags_dev;
    if (n > 0) {
        const int slots = io->sorted_particles != NULL ? io->n_particles : n;
        launch_k(false, k_tn_positions, dim3((slots + 127) / 128), dim3(128), 0, stream, io->positions, (int)io->positions_format,
                 io->sorted_particles, s->atom_of, slots, s->particle, n, to_model, (nnp_double4*)s->pos, s->force_index, s->flags,
                 s->atom_e, forces ? s->force : (double*)NULL);
        const double rc = tm->cutoff;
        const bool gridded = s->n_grid > 0 && (box.periodic || s->n_grid_open > 0);
        const TnGrid grid = gridded ? tn_grid(s) : TnGrid{};
        if (gridded)
            launch_k(pdl, k_tn_grid, dim3(s->n_grid), dim3(TN_GRID_THREADS), 0, stream, (const nnp_double4*)s->pos, s->order,
                     s->batch_start, rc, box, grid);
        launch_k(pdl, k_tn_neighbors, dim3((n + TN_NBR_WARPS - 1) / TN_NBR_WARPS), dim3(32 * TN_NBR_WARPS), 0, stream,
                 (const nnp_double4*)s->pos, s->batch, s->order, s->batch_start, n, s->cap, rc * rc, box, grid, s->nbr_n, s->nbr_j,
                 (nnp_double4*)s->nbr_r, s->flags);
        const TnNet<real>* nets = (const TnNet<real>*)s->nets;
        const TnLayer<real>* layers = (const TnLayer<real>*)s->layers;
        const double scale = 1.0 / (s->last - s->first);
        for (int k = 0; k < s->last - s->first; k++) {
            const TnNet<real>& N = nets[k];
            const TnLayer<real>* Ly = layers + (size_t)k * TN_MAX_LAYERS;
            const TnBuf<real> b = tn_buffers<real>(s, N);
            const unsigned ew = (unsigned)(((size_t)n * N.F + TN_EW_THREADS - 1) / TN_EW_THREADS);
            auto chan_w = [&](const Lin<real>* W, bool backward) {
                ChanW<real> M;
                for (int q = 0; q < 3; q++) M.m[q] = sizeof(real) == sizeof(float) ? (backward ? W[q].w2 : W[q].wt2) : (backward ? W[q].w : W[q].wt);
                return M;
            };
            auto chan = [&](const Lin<real>* W, bool backward, const real* in, real* out) {
                const ChanW<real> M = chan_w(W, backward);
                if constexpr (sizeof(real) == sizeof(float)) {
                    if (n <= TN_CHAN_NARROW_ATOMS)
                        launch_k(pdl, k_tn_chan_tc<64, 1>, dim3((6 * n + 63) / 64, (N.F + 7) / 8, 3), dim3(128), 0, stream, M, N.F, in, out, n);
                    else if (n <= TN_CHAN_MEDIUM_ATOMS)
                        launch_k(pdl, k_tn_chan_tc<64, 2>, dim3((6 * n + 63) / 64, (N.F + 15) / 16, 3), dim3(128), 0, stream, M, N.F, in, out, n);
                    else
                        launch_k(pdl, n <= TN_CHAN_DEEP_ATOMS ? k_tn_chan_tc<64, 4> : k_tn_chan_tc<32, 4>,
                                 dim3((6 * n + 63) / 64, (N.F + 31) / 32, 3), dim3(128), 0, stream, M, N.F, in, out, n);
                } else if (n >= TN_GEMM_WIDE_ATOMS) /* float64 */
                    launch_k(pdl, k_tn_chan<real, 2>, dim3((n + 7) / 8, (N.F + 31) / 32), dim3(128), 0, stream, M, N.F, in, out, n);
                else
                    launch_k(pdl, k_tn_chan<real, 1>, dim3((n + 3) / 4, (N.F + 31) / 32), dim3(128), 0, stream, M, N.F, in, out, n);
            };
            /* z = L x (+ b) per atom (forward) or Lᵀ g (backward), then EPI (k_tn_rows) */
            auto rows_io = [&](const Lin<real>& Lw, bool backward, const real* in, real* out, real* out2, const real* aux) {
                RowsIO<real> io;
                io.M = backward ? Lw.w : Lw.wt;
                io.kn = backward ? Lw.n_out : Lw.n_in, io.on = backward ? Lw.n_in : Lw.n_out;
                io.bias = backward ? NULL : Lw.b;
                io.in = in, io.out = out, io.out2 = out2, io.aux = aux;
                io.ld_in = io.kn, io.ld_out = io.on, io.ld_aux = io.on;
                io.act = N.act;
                return io;
            };
            /* float32: whether a row GEMM over k inputs splits over k (k_tn_rows_split) */
            auto split_k = [&](int k) { return s->clusters && n <= TN_ROWS_SPLIT_ATOMS && k > TN_ROWS_SPLIT_K; };
            /* ... into `parts` parts of kpart (whole chunks of TN_ROWS_K) each */
            auto split_parts = [](int k, int& parts, int& kpart) {
                const int chunks = (k + TN_ROWS_K - 1) / TN_ROWS_K, parts0 = chunks < TN_ROWS_SPLIT_MAX ? chunks : TN_ROWS_SPLIT_MAX;
                kpart = (chunks + parts0 - 1) / parts0 * TN_ROWS_K;
                parts = (k + kpart - 1) / kpart;
            };
            auto rows = [&](const Lin<real>& Lw, bool backward, int epi, const real* in, real* out, real* out2, const real* aux) {
                const RowsIO<real> io = rows_io(Lw, backward, in, out, out2, aux);
                if constexpr (sizeof(real) == sizeof(float)) {
                    if (split_k(io.kn)) { /* split over k, a chunk or more per part */
                        int parts, kpart;
                        split_parts(io.kn, parts, kpart);
                        if (n <= TN_ROWS_NARROW_ATOMS)
                            launch_rows_split<1>(pdl, epi, io, n, parts, kpart, stream);
                        else
                            launch_rows_split<4>(pdl, epi, io, n, parts, kpart, stream);
                        return;
                    }
                }
                if (n <= TN_ROWS_NARROW_ATOMS)
                    launch_rows<real, 1>(pdl, epi, io, n, stream);
                else
                    launch_rows<real, 4>(pdl, epi, io, n, stream);
            };
            /* a channel linear and an independent row GEMM (TN_EPI_SILU forward or TN_EPI_DSILU
               backward): in float32 one launch (k_tn_chan_rows, or k_tn_chan_rows_split where the row GEMM
               splits over k), the tiles of chan and rows */
            auto chan_rows = [&](const Lin<real>* W, bool backward, const real* in, real* out, const Lin<real>& Lw, bool rbackward, int epi,
                                 const real* rin, real* rout, real* rout2, const real* aux) {
                if constexpr (sizeof(real) == sizeof(float)) {
                    if (split_k(rbackward ? Lw.n_out : Lw.n_in)) { /* the row GEMM split over k: k_tn_chan_rows_split */
                        const RowsIO<real> io = rows_io(Lw, rbackward, rin, rout, rout2, aux);
                        int parts, kpart;
                        split_parts(io.kn, parts, kpart);
                        const bool narrow = n <= TN_CHAN_NARROW_ATOMS; /* else medium: n <= TN_ROWS_SPLIT_ATOMS */
                        const int cgx = (6 * n + 63) / 64, cgy = narrow ? (N.F + 7) / 8 : (N.F + 15) / 16;
                        const int rgx = narrow ? (n + 3) / 4 : (n + 15) / 16, rgy = (io.on + 31) / 32;
                        const int cx = (cgx * cgy * 3 + rgy * parts - 1) / (rgy * parts);
                        const dim3 grid((unsigned)(cx + rgx), (unsigned)rgy, (unsigned)parts);
                        const size_t slots = (size_t)(parts - 1) * (narrow ? 1 : 4) * 128 * sizeof(float);
                        auto kern = epi == TN_EPI_SILU ? (narrow ? k_tn_chan_rows_split<TN_EPI_SILU, 1, 1> : k_tn_chan_rows_split<TN_EPI_SILU, 4, 2>)
                                                       : (narrow ? k_tn_chan_rows_split<TN_EPI_DSILU, 1, 1> : k_tn_chan_rows_split<TN_EPI_DSILU, 4, 2>);
                        launch_kc(pdl, (unsigned)parts, kern, grid, dim3(128), slots, stream, chan_w(W, backward), N.F, in, out, cgx, cgy, cx, io, n, kpart);
                        return;
                    }
                    const ChanW<real> M = chan_w(W, backward);
                    const RowsIO<real> io = rows_io(Lw, rbackward, rin, rout, rout2, aux);
                    const bool narrow = n <= TN_CHAN_NARROW_ATOMS;
                    const int cgx = (6 * n + 63) / 64, cgy = narrow ? (N.F + 7) / 8 : (N.F + 31) / 32;
                    const int rgx = narrow ? (n + 3) / 4 : (n + 15) / 16, rgy = (io.on + 31) / 32;
                    const dim3 grid((unsigned)(cgx * cgy * 3 + rgx * rgy));
                    const bool deep = n <= TN_CHAN_DEEP_ATOMS;
                    if (epi == TN_EPI_SILU)
                        launch_k(pdl, narrow ? k_tn_chan_rows<TN_EPI_SILU, 1, 64, 1> : deep ? k_tn_chan_rows<TN_EPI_SILU, 4, 64, 4> : k_tn_chan_rows<TN_EPI_SILU, 4, 32, 4>,
                                 grid, dim3(128), 0, stream, M, N.F, in, out, cgx, cgy, io, n, rgx);
                    else
                        launch_k(pdl, narrow ? k_tn_chan_rows<TN_EPI_DSILU, 1, 64, 1> : deep ? k_tn_chan_rows<TN_EPI_DSILU, 4, 64, 4> : k_tn_chan_rows<TN_EPI_DSILU, 4, 32, 4>,
                                 grid, dim3(128), 0, stream, M, N.F, in, out, cgx, cgy, io, n, rgx);
                } else {
                    chan(W, backward, in, out);
                    rows(Lw, rbackward, epi, rin, rout, rout2, aux);
                }
            };
            /* a channel linear and the per-channel step after it (TN_CH_*) */
            auto chan_step = [&](const Lin<real>* W, bool backward, int epi, const real* in, real* out, int l) {
                if constexpr (sizeof(real) == sizeof(float)) {
                    if (n <= TN_CHAN_STEP_ATOMS) { /* one launch; out is not written */
                        const ChanW<real> M = chan_w(W, backward);
                        const dim3 grid((unsigned)((n + TN_ALL_ATOMS - 1) / TN_ALL_ATOMS), (unsigned)((N.F + 7) / 8));
                        launch_k(pdl, epi == TN_CH_UPDATE ? k_tn_chan_step<64, 1, TN_CH_UPDATE> : k_tn_chan_step<64, 1, TN_CH_BX>, grid, dim3(128), 0,
                                 stream, M, N, b, in, l);
                        return;
                    }
                }
                chan(W, backward, in, out);
                if (epi == TN_CH_UPDATE)
                    launch_k(pdl, k_tn_step<real, TN_CH_UPDATE>, dim3(ew), dim3(TN_EW_THREADS), 0, stream, N, b, l);
                else
                    launch_k(pdl, k_tn_step<real, TN_CH_BX>, dim3(ew), dim3(TN_EW_THREADS), 0, stream, N, b, l);
            };
            const unsigned eg = (unsigned)s->edge_groups;
            const bool early = n <= TN_EDGE_PRE_ATOMS; /* the edge kernels' factors of their first edges before the wait */
            /* the per-edge kernels with group sums: each atom's blocks one cluster (group_sum) */
            auto groups = [&](bool table) { return dim3(1, s->clusters && table ? eg : 1, 1); };
            launch_kc3(pdl, groups(N.emb_table != NULL), k_tn_embed<real>, dim3(n, N.emb_table ? eg : 1), dim3(TN_THREADS), s->smem, stream, N,
                       b);
            /* the norm MLP's first layer beside the channel linear elt, then its second, then x0_step */
            chan_rows(N.elt, false, b.S1, b.WT, N.els[0], false, TN_EPI_SILU, b.ln, b.h1, b.a1, NULL);
            rows(N.els[1], false, TN_EPI_SILU, b.a1, b.h2, b.nrm, NULL);
            bool x0_fused = false;
            if constexpr (sizeof(real) == sizeof(float)) {
                if (s->layer_fuse && N.L > 0) { /* x0_step and layer 0's Y in one launch */
                    const unsigned cg = (unsigned)(N.F / 32);
                    const ChanW<float> W0 = {{Ly[0].llt[0].wt, Ly[0].llt[1].wt, Ly[0].llt[2].wt}};
                    launch_kc3(pdl, dim3(1, cg, 1), k_tn_x0_f, dim3(n, cg), dim3(32 * TN_LF_WARPS), 0, stream, N, W0, b);
                    x0_fused = true;
                }
            }
            if (!x0_fused) launch_k(pdl, k_tn_step<real, TN_CH_X0>, dim3(ew), dim3(TN_EW_THREADS), 0, stream, N, b, 0);
            for (int l = 0; l < N.L; l++) {
                if constexpr (sizeof(real) == sizeof(float)) {
                    if (s->layer_fuse) { /* Y^l by the launch before (k_tn_x0_f for layer 0) */
                        const unsigned cg = (unsigned)(N.F / 32);
                        const bool mid = l + 1 < N.L;
                        const ChanW<float> Wn = {{Ly[mid ? l + 1 : l].llt[0].wt, Ly[mid ? l + 1 : l].llt[1].wt, Ly[mid ? l + 1 : l].llt[2].wt}};
                        launch_kc3(pdl, dim3(1, cg, 1), mid ? k_tn_layer_f<false> : k_tn_layer_f<true>, dim3(n, cg), dim3(32 * TN_LF_WARPS), 0,
                                   stream, N, Ly[l], Wn, b, l);
                        continue;
                    }
                }
                chan(Ly[l].llt, false, b.S3, b.Yirr + (size_t)l * n * TN_NI * N.F);
                launch_kc3(pdl, groups(Ly[l].table != NULL), early ? k_tn_layer_b<real, true> : k_tn_layer_b<real, false>,
                           dim3(n, Ly[l].table ? eg : 1), dim3(TN_THREADS), s->smem, stream, N, Ly[l], b, l);
                if (l + 1 < N.L)
                    chan_step(Ly[l].llt + 3, false, TN_CH_UPDATE, b.S1, b.S2, l);
                else
                    chan(Ly[l].llt + 3, false, b.S1, b.S2); /* its update_step: k_tn_out_a */
            }
            /* the output: LayerNorm, SiLU(linear), the head (SiLU between its layers), the energies */
            const size_t lin_smem = out_lin_bytes(N);
            if (s->linear) { /* the LayerNorm and the output linear */
                launch_k(pdl, k_tn_out_a<real, true>, dim3(n), dim3(TN_THREADS), lin_smem, stream, N, b);
            } else {
                launch_k(pdl, k_tn_out_a<real, false>, dim3(n), dim3(TN_THREADS), s->smem, stream, N, b);
                rows(N.linear, false, TN_EPI_SILU, b.oy, b.oyl, b.oh, NULL);
            }
            real *gz, *gfree; /* dE/d(the linear's pre-activation), and a free buffer of n × wide */
            if (s->head) { /* the head forward, the energies, the head backward */
                launch_k(pdl, k_tn_head<real>, dim3((unsigned)n), dim3(TN_HEAD_THREADS), head_reals(N) * sizeof(real), stream, N, b,
                         forces ? b.gA : (real*)NULL, scale);
                if (!forces) continue;
                gz = b.gA, gfree = b.gB;
            } else {
                size_t off[TN_MAX_HEAD];
                for (int h = 0, o = 0; h < N.H; o += N.head[h].n_out, h++) off[h] = (size_t)o * n;
                for (int h = 0; h + 1 < N.H; h++)
                    rows(N.head[h], false, TN_EPI_SILU, h == 0 ? b.oh : b.hact + off[h - 1], b.hpre + off[h], b.hact + off[h], NULL);
                /* the head's last layer and the energies; with forces, also its backward into gA */
                launch_k(pdl, k_tn_out_e<real>, dim3((unsigned)(((size_t)n * 32 + 127) / 128)), dim3(128), 0, stream, N, b,
                         N.H > 1 ? b.hact + off[N.H - 2] : b.oh, forces ? b.gA : (real*)NULL, N.H > 1 ? b.hpre + off[N.H - 2] : b.oyl,
                         scale);
                if (!forces) continue;
                /* the output backward: the rest of the head */
                gz = b.gA, gfree = b.gB;
                for (int h = N.H - 2; h >= 0; h--) {
                    rows(N.head[h], true, TN_EPI_DSILU, gz, gfree, NULL, h > 0 ? b.hpre + off[h - 1] : b.oyl);
                    real* t = gz;
                    gz = gfree, gfree = t;
                }
            }
            /* the linear backward and the LayerNorm's */
            if (s->linear) {
                launch_k(pdl, k_tn_out_b<real, true>, dim3(n), dim3(TN_THREADS), lin_smem, stream, N, b, (const real*)gz);
            } else {
                rows(N.linear, true, TN_EPI_NONE, gz, gfree, NULL, NULL);
                launch_k(pdl, k_tn_out_b<real, false>, dim3(n), dim3(TN_THREADS), s->smem, stream, N, b, (const real*)gfree);
            }
            for (int l = N.L - 1; l >= 0; l--) {
                if constexpr (sizeof(real) == sizeof(float)) {
                    if (s->layer_fuse) { /* the second linear's backward with k_tn_b1, then k_tn_b2 with the first linear's and bx_step */
                        const unsigned cg = (unsigned)(N.F / 32);
                        launch_kc3(pdl, dim3(1, cg, 1), k_tn_back_f, dim3(n, cg), dim3(32 * TN_LF_WARPS), 0, stream, N, Ly[l], b, l);
                        launch_kc3(pdl, dim3(1, cg, 1), k_tn_back_g, dim3(n, cg), dim3(32 * TN_LF_WARPS), 0, stream, N, Ly[l], b, l);
                        continue;
                    }
                }
                chan(Ly[l].llt + 3, true, b.S3, b.S2);
                launch_k(pdl, early ? k_tn_b1<real, true> : k_tn_b1<real, false>, dim3(n, Ly[l].table ? eg : 1), dim3(TN_THREADS), s->smem,
                         stream, N, Ly[l], b, l);
                launch_kc3(pdl, groups(Ly[l].table != NULL), early ? k_tn_b2<real, true> : k_tn_b2<real, false>, dim3(n, Ly[l].table ? eg : 1),
                           dim3(TN_THREADS), s->smem, stream, N, Ly[l], b, l);
                chan_step(Ly[l].llt, true, TN_CH_BX, b.S1, b.S2, l);
            }
            if (N.L == 0) launch_k(pdl, k_tn_step<real, TN_CH_EB1>, dim3(ew), dim3(TN_EW_THREADS), 0, stream, N, b, 0);
            /* the channel linear elt's backward (S3 to S2) beside the norm MLP's last layer backward (gn to a1),
               then its first layer backward (a1 to ln) */
            chan_rows(N.elt, true, b.S3, b.S2, N.els[1], true, TN_EPI_DSILU, b.gn, b.a1, NULL, b.h1); /* a1: dE/dh1 */
            rows(N.els[0], true, TN_EPI_NONE, b.a1, b.ln, NULL, NULL);                                /* ln: dE/dln */
            TnForcesOut fo = {NULL, io->forces_format == NNP_FORCES_FIXED_POINT, s->force_index, io->forces_stride};
            const int last = k == s->last - s->first - 1;
            const dim3 eb2_grid(n, N.emb_table ? eg : 1);
            if constexpr (sizeof(real) == sizeof(float)) {
                if (fo.fixed && s->tables != NULL) { /* each member's edge forces straight into the caller's sums */
                    fo.out = io->forces;
                    launch_k(pdl, k_tn_eb2<real, true>, eb2_grid, dim3(TN_THREADS), s->smem, stream, N, b, fo, scale * force_factor, fin, last);
                    continue;
                }
            }
            launch_k(pdl, k_tn_eb2<real, false>, eb2_grid, dim3(TN_THREADS), s->smem, stream, N, b, fo, 0.0, fin, 0);
            if (last) fo.out = io->forces; /* the last member: the sums to the caller, and the end */
            launch_k(pdl, k_tn_gather<real>, dim3((unsigned)(((size_t)n * 32 + 127) / 128)), dim3(128), 0, stream, b, scale * force_factor,
                     s->force, fo, fin, last);
        }
    }
    if (n == 0 || !forces) launch_k(pdl && n > 0, k_tn_finish, dim3(1), dim3(256), 0, stream, fin);
    CUDA_TRY(cudaGetLastError());
    return NNP_OK;
}

extern "C" void nnp_tn_cuda_free(nnp_plan* plan) {
    tn_state_free((tn_cuda_state*)plan->cuda);
    plan->cuda = NULL;
}

extern "C" nnp_status nnp_tn_cuda_check(nnp_plan* plan) {
    tn_cuda_state* s = (tn_cuda_state*)plan->cuda;
    int f[TN_FLAGS];
    volatile int* host = s->host_flags; /* the GPU may be writing it */
    for (int k = 0; k < TN_FLAGS; k++) f[k] = __atomic_exchange_n((int*)&host[k], TN_FLAG_CLEAR[k], __ATOMIC_ACQ_REL);
    if (f[TN_FLAG_NONFINITE] != 0x7fffffff)
        return nnp_fail(NNP_ERR_NONFINITE, "a coordinate of atom %d is not finite (NaN or infinite) in a recent CUDA evaluation",
                        f[TN_FLAG_NONFINITE]);
    if (f[TN_FLAG_CAPACITY] > 0)
        return nnp_fail(NNP_ERR_STATE, "an atom had %d neighbours within the cutoff, more than the CUDA evaluation's capacity "
                        "of %d per atom: its energy and forces were wrong; split very large batches", f[TN_FLAG_CAPACITY], s->cap);
    if (f[TN_FLAG_COINCIDENT] > 0) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "two atoms of one batch were at the same position");
    if (f[TN_FLAG_ENERGY] > 0) return nnp_fail(NNP_ERR_NONFINITE, "the model gave a non-finite energy in a recent CUDA evaluation");
    return NNP_OK;
}

extern "C" nnp_status nnp_tn_evaluate_cuda(nnp_plan* plan, const nnp_cuda_io* io, int capturing) {
    cudaStream_t stream = (cudaStream_t)io->stream;
    const nnp_model* m = plan->model;
    const tn_model* tm = (const tn_model*)m->family_data;
    double energy_unit, to_angstrom;
    nnp_plan_units(plan, &energy_unit, &to_angstrom);
    const double to_model = to_angstrom == m->length_to_angstrom ? 1.0 : to_angstrom / m->length_to_angstrom;
    tn_cuda_state* s = (tn_cuda_state*)plan->cuda;
    nnp_status st;
    if (s == NULL) {
        if (capturing) return nnp_fail(NNP_ERR_CAPTURE, "the TensorNet CUDA state is missing while capturing");
        s = (tn_cuda_state*)calloc(1, sizeof *s);
        if (s == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory");
        nnp_cuda_driver.ctxGetCurrent(&s->context);
        st = plan->cuda_precision == NNP_PRECISION_DOUBLE ? tn_build<double>(plan, s, io->n_particles)
                                                          : tn_build<float>(plan, s, io->n_particles);
        if (st != NNP_OK) {
            tn_state_free(s);
            return st;
        }
        plan->cuda = s;
    }
    if (io->box != NULL) {
        st = nnp_check_box(io->box, tm->cutoff * m->length_to_angstrom, to_angstrom);
        if (st != NNP_OK) return st;
    }
    /* forces: −dE/dx in the plan's units */
    const double force_factor = -energy_unit * to_model;
    /* positions, distances and the radial basis in double whatever the precision (see rbf_sh) */
    Box<double> box = {io->box != NULL, {0}};
    for (int k = 0; io->box && k < 9; k++) box.a[k] = io->box[k] * to_model;
    if (s->precision == NNP_PRECISION_DOUBLE) return tn_launch<double>(plan, s, io, stream, box, to_model, energy_unit, force_factor);
    return tn_launch<float>(plan, s, io, stream, box, to_model, energy_unit, force_factor);
}
