/*
 * CUDA evaluation of libnnp: the same maths as the CPU evaluation (cpu.c, the specification), in
 * float32 or float64, for all batches at once, on a stream the caller gives.
 *
 * One evaluation is a fixed sequence of kernels whose sizes all come from the plan (cached when
 * the atoms were set and the buffers made, at the last evaluation outside stream capture):
 *   positions     where each particle is in OpenMM's reordered buffers (when reordered)
 *   aev           one block per atom: its position (any layout) → Å, its neighbours within Rcr in
 *                 the same batch in index order (block-wide ballots), then its AEV
 *   layer 1       all members at once: [atoms of element e] × [members·width] GEMM
 *   layers 2..L-1 per (element, member) GEMM with bias and CELU
 *   output        per-atom energy (ensemble mean) and the first backward step (one molecule:
 *                 inside the last hidden layer's forward, see OutFuse)
 *   backward      GEMMs back to dE/dAEV (all members summed inside one GEMM)
 *   aev backward  forces, fixed-point atomic adds (order-independent, so deterministic)
 *   batch sums    one warp per batch, fixed order → per-batch energies; then the total, and the
 *                 error flags into mapped host memory (few atoms: the AEV backward's first block)
 * Inside stream capture nothing is allocated, copied from the host, synchronised or loaded.
 */
#include "../src/internal.h"

#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NNP_CUDA_MAX_CLASSES 8 /* classes of first-layer prefixes (see aev_layout) */
#define NNP_CUDA_MAX_NEIGHBORS 512 /* per atom, for batches larger than this plus one */
#define NNP_PI_F 3.14159265358979323846
#define NNP_CUDA_STAGES 7 /* positions, neighbours+AEV, forward, output, backward, forces, batch sums */
#define AEV_THREADS 256      /* AEV kernels' block size, */
#define AEV_MAX_THREADS 1024 /* and k_aev's for few atoms (more warps share each atom's pairs) */
#define BWD_THREADS 128
#define GEMM_TILE 64
#define GEMM_K 16

/* ------------------------------------------------------------------ helpers */

#define CUDA_TRY(call)                                                                                  \
    do {                                                                                                \
        cudaError_t err_ = (call);                                                                      \
        if (err_ != cudaSuccess)                                                                        \
            return nnp_fail(NNP_ERR_CUDA, "CUDA error in %s: %s (%s)", #call, cudaGetErrorString(err_),  \
                            cudaGetErrorName(err_));                                                    \
    } while (0)

/* A 4-double vector (CUDA 13 deprecates double4 for its unspecified alignment). */
struct __align__(16) nnp_double4 {
    double x, y, z, w;
};
template <typename real> struct real4_of;
template <> struct real4_of<float> { typedef float4 type; };
template <> struct real4_of<double> { typedef nnp_double4 type; };

__device__ __forceinline__ float dexp(float x) { return expf(x); }
__device__ __forceinline__ double dexp(double x) { return exp(x); }
__device__ __forceinline__ float dcos(float x) { return cosf(x); }
__device__ __forceinline__ double dcos(double x) { return cos(x); }
__device__ __forceinline__ float dsin(float x) { return sinf(x); }
__device__ __forceinline__ double dsin(double x) { return sin(x); }
__device__ __forceinline__ float dacos(float x) { return acosf(x); }
__device__ __forceinline__ double dacos(double x) { return acos(x); }
__device__ __forceinline__ float dpow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double dpow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float dsqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double dsqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float dexpm1(float x) { return expm1f(x); }
__device__ __forceinline__ double dexpm1(double x) { return expm1(x); }

/* CELU(α = 0.1) and its derivative expressed through the output y (exp(z/α) = y/α + 1). */
template <typename real> __device__ __forceinline__ real celu(real z) {
    return z > 0 ? z : (real)NNP_CELU_ALPHA * dexpm1(z / (real)NNP_CELU_ALPHA);
}
template <typename real> __device__ __forceinline__ real celu_deriv_from_output(real y) {
    return y > 0 ? (real)1 : y / (real)NNP_CELU_ALPHA + (real)1;
}

__device__ __forceinline__ void add_fixed(unsigned long long* target, double value) {
    atomicAdd(target, (unsigned long long)((long long)(value * (double)0x100000000LL)));
}

#define NNP_MAX_PAIRS (NNP_MAX_ELEMENTS * (NNP_MAX_ELEMENTS + 1) / 2)

/*
 * Programmatic dependent launch (sm_90 and later; see launch_k): every kernel after the first of
 * an evaluation may start while the one before it finishes. pdl_wait() returns once the previous
 * kernel has completed and its writes are visible; each kernel calls it before reading anything an
 * earlier kernel of the evaluation wrote (it may read constant data, such as weights and job
 * tables, before). Every kernel waits, so the completion of one implies that of all before it;
 * and every kernel waits before it triggers, so a kernel that runs may read, before its own wait,
 * what the kernels before its predecessor wrote (the AEV backward reads k_aev's tables so).
 * pdl_trigger() lets the next kernel launch once every block of this one has called it. Both are
 * no-ops for kernels launched without the attribute and on older GPUs.
 */
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_start() { pdl_wait(), pdl_trigger(); }

/* Device copy of the AEV parameters (by value as kernel arguments). */
template <typename real> struct AevParams {
    real Rcr, Rca;
    int nEtaR, nShfR, nEtaA, nZeta, nShfA, nShfZ;
    real EtaR[8], ShfR[NNP_MAX_TERMS], EtaA[8], Zeta[8], ShfA[NNP_MAX_TERMS], ShfZ[NNP_MAX_TERMS];
    int n_elements, radial_sub, angular_sub, radial_length, aev_length;
    int pair_index[NNP_MAX_ELEMENTS * NNP_MAX_ELEMENTS];
    /* Where each block of features sits in the stored (live) AEV row, or -1: the radial block of
       each neighbour element and the angular block of each element pair (see live_blocks). */
    int radial_at[NNP_MAX_ELEMENTS], angular_at[NNP_MAX_PAIRS];
    int angular0; /* stored column of the first angular feature (the live radial features' count) */
    real cosShfZ[NNP_MAX_TERMS], sinShfZ[NNP_MAX_TERMS]; /* cos(θ − ShfZ) = cos θ cos ShfZ + sin θ sin ShfZ */
};

template <typename real> struct Box {
    int periodic;
    real a[9]; /* Å, reduced form */
};

template <typename real> __device__ __forceinline__ void min_image(real& x, real& y, real& z, const Box<real>& box) {
    if (box.periodic) {
        real s = rint(z / box.a[8]);
        x -= s * box.a[6], y -= s * box.a[7], z -= s * box.a[8];
        s = rint(y / box.a[4]);
        x -= s * box.a[3], y -= s * box.a[4];
        s = rint(x / box.a[0]);
        x -= s * box.a[0];
    }
}

/* ------------------------------------------------------------------ kernels: input */

__global__ void k_inverse_order(const int* __restrict__ order, int n, int* __restrict__ index_of) {
    pdl_start();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) index_of[order[i]] = i;
}

/* The position in Å of particle p (in the plan's particle order), read from the caller's buffer
   (OpenMM's reordered layout through index_of, or the plan's particle order), converted in double
   and rounded once to real. *at: the slot it came from; *finite: whether all three coordinates are
   finite. */
template <typename real>
__device__ __forceinline__ typename real4_of<real>::type load_position(const void* __restrict__ positions, int format,
                                                                       const int* __restrict__ index_of, int p,
                                                                       real to_angstrom, int* at, bool* finite) {
    const int i = index_of ? index_of[p] : p;
    double x, y, z;
    if (format == NNP_POSITIONS_FLOAT4) {
        float4 v = ((const float4*)positions)[i];
        x = v.x, y = v.y, z = v.z;
    } else if (format == NNP_POSITIONS_DOUBLE4) {
        nnp_double4 v = ((const nnp_double4*)positions)[i];
        x = v.x, y = v.y, z = v.z;
    } else {
        const double* v = (const double*)positions + 3 * (size_t)i;
        x = v[0], y = v[1], z = v[2];
    }
    *at = i;
    *finite = isfinite(x) && isfinite(y) && isfinite(z);
    typename real4_of<real>::type r;
    r.x = (real)(x * (double)to_angstrom), r.y = (real)(y * (double)to_angstrom), r.z = (real)(z * (double)to_angstrom);
    r.w = 0;
    return r;
}

/* ------------------------------------------------------------------ AEV */

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
   element and the angular list; `rest` is what follows (aev_smem_base bytes in all). */
template <typename real> struct AevAtom {
    typename real4_of<real>::type *vec, *cut;
    int *el, *ang;
    void* rest;
    int nn, na; /* neighbours, and those within Rca */
};
static size_t aev_smem_base(int capacity, size_t real_size) { return (size_t)capacity * (8 * real_size + 2 * sizeof(int)); }
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
__host__ __device__ static inline size_t align16(size_t bytes) { return (bytes + 15) / 16 * 16; }

/* The sum in part order of src[p·stride], p < parts, with 8 loads in flight (L2 only: other blocks
   or launches wrote the parts). splitk_fixup and DeferredSum both add split-K parts with it, which
   keeps their results bit-identical. */
template <typename real> __device__ __forceinline__ real sum_parts(const real* src, size_t stride, int parts) {
    real v = 0;
    int p = 0;
    for (; p + 8 <= parts; p += 8) {
        real t[8];
#pragma unroll
        for (int q = 0; q < 8; q++) t[q] = __ldcg(src + (size_t)(p + q) * stride);
#pragma unroll
        for (int q = 0; q < 8; q++) v += t[q];
    }
    for (; p < parts; p++) v += __ldcg(src + (size_t)p * stride);
    return v;
}

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
    /* pair e = (p, p + 1 + rem) over the angular list, e = (iteration × nwarps + warp) × ps + slot */
    const int step = nwarps * ps;
    int e = warp * ps + slot, p = 0, rem = e;
    while (p < na - 1 && rem >= na - 1 - p) rem -= na - 1 - p, p++;
    for (; e - slot < n_pairs; e += step) {
        if (lane_in && e < n_pairs) {
            const int ja = at.ang[p], ka = at.ang[p + 1 + rem];
            const typename real4_of<real>::type u = at.vec[ja], v = at.vec[ka];
            const real c = (u.x * v.x + u.y * v.y + u.z * v.z) / fmax(u.w * v.w, (real)1e-10);
            const real ct = (real)0.95 * c, st = dsqrt((real)1 - ct * ct); /* cos θ, sin θ (θ = acos(0.95 c)) */
            const real avg = (real)0.5 * (u.w + v.w), fc = (real)2 * at.cut[ja].z * at.cut[ka].z;
            const real base = (real)0.5 * ((real)1 + ct * cosZ + st * sinZ);
            const int col = P.angular_at[P.pair_index[at.el[ja] * NNP_MAX_ELEMENTS + at.el[ka]]];
            if (col >= 0) { /* live by construction (see live_blocks) */
                real* acc = mine + (col - P.angular0) / P.angular_sub * max_ol * nz;
                for (int ol = 0, o = sl; o < n_outer; ol++, o += S) {
                    const int sa = o % P.nShfA, z = (o / P.nShfA) % P.nZeta, ea = o / (P.nShfA * P.nZeta);
                    const real x = avg - P.ShfA[sa];
                    acc[ol * nz] += dpow(base, P.Zeta[z]) * dexp(-P.EtaA[ea] * x * x) * fc;
                }
            }
        }
        rem += step;
        while (p < na - 1 && rem >= na - 1 - p) rem -= na - 1 - p, p++;
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
        /* Angular features, pair-parallel (acc_stride = element pairs × angular_sub, angular_sub <= 32):
           warp w of W takes the pairs w, w + W, ... in order, lane t the term t, and adds each term to
           the warp's own accumulator row in shared memory; the W rows are then added in warp order. The
           pairs each warp sees and the order of every sum are fixed, so the result is the same on
           every run. */
        real* s_acc = (real*)at.rest;
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
        for (int k = threadIdx.x; k < nwarps * acc_stride; k += blockDim.x) s_acc[k] = 0;
        __syncthreads();
        const bool active = lane < P.angular_sub;
        const int t = active ? lane : 0;
        const int sz = t % P.nShfZ, sa = (t / P.nShfZ) % P.nShfA, z = (t / (P.nShfZ * P.nShfA)) % P.nZeta,
                  ea = t / (P.nShfZ * P.nShfA * P.nZeta);
        const real etaA = P.EtaA[ea], zeta = P.Zeta[z], shfA = P.ShfA[sa], cosZ = P.cosShfZ[sz], sinZ = P.sinShfZ[sz];
        real* mine = s_acc + warp * acc_stride - P.angular0; /* indexed by stored column */
        int p = 0, rem = warp; /* pair e = (p, p + 1 + rem) over the angular list */
        while (p < na - 1 && rem >= na - 1 - p) rem -= na - 1 - p, p++;
        for (int e = warp; e < n_pairs; e += nwarps) {
            const int ja = s_ang[p], ka = s_ang[p + 1 + rem];
            const typename real4_of<real>::type u = s_vec[ja], v = s_vec[ka];
            const real c = (u.x * v.x + u.y * v.y + u.z * v.z) / fmax(u.w * v.w, (real)1e-10);
            const real ct = (real)0.95 * c, st = dsqrt((real)1 - ct * ct); /* cos θ, sin θ (θ = acos(0.95 c)) */
            const real x = (real)0.5 * (u.w + v.w) - shfA;
            const real fc = s_cut[ja].z * s_cut[ka].z;
            const int col = P.angular_at[P.pair_index[s_el[ja] * NNP_MAX_ELEMENTS + s_el[ka]]];
            if (active && col >= 0) /* live by construction (see live_blocks) */
                mine[col + t] += (real)2 * dpow((real)0.5 * ((real)1 + ct * cosZ + st * sinZ), zeta) * dexp(-etaA * x * x) * fc;
            rem += nwarps;
            while (p < na - 1 && rem >= na - 1 - p) rem -= na - 1 - p, p++;
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
                    typename real4_of<real>::type u = s_vec[ja], v = s_vec[ka];
                    real dj = u.w, dk = v.w;
                    real c = (u.x * v.x + u.y * v.y + u.z * v.z) / fmax(dj * dk, (real)1e-10);
                    real ct = (real)0.95 * c, st = dsqrt((real)1 - ct * ct);
                    real x = (real)0.5 * (dj + dk) - shfA;
                    real f1 = dpow((real)0.5 * ((real)1 + ct * cosZ + st * sinZ), zeta);
                    sum += (real)2 * f1 * dexp(-etaA * x * x) * s_cut[ja].z * s_cut[ka].z;
                }
            }
            out[P.angular_at[pair] + t] = sum;
        }
    }
}

/* ------------------------------------------------------------------ GEMM */

/*
 * C[m×n] = A[m×k] · op(B) (+ bias, activation), batched over jobs (blockIdx.z).
 * TRANS_B: B is [n×k] row-major (weights, one row per output) and op(B) = Bᵀ; else B is [k×n].
 * Epilogue: EPI_BIAS_CELU: c = celu(acc + bias[col]); EPI_BIAS: c = acc + bias[col];
 *           EPI_DERIV: c = acc · celu'(aux[row, col]) (aux = that layer's outputs); EPI_NONE: c = acc.
 * Tiles of 64×64, k-steps of 16, 256 threads with 4×4 results each; sums in k order.
 */
enum { EPI_NONE = 0, EPI_BIAS = 1, EPI_BIAS_CELU = 2, EPI_DERIV = 3, EPI_OUT = 4 /* k_gemm_mma only: see OutFuse */ };

template <typename real> struct GemmJob {
    const real* A;
    const real* B;
    real* C;
    const real* bias;
    const real* aux;
    int m, n, k, lda, ldb, ldc, ldaux;
    real* partial; /* split-K: ksplit × m × n partial sums, added in order by splitk_fixup */
    int group, member; /* the last hidden layer's forward: output job (element) and ensemble member */
    /* k_gemm_mma (float32, few rows): op(B) split into FP16 pairs and scaled (see MmaWeights): per
       column n, ldq uint4 of 4 k each; wscale = 1 / the scale */
    const uint4* B16;
    int ldq;
    float wscale;
};

template <typename real> __device__ __forceinline__ real epilogue(int epi, const GemmJob<real>& job, int gr, int gc, real v) {
    if (epi == EPI_BIAS || epi == EPI_BIAS_CELU) v += job.bias[gc];
    if (epi == EPI_BIAS_CELU) v = celu(v);
    if (epi == EPI_DERIV) v *= celu_deriv_from_output(job.aux[(size_t)gr * job.ldaux + gc]);
    return v;
}

/*
 * Split-K fix-up, at the end of every block of a split launch: the block that finishes a tile last
 * (counted in `counter`, which it resets for the next launch) adds the tile's partial sums in part
 * order and applies the epilogue, so the result does not depend on which block came last.
 */
template <typename real, int EPI>
__device__ void splitk_fixup(const GemmJob<real>& job, int ksplit, int row0, int rows, int col0, int cols, int* counter) {
    __shared__ int s_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(counter, 1) == ksplit - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    for (int e = threadIdx.x; e < rows * cols; e += blockDim.x) {
        const int gr = row0 + e / cols, gc = col0 + e % cols;
        if (gr >= job.m || gc >= job.n) continue;
        const real v = sum_parts(job.partial + (size_t)gr * job.n + gc, (size_t)job.m * job.n, ksplit);
        job.C[(size_t)gr * job.ldc + gc] = epilogue<real>(EPI, job, gr, gc, v);
    }
    if (threadIdx.x == 0) *counter = 0;
}

/* Split-K part of block z = job·ksplit + part: k in [kbegin, kend), parts of a multiple of GEMM_K. */
struct KPart {
    int part, kbegin, kend;
};
__device__ __forceinline__ KPart k_part(int k, int ksplit, int z) {
    KPart p;
    p.part = z % ksplit;
    const int kc = ((k + ksplit - 1) / ksplit + GEMM_K - 1) / GEMM_K * GEMM_K;
    p.kbegin = p.part * kc, p.kend = min(k, p.kbegin + kc);
    return p;
}

/* The few-rows kernels' output (rows 0..m-1, one 64-column tile at col0): a part's sum into the
   split-K workspace, or the result with its epilogue when the launch is not split. */
template <int EPI>
__device__ __forceinline__ void few_rows_put(const GemmJob<float>& job, int ksplit, int part, int r, int gcol, float v) {
    if (r >= job.m || gcol >= job.n) return;
    if (ksplit > 1) job.partial[((size_t)part * job.m + r) * job.n + gcol] = v;
    else job.C[(size_t)r * job.ldc + gcol] = epilogue<float>(EPI, job, r, gcol, v);
}
template <int EPI> __device__ __forceinline__ void few_rows_fixup(const GemmJob<float>& job, int ksplit, int col0, int* counter) {
    if (ksplit > 1 && counter != NULL) splitk_fixup<float, EPI>(job, ksplit, 0, job.m, col0, GEMM_TILE, counter);
}
/* Split-K through distributed shared memory (sm_90 thread-block clusters; k_gemm_mma where the
   launch puts one tile's ksplit parts, at most 8, in one cluster, so that the cluster's block rank
   is the part): each block leaves its 16 × GEMM_TILE sums in its shared memory (red, rows
   MMA_RED apart), and after the cluster barrier block q adds slice q of the tile's m × GEMM_TILE
   elements over all parts, in part order, and applies the epilogue. The same sums in the same
   order as splitk_fixup's, so the same bits, without its fence, counter and L2 round trip. */
#define MMA_RED 72 /* floats per row: a warp's float2 stores of 8 rows fill the banks twice, no conflict */
__device__ __forceinline__ unsigned cluster_blocks() {
    unsigned r = 1;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
#endif
    return r;
}
__device__ __forceinline__ void cluster_barrier() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}
/* Block `rank`'s copy of the shared variable at p (ld.shared::cluster). */
__device__ __forceinline__ float cluster_load(const float* p, int rank) {
    float v = 0.f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned local = (unsigned)__cvta_generic_to_shared(p), remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
#endif
    return v;
}
template <int EPI>
__device__ void cluster_fixup(const GemmJob<float>& job, int ksplit, int part, int col0, const float (*red)[MMA_RED]) {
    cluster_barrier(); /* every part's sums are in its shared memory */
    const int count = job.m * GEMM_TILE, per = (count + ksplit - 1) / ksplit, end = min(count, (part + 1) * per);
    for (int e = part * per + threadIdx.x; e < end; e += blockDim.x) {
        const int r = e / GEMM_TILE, c = e % GEMM_TILE;
        float t[8];
#pragma unroll
        for (int q = 0; q < 8; q++) t[q] = q < ksplit ? cluster_load(&red[r][c], q) : 0.f; /* all in flight */
        float v = 0.f;
#pragma unroll
        for (int q = 0; q < 8; q++)
            if (q < ksplit) v += t[q];
        if (col0 + c < job.n) job.C[(size_t)r * job.ldc + col0 + c] = epilogue<float>(EPI, job, r, col0 + c, v);
    }
    cluster_barrier(); /* no block leaves (and frees its shared memory) before the others have read it */
}
/* The split-K tile counter of block (x, z) of a few-rows launch. No counters (NULL): the parts' sums
   stay in the workspace, for the next kernel to add (the AEV backward: see DeferredSum). */
__device__ __forceinline__ int* tile_counter(int* counters, int ksplit) {
    return counters == NULL ? NULL : counters + (size_t)(blockIdx.z / ksplit) * gridDim.x + blockIdx.x;
}

/* Split-K (small row counts, where one block per tile would walk a long k loop alone): block z
   = job·ksplit + part computes k in [part·kc, (part+1)·kc) into partial; k_gemm_reduce adds the
   parts in order and applies the epilogue, so the result does not depend on scheduling. (Its 64×64
   tiles of many parts are too much work for splitk_fixup's one block per tile.) */
template <typename real, bool TRANS_B, int EPI>
__global__ void __launch_bounds__(256) k_gemm(const GemmJob<real>* __restrict__ jobs, int ksplit) {
    const GemmJob<real> job = jobs[blockIdx.z / ksplit];
    pdl_start();
    const KPart kp = k_part(job.k, ksplit, blockIdx.z);
    const int part = kp.part, kbegin = kp.kbegin, kend = kp.kend;
    int row0 = blockIdx.y * GEMM_TILE, col0 = blockIdx.x * GEMM_TILE;
    if (row0 >= job.m || col0 >= job.n) return;
    __shared__ real As[GEMM_K][GEMM_TILE + 1];
    __shared__ real Bs[GEMM_K][GEMM_TILE + 1];
    int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    real acc[4][4];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) acc[r][c] = 0;
    for (int k0 = kbegin; k0 < kend; k0 += GEMM_K) {
        for (int e = threadIdx.x; e < GEMM_TILE * GEMM_K; e += 256) {
            int r = e / GEMM_K, kk = e % GEMM_K;
            int gr = row0 + r, gk = k0 + kk;
            As[kk][r] = (gr < job.m && gk < kend) ? job.A[(size_t)gr * job.lda + gk] : (real)0;
            if (TRANS_B) {
                int gc = col0 + r;
                Bs[kk][r] = (gc < job.n && gk < kend) ? job.B[(size_t)gc * job.ldb + gk] : (real)0;
            } else {
                int c = e % GEMM_TILE, kb = e / GEMM_TILE;
                int gc2 = col0 + c, gk2 = k0 + kb;
                Bs[kb][c] = (gc2 < job.n && gk2 < kend) ? job.B[(size_t)gk2 * job.ldb + gc2] : (real)0;
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GEMM_K; kk++) {
            real a[4], b[4];
#pragma unroll
            for (int r = 0; r < 4; r++) a[r] = As[kk][ty + 16 * r];
#pragma unroll
            for (int c = 0; c < 4; c++) b[c] = Bs[kk][tx + 16 * c];
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int c = 0; c < 4; c++) acc[r][c] += a[r] * b[c];
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
        int gr = row0 + ty + 16 * r;
        if (gr >= job.m) continue;
#pragma unroll
        for (int c = 0; c < 4; c++) {
            int gc = col0 + tx + 16 * c;
            if (gc >= job.n) continue;
            if (ksplit > 1) job.partial[((size_t)part * job.m + gr) * job.n + gc] = acc[r][c];
            else job.C[(size_t)gr * job.ldc + gc] = epilogue<real>(EPI, job, gr, gc, acc[r][c]);
        }
    }
}

template <typename real, int EPI>
__global__ void k_gemm_reduce(const GemmJob<real>* __restrict__ jobs, int ksplit) {
    const GemmJob<real> job = jobs[blockIdx.y];
    pdl_start();
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < job.m * job.n; e += gridDim.x * blockDim.x) {
        int gr = e / job.n, gc = e % job.n;
        real v = 0;
        for (int p = 0; p < ksplit; p++) v += job.partial[((size_t)p * job.m + gr) * job.n + gc];
        job.C[(size_t)gr * job.ldc + gc] = epilogue<real>(EPI, job, gr, gc, v);
    }
}

/*
 * The same product for many rows: 128×128 tiles, k-steps of 8, 256 threads with 8×8 results each
 * (rows ty·4+i and 64+ty·4+i, columns likewise), so that each value loaded from shared memory
 * feeds 8 multiply-adds. Sums in k order, as in k_gemm.
 */
#define BIG_TILE 128
#define BIG_K 8
/* A 128×128 tile's results: thread (tx, ty) holds rows ty·4+i and 64+ty·4+i, columns likewise. */
template <typename real, int EPI>
__device__ __forceinline__ void store_big_tile(const GemmJob<real>& job, int row0, int col0, int tx, int ty, const real (&acc)[8][8]) {
#pragma unroll
    for (int r = 0; r < 8; r++) {
        const int gr = row0 + (r < 4 ? ty * 4 + r : 64 + ty * 4 + (r - 4));
        if (gr >= job.m) continue;
#pragma unroll
        for (int c = 0; c < 8; c++) {
            const int gc = col0 + (c < 4 ? tx * 4 + c : 64 + tx * 4 + (c - 4));
            if (gc < job.n) job.C[(size_t)gr * job.ldc + gc] = epilogue<real>(EPI, job, gr, gc, acc[r][c]);
        }
    }
}

template <typename real, bool TRANS_B, int EPI>
__global__ void __launch_bounds__(256) k_gemm_big(const GemmJob<real>* __restrict__ jobs) {
    const GemmJob<real> job = jobs[blockIdx.z];
    pdl_start();
    const int row0 = blockIdx.y * BIG_TILE, col0 = blockIdx.x * BIG_TILE;
    if (row0 >= job.m || col0 >= job.n) return;
    __shared__ __align__(16) real As[BIG_K][BIG_TILE];
    __shared__ __align__(16) real Bs[BIG_K][BIG_TILE];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    real acc[8][8];
#pragma unroll
    for (int r = 0; r < 8; r++)
#pragma unroll
        for (int c = 0; c < 8; c++) acc[r][c] = 0;
    for (int k0 = 0; k0 < job.k; k0 += BIG_K) {
        /* A tile: 128 rows × 8 k, 4 values per thread (2 threads per row, 4 k each). */
        {
            const int r = threadIdx.x / 2, kq = (threadIdx.x % 2) * 4;
            const int gr = row0 + r;
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int gk = k0 + kq + q;
                As[kq + q][r] = (gr < job.m && gk < job.k) ? job.A[(size_t)gr * job.lda + gk] : (real)0;
            }
        }
        if (TRANS_B) { /* B is [n × k]: 128 columns × 8 k */
            const int c = threadIdx.x / 2, kq = (threadIdx.x % 2) * 4;
            const int gc = col0 + c;
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int gk = k0 + kq + q;
                Bs[kq + q][c] = (gc < job.n && gk < job.k) ? job.B[(size_t)gc * job.ldb + gk] : (real)0;
            }
        } else { /* B is [k × n]: 8 k rows × 128 columns, 4 consecutive columns per thread */
            const int kk = threadIdx.x / 32, c = (threadIdx.x % 32) * 4;
            const int gk = k0 + kk;
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int gc = col0 + c + q;
                Bs[kk][c + q] = (gc < job.n && gk < job.k) ? job.B[(size_t)gk * job.ldb + gc] : (real)0;
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BIG_K; kk++) {
            real a[8], b[8];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                a[i] = As[kk][ty * 4 + i];
                a[4 + i] = As[kk][64 + ty * 4 + i];
                b[i] = Bs[kk][tx * 4 + i];
                b[4 + i] = Bs[kk][64 + tx * 4 + i];
            }
#pragma unroll
            for (int r = 0; r < 8; r++)
#pragma unroll
                for (int c = 0; c < 8; c++) acc[r][c] += a[r] * b[c];
        }
        __syncthreads();
    }
    store_big_tile<real, EPI>(job, row0, col0, tx, ty, acc);
}

/*
 * The many-rows product in float32 where every operand is 16-byte aligned with leading dimensions
 * that are multiples of 4 (checked on the host; k_gemm_big otherwise): the same 128×128 tiles and
 * 8×8 results per thread, with float4 global and shared-memory loads and two shared buffers, the
 * next k-step's tiles loaded into registers while the current one is multiplied (one barrier per
 * k-step). Sums in k order, as in k_gemm_big, so both give the same bits.
 */
#define BIG_LD (BIG_TILE + 4) /* padded rows: the transposed stores of the two k-halves in distinct banks */
template <bool TRANS_B, int EPI>
__global__ void __launch_bounds__(256, 2) k_gemm_big4(const GemmJob<float>* __restrict__ jobs) {
    const GemmJob<float> job = jobs[blockIdx.z];
    pdl_start();
    const int row0 = blockIdx.y * BIG_TILE, col0 = blockIdx.x * BIG_TILE;
    if (row0 >= job.m || col0 >= job.n) return;
    __shared__ __align__(16) float As[2][BIG_K][BIG_LD];
    __shared__ __align__(16) float Bs[2][BIG_K][BIG_LD];
    const int t = threadIdx.x, tx = t % 16, ty = t / 16;
    /* This thread's loads: A (and B if TRANS_B) row t/2, k-quarter (t%2)·4; B otherwise k row t/32,
       columns (t%32)·4. */
    const int lr = t / 2, lk = (t % 2) * 4, bk = t / 32, bc = (t % 32) * 4;
    /* elements k..k+3 (those below kmax) of row r (below rmax) of a row-major matrix */
    auto load4 = [&](const float* base, int ld, int r, int rmax, int k, int kmax) -> float4 {
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r >= rmax) return v;
        const float* p = base + (size_t)r * ld + k;
        if (k + 4 <= kmax) return __ldg((const float4*)p);
        if (k < kmax) v.x = p[0];
        if (k + 1 < kmax) v.y = p[1];
        if (k + 2 < kmax) v.z = p[2];
        return v;
    };
    auto fetch = [&](int k0, float4& a, float4& b) {
        a = load4(job.A, job.lda, row0 + lr, job.m, k0 + lk, job.k);
        if (TRANS_B) b = load4(job.B, job.ldb, col0 + lr, job.n, k0 + lk, job.k);
        else b = load4(job.B, job.ldb, k0 + bk, job.k, col0 + bc, job.n); /* B is [k × n] */
    };
    auto store = [&](int buf, const float4& a, const float4& b) {
        As[buf][lk][lr] = a.x, As[buf][lk + 1][lr] = a.y, As[buf][lk + 2][lr] = a.z, As[buf][lk + 3][lr] = a.w;
        if (TRANS_B) Bs[buf][lk][lr] = b.x, Bs[buf][lk + 1][lr] = b.y, Bs[buf][lk + 2][lr] = b.z, Bs[buf][lk + 3][lr] = b.w;
        else *(float4*)&Bs[buf][bk][bc] = b;
    };
    float acc[8][8];
#pragma unroll
    for (int r = 0; r < 8; r++)
#pragma unroll
        for (int c = 0; c < 8; c++) acc[r][c] = 0.f;
    float4 na, nb;
    fetch(0, na, nb);
    store(0, na, nb);
    __syncthreads();
    int buf = 0;
    for (int k0 = 0; k0 < job.k; k0 += BIG_K) {
        const bool more = k0 + BIG_K < job.k;
        if (more) fetch(k0 + BIG_K, na, nb);
#pragma unroll
        for (int kk = 0; kk < BIG_K; kk++) {
            const float4 a0 = *(const float4*)&As[buf][kk][ty * 4], a1 = *(const float4*)&As[buf][kk][64 + ty * 4];
            const float4 b0 = *(const float4*)&Bs[buf][kk][tx * 4], b1 = *(const float4*)&Bs[buf][kk][64 + tx * 4];
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int r = 0; r < 8; r++)
#pragma unroll
                for (int c = 0; c < 8; c++) acc[r][c] += a[r] * b[c];
        }
        if (more) store(buf ^ 1, na, nb);
        __syncthreads();
        buf ^= 1;
    }
    store_big_tile<float, EPI>(job, row0, col0, tx, ty, acc);
}

/*
 * Few rows (m <= SKINNY_M, float32): the step after split-K for one or a few molecules. A block
 * covers 64 columns and one k-range (chunks of SKINNY_K) for all m rows; the weights are read once,
 * straight from global memory, each thread's 16 consecutive k of a chunk requested one chunk ahead
 * (float4 loads along k for TRANS_B where aligned, coalesced along n otherwise), the activation rows
 * staged in shared memory. MR (SKINNY_M; at most 16 rows go to k_gemm_mma unless NNP_CUDA_MMA=0)
 * bounds the row loop at compile time: rows m..MR-1 are zeros in shared memory, so no row needs a
 * predicate, each float4 read from shared memory feeds 4 multiply-adds and the MR rows' sums are
 * independent chains.
 * The 4 partial sums of each output are added in a fixed order (a shuffle tree, or shared memory),
 * so the result does not depend on scheduling. Same grid (y = 1) and split-K partial layout as
 * k_gemm; the last block of each column tile adds the parts (splitk_fixup).
 */
#define SKINNY_M 32
#define SKINNY_K 64
#define SKINNY_LD (SKINNY_K + SKINNY_K / 4) /* 4 padding words per 16: the k-quarters' float4 reads in distinct banks */
template <bool TRANS_B, int EPI, int MR>
__global__ void __launch_bounds__(256) k_gemm_skinny(const GemmJob<float>* __restrict__ jobs, int ksplit, int* __restrict__ counters) {
    const GemmJob<float> job = jobs[blockIdx.z / ksplit];
    const KPart kp = k_part(job.k, ksplit, blockIdx.z);
    const int part = kp.part, kbegin = kp.kbegin, kend = kp.kend;
    const int col0 = blockIdx.x * GEMM_TILE, m = job.m;
    if (col0 >= job.n) {
        pdl_start();
        return;
    }
    __shared__ __align__(16) float As[MR][SKINNY_LD];
    __shared__ float Red[TRANS_B ? 1 : 4][TRANS_B ? 1 : MR][GEMM_TILE];
    const int t = threadIdx.x;
    const int tc = TRANS_B ? t / 4 : t % GEMM_TILE; /* column within the tile */
    const int tg = TRANS_B ? t % 4 : t / GEMM_TILE; /* which 16 k of each chunk */
    const int gc = col0 + tc;
    const bool vec = TRANS_B && ((size_t)job.B % 16 == 0) && job.ldb % 4 == 0; /* kbegin is a multiple of 16 */
    float acc[MR];
#pragma unroll
    for (int r = 0; r < MR; r++) acc[r] = 0.f;
    /* this thread's 16 weights k0 + tg·16 + i of the chunk at k0 (zero outside the matrix) */
    auto fetch = [&](int k0, float* w) {
        const int kq = k0 + tg * 16;
        if (TRANS_B) {
            const float* src = job.B + (size_t)gc * job.ldb + kq;
            if (gc < job.n && vec && kq + 16 <= kend) {
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const float4 v = __ldg((const float4*)src + q);
                    w[4 * q] = v.x, w[4 * q + 1] = v.y, w[4 * q + 2] = v.z, w[4 * q + 3] = v.w;
                }
            } else {
#pragma unroll
                for (int i = 0; i < 16; i++) w[i] = gc < job.n && kq + i < kend ? src[i] : 0.f;
            }
        } else {
#pragma unroll
            for (int i = 0; i < 16; i++) w[i] = gc < job.n && kq + i < kend ? __ldg(job.B + (size_t)(kq + i) * job.ldb + gc) : 0.f;
        }
    };
    float w[16], wn[16];
    fetch(kbegin, w); /* weights are constant: requested before the wait */
    pdl_start();
    for (int k0 = kbegin; k0 < kend; k0 += SKINNY_K) {
        if (k0 + SKINNY_K < kend) fetch(k0 + SKINNY_K, wn);
        __syncthreads();
        for (int e = t; e < MR * SKINNY_K; e += 256) {
            const int r = e / SKINNY_K, kk = e % SKINNY_K, gk = k0 + kk;
            As[r][kk + kk / 16 * 4] = r < m && gk < kend ? job.A[(size_t)r * job.lda + gk] : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int q = 0; q < 4; q++)
#pragma unroll
            for (int r = 0; r < MR; r++) {
                const float4 a = *(const float4*)&As[r][tg * 20 + 4 * q];
                float v = acc[r];
                v += a.x * w[4 * q];
                v += a.y * w[4 * q + 1];
                v += a.z * w[4 * q + 2];
                v += a.w * w[4 * q + 3];
                acc[r] = v;
            }
#pragma unroll
        for (int i = 0; i < 16; i++) w[i] = wn[i];
    }
    auto put = [&](int r, int c, float v) { few_rows_put<EPI>(job, ksplit, part, r, col0 + c, v); };
    if (TRANS_B) {
        /* The 4 threads of a column are 4 consecutive lanes: a butterfly gives each the same sum
           ((a+b)+(c+d), by commutativity); thread tg writes rows tg, tg+4, ... */
#pragma unroll
        for (int r = 0; r < MR; r++) {
            float v = acc[r];
            v += __shfl_xor_sync(0xffffffffu, v, 1);
            v += __shfl_xor_sync(0xffffffffu, v, 2);
            if ((r & 3) == tg) put(r, tc, v);
        }
    } else {
#pragma unroll
        for (int r = 0; r < MR; r++)
            if (r < m) Red[tg][r][tc] = acc[r];
        __syncthreads();
        for (int e = t; e < m * GEMM_TILE; e += 256) {
            int r = e / GEMM_TILE, c = e % GEMM_TILE;
            put(r, c, ((Red[0][r][c] + Red[1][r][c]) + Red[2][r][c]) + Red[3][r][c]);
        }
    }
    few_rows_fixup<EPI>(job, ksplit, col0, tile_counter(counters, ksplit));
}

/* Per element: the last hidden layer's outputs Y (rows × members·width), output weights w_out
   (members × width) and biases. One block per row, one warp per member: e = Σ_m scale·(w_m·y_m +
   b_m), the members added in order; if forces, the first backward step delta[row, m, :] = scale ·
   w_m ⊙ celu'(y_m). */
template <typename real> struct OutputJob {
    const real* Y;
    const real* w_out;
    const real* b_out;
    real* delta;
    int row0, ldy, width, rows, pad;
};

/*
 * The output layer fused into the last hidden layer's forward (EPI_OUT; one molecule: k_gemm_mma
 * without split-K). Each block takes its tile's y = celu(acc + bias) (y itself is not stored:
 * nothing reads it): the first backward step delta = scale · w_out ⊙ celu'(y) (with forces), and the
 * tile's Σ_col w_out·y per row (lanes, then warps, in a fixed order) into partial[z][tile][16], z =
 * element·members + member. The end of the evaluation (finish_evaluation) adds, per row, the tiles in
 * order and then the members in order with their biases, as k_output would: e = Σ_m scale·(Σ w·y + b_m).
 * The output weights and biases are requested before the wait for the earlier kernel.
 */
struct OutFuse {
    const OutputJob<float>* jobs; /* per element; GemmJob::group indexes them */
    float* partial;
    float scale;
    int with_forces;
};

/*
 * At most 16 rows (float32), on the tensor cores: one molecule's layers, where the SIMT kernels
 * above issue about one instruction per 4 cycles per scheduler and the instruction count sets the
 * time. mma.sync m16n8k16 in FP16 with each operand scaled by a power of two and split into an
 * FP16 high part and the FP16 rest (x = hi + lo): a·b = hi·hi + (hi·lo + lo·hi) to about float32's
 * precision (the lo·lo term, ~2^-22 relative, is left out), the sums in float32 (see mma_tile). The 16 rows are one m16 tile; a block of 8 warps
 * covers 64 columns (8 per warp) and one k-range: the activation rows are staged in shared memory
 * already split and in fragment order, each lane's weights for the whole range (up to MMA_K) are
 * requested at once,
 * and the products go to four accumulators (high and mixed terms, even and odd k-steps: short
 * dependency chains) added in a fixed order at the end. Same grid, split-K layout and fix-up as
 * k_gemm_skinny. NNP_CUDA_MMA=0 keeps the SIMT kernel.
 */
#define MMA_K 256
/* uint4 per staged step of activations: the 32 lanes' fragments and 4 of padding, so that steps of
   odd and even index start 16 banks apart. Each staging store of a warp covers 4 steps (2 pairs):
   with 32 uint4 per step they met in the same 8 banks (a 4-way conflict), with 36 in 16 (2-way).
   Measured on the H200 at one molecule: 55.1 -> 52.9 us per graph-replayed step (2026-11-30);
   two lanes per k (8 rows each), which removes the last 2-way conflict, measured the same. */
#define MMA_AROW 36
#define MMA_STEPS (MMA_K / 16) /* m16n8k16 steps per stage */
__device__ __forceinline__ void mma_f16(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
/* (a, b) as FP16 pairs: hi = (a, b) rounded, lo = the rest rounded (a in the low halves). */
__host__ __device__ inline void fp16_split(float a, float b, unsigned& hi, unsigned& lo) {
    const __half2 h = __floats2half2_rn(a, b);
    const float2 f = __half22float2(h);
    const __half2 l = __floats2half2_rn(a - f.x, b - f.y);
    memcpy(&hi, &h, sizeof hi), memcpy(&lo, &l, sizeof lo);
}
/* The power of two that brings magnitudes up to mx below 2^14 (1 for 0, NaN or infinity). */
__host__ __device__ inline float fp16_scale(float mx) {
    if (!(mx > 0.f) || isinf(mx)) return 1.f;
    int e;
    frexpf(mx, &e); /* mx < 2^e */
    return ldexpf(1.f, min(127, max(-126, 14 - e)));
}
/* EPI_OUT's end of a k_gemm_mma tile (see OutFuse): acc as in mma_tile; w and b: the output weight
   and the bias of this lane's two columns; delta: the element's first backward step. */
__device__ __forceinline__ void mma_output(const GemmJob<float>& job, int col0, const float (&acc)[4][4], const float (&w)[2],
                                           const float (&b)[2], const OutputJob<float>& o, const OutFuse& fuse) {
    __shared__ float s_e[8][16];
    const int t = threadIdx.x, warp = t / 32, lane = t % 32, g = lane / 4, tq = lane % 4;
    float e[2] = {0.f, 0.f}; /* rows g and g + 8 */
#pragma unroll
    for (int c = 0; c < 4; c++) {
        const int r = g + 8 * (c / 2), col = col0 + warp * 8 + 2 * tq + (c % 2);
        if (r >= job.m || col >= job.n) continue;
        const float y = celu((acc[0][c] + acc[2][c]) + (acc[1][c] + acc[3][c]) + b[c % 2]);
        e[c / 2] += w[c % 2] * y;
        if (fuse.with_forces) o.delta[(size_t)r * o.ldy + job.member * o.width + col] = fuse.scale * w[c % 2] * celu_deriv_from_output(y);
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        e[0] += __shfl_xor_sync(0xffffffffu, e[0], off);
        e[1] += __shfl_xor_sync(0xffffffffu, e[1], off);
    }
    if (tq == 0) s_e[warp][g] = e[0], s_e[warp][g + 8] = e[1];
    __syncthreads();
    if (t < 16) {
        float sum = 0.f;
        for (int x = 0; x < 8; x++) sum += s_e[x][t];
        fuse.partial[((size_t)blockIdx.z * gridDim.x + blockIdx.x) * 16 + t] = sum;
    }
}
/* One tile of k_gemm_mma: columns col0.. of `job`, split-K part kp (of ksplit), with the tile's
   counter. ready() is called once, after this tile's weights are requested and before anything an
   earlier kernel wrote is read. Ahi and Alo: MMA_STEPS × MMA_AROW uint4 of shared memory each; red:
   16 × MMA_RED floats (split-K in a cluster). */
template <bool TRANS_B, int EPI, typename Ready>
__device__ __forceinline__ void mma_tile(const GemmJob<float>& job, KPart kp, int ksplit, int col0, int* counter, uint4 (*Ahi)[MMA_AROW],
                                         uint4 (*Alo)[MMA_AROW], float (*red)[MMA_RED], const OutFuse& fuse, Ready ready) {
    const int part = kp.part, kbegin = kp.kbegin, kend = kp.kend;
    const int m = job.m;
    /* m16n8k16 in FP16 with float32 sums, each operand as a high and a low FP16 part (x = hi + lo,
       the same 11 + 11 bits as a TF32 pair): a·b = hi·hi + (hi·lo + lo·hi), both operands scaled by
       powers of two into FP16's range and the sums scaled back. The k order inside each 16-k step:
       lane tq's k are 4tq .. 4tq+3, the first two in its registers of k 2tq, 2tq+1 and the last two
       in those of 2tq+8, 2tq+9 (the same for A and B, so the products are the same); its 4 weights
       of a step are one uint4 (MmaWeights). The activation fragments are staged in that order: per
       step, per lane, (a0, a1, a2, a3) = rows (g, g+8) × its two k pairs, high and low parts, one
       16-byte read each. */
    const int t = threadIdx.x, warp = t / 32, lane = t % 32, g = lane / 4, tq = lane % 4;
    const int n = col0 + warp * 8 + g; /* this lane's weight column */
    float acc[4][4];
    float out_w[2] = {0.f, 0.f}, out_b[2] = {0.f, 0.f}; /* EPI_OUT: see mma_output */
    OutputJob<float> o = {};
    if constexpr (EPI == EPI_OUT) {
        o = fuse.jobs[job.group];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int col = col0 + warp * 8 + 2 * tq + i;
            if (col < job.n) out_b[i] = job.bias[col], out_w[i] = o.w_out[job.member * o.width + col];
        }
    }
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int c = 0; c < 4; c++) acc[a][c] = 0.f;
    if (kbegin >= kend) ready(); /* an empty part still waits before it writes */
    float scale = 1.f; /* the staged activations' power-of-two scale (see below) */
    for (int s0 = kbegin; s0 < kend; s0 += MMA_K) {
        const int s1 = min(kend, s0 + MMA_K), width = (s1 - s0 + 15) / 16 * 16;
        /* this lane's weights of every 16-k step d, split and scaled when the plan was made (see
           MmaWeights): one 16-byte load each, requested now */
        uint4 bv[MMA_STEPS];
#pragma unroll
        for (int d = 0; d < MMA_STEPS; d++) {
            const int k = s0 + 16 * d + 4 * tq;
            bv[d] = n < job.n && k < s1 ? __ldg(job.B16 + (size_t)n * job.ldq + k / 4) : make_uint4(0u, 0u, 0u, 0u);
        }
        if (s0 == kbegin) ready(); /* the weights above are constant; the activations are not */
        else __syncthreads();           /* the previous stage's reads are done */
        /* Thread t stages the k pair s0 + 2·(t mod 128) + {0, 1} of rows 8·(t / 128) + i, i < 8. */
        const int kp = t % 128, h = t / 128, k0 = s0 + 2 * kp;
        float2 x[8];
        float mx = 0.f;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int r = 8 * h + i;
            const float* src = job.A + (size_t)r * job.lda + k0;
            x[i].x = r < m && k0 < s1 ? __ldcg(src) : 0.f; /* L2 only: read once */
            x[i].y = r < m && k0 + 1 < s1 ? __ldcg(src + 1) : 0.f;
            mx = fmaxf(mx, fmaxf(fabsf(x[i].x), fabsf(x[i].y)));
        }
        /* One power-of-two scale for the block's staged rows, so that their largest magnitude is
           below 2^14: FP16's range then holds the high parts and, down to 2^-17 of the largest, the
           low parts as normal numbers (smaller values keep an absolute error below 2^-38 of it). */
        {
            __shared__ float s_mx[8];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            if (lane == 0) s_mx[warp] = mx;
            __syncthreads();
            mx = s_mx[0];
#pragma unroll
            for (int w = 1; w < 8; w++) mx = fmaxf(mx, s_mx[w]);
        }
        const float previous = scale;
        scale = fp16_scale(mx);
        if (s0 != kbegin) /* the sums so far to the new scale (powers of two: exact) */
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int c = 0; c < 4; c++) acc[a][c] *= scale / previous;
        if (2 * kp < width) {
            /* pair p of 16-k step kp / 8 belongs to lane (r mod 8, p / 2), register 2·(p mod 2) + r / 8 */
            const int step = kp / 8, p = kp % 8;
            unsigned* hi_at = (unsigned*)&Ahi[step][0] + (p / 2) * 4 + 2 * (p % 2) + h;
            unsigned* lo_at = (unsigned*)&Alo[step][0] + (p / 2) * 4 + 2 * (p % 2) + h;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                unsigned hi, lo;
                fp16_split(x[i].x * scale, x[i].y * scale, hi, lo);
                hi_at[16 * i] = hi, lo_at[16 * i] = lo; /* lane (i, p / 2): 16 words per row */
            }
        }
        __syncthreads();
#pragma unroll
        for (int step = 0; step < MMA_STEPS; step++) {
            if (16 * step >= width) break;
            const uint4 ah = Ahi[step][lane], al = Alo[step][lane], b = bv[step];
            float(&mixed)[4] = acc[2 * (step & 1)], (&high)[4] = acc[2 * (step & 1) + 1];
            mma_f16(mixed, al.x, al.y, al.z, al.w, b.x, b.y);
            mma_f16(mixed, ah.x, ah.y, ah.z, ah.w, b.z, b.w);
            mma_f16(high, ah.x, ah.y, ah.z, ah.w, b.x, b.y);
        }
    }
    {
        const float unscale = job.wscale / scale; /* back to the operands' units (powers of two) */
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[a][c] *= unscale;
    }
    if constexpr (EPI == EPI_OUT) {
        mma_output(job, col0, acc, out_w, out_b, o, fuse);
    } else {
        /* D fragment: (row g, columns 2tq and 2tq+1), then row g + 8 */
        float v[4];
#pragma unroll
        for (int c = 0; c < 4; c++) v[c] = ((acc[0][c] + acc[2][c]) + (acc[1][c] + acc[3][c]));
        if (ksplit > 1 && counter != NULL && cluster_blocks() == (unsigned)ksplit) { /* the parts in one cluster */
#pragma unroll
            for (int h = 0; h < 2; h++) *(float2*)&red[g + 8 * h][warp * 8 + 2 * tq] = make_float2(v[2 * h], v[2 * h + 1]);
            cluster_fixup<EPI>(job, ksplit, part, col0, red);
            return;
        }
#pragma unroll
        for (int c = 0; c < 4; c++) few_rows_put<EPI>(job, ksplit, part, g + 8 * (c / 2), col0 + warp * 8 + 2 * tq + (c % 2), v[c]);
        few_rows_fixup<EPI>(job, ksplit, col0, counter);
    }
}

template <bool TRANS_B, int EPI>
__global__ void __launch_bounds__(256, 2) k_gemm_mma(const GemmJob<float>* __restrict__ jobs, int ksplit, int* __restrict__ counters,
                                                       const OutFuse fuse) {
    __shared__ uint4 Ahi[MMA_STEPS][MMA_AROW], Alo[MMA_STEPS][MMA_AROW];
    __shared__ __align__(16) float red[16][MMA_RED]; /* split-K in a cluster: see cluster_fixup */
    const GemmJob<float> job = jobs[blockIdx.z / ksplit];
    const int col0 = blockIdx.x * GEMM_TILE;
    if (col0 >= job.n) {
        pdl_start();
        return;
    }
    mma_tile<TRANS_B, EPI>(job, k_part(job.k, ksplit, blockIdx.z), ksplit, col0, tile_counter(counters, ksplit), Ahi, Alo, red, fuse,
                           [] { pdl_start(); });
}

/* Chooses the few-rows kernel where it applies (float32, m <= SKINNY_M; NNP_CUDA_SKINNY=0 turns it
   off for comparisons). */
static int skinny_enabled(void) {
    static int enabled = -1;
    if (enabled < 0) enabled = !(getenv("NNP_CUDA_SKINNY") && atoi(getenv("NNP_CUDA_SKINNY")) == 0);
    return enabled;
}
/* Diagnostics for timing only, the results being wrong: NNP_CUDA_DEBUG_KERNELS=k launches only the
   first k kernels of each evaluation (read once per process), so that the cost of each kernel in a
   real step, launch overlap included, can be measured by difference. */
static int debug_kernels = -2, debug_launched;
static bool debug_skip(void) {
    if (debug_kernels == -2) debug_kernels = getenv("NNP_CUDA_DEBUG_KERNELS") ? atoi(getenv("NNP_CUDA_DEBUG_KERNELS")) : -1;
    return debug_kernels >= 0 && debug_launched++ >= debug_kernels;
}
/* Launches a kernel, as a programmatic dependent launch when pdl is set (see pdl_wait), in
   thread-block clusters of cluster_z blocks along z where that is more than 1. */
template <typename... KArgs, typename... Args>
static void launch_kc(bool pdl, unsigned cluster_z, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                      Args... args) {
    if (debug_skip()) return;
    cudaLaunchAttribute attr[2] = {};
    unsigned n = 0;
    if (pdl) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster_z > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = 1, attr[n].val.clusterDim.y = 1, attr[n++].val.clusterDim.z = cluster_z;
    }
    cudaLaunchConfig_t config = {};
    config.gridDim = grid, config.blockDim = block, config.dynamicSmemBytes = smem, config.stream = stream;
    config.attrs = attr, config.numAttrs = n;
    cudaLaunchKernelEx(&config, kernel, args...);
}
template <typename... KArgs, typename... Args>
static void launch_k(bool pdl, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args... args) {
    launch_kc(pdl, 1, kernel, grid, block, smem, stream, args...);
}

/* Tensor cores for at most 16 rows (NNP_CUDA_MMA=0: the SIMT few-rows kernel instead). */
static int mma_enabled(void) {
    static int enabled = -1;
    if (enabled < 0) enabled = !(getenv("NNP_CUDA_MMA") && atoi(getenv("NNP_CUDA_MMA")) == 0);
    return enabled;
}
/* Whether a float32 launch of at most max_m rows per job runs on k_gemm_mma: the launch, the FP16
   weight table (MmaWeights) and the fused output layer all ask this. */
static bool runs_on_mma(int max_m) { return max_m <= 16 && skinny_enabled() && mma_enabled(); }
template <typename real> struct SkinnyGemm {
    template <bool TRANS_B, int EPI> static bool run(const GemmJob<real>*, dim3, int, int, int*, bool, cudaStream_t, bool) { return false; }
    static bool run_output(const GemmJob<real>*, dim3, int*, cudaStream_t, bool, const OutFuse&) { return false; }
    static void preload() {}
};
template <> struct SkinnyGemm<float> {
    template <bool TRANS_B, int EPI>
    static bool run(const GemmJob<float>* jobs, dim3 grid, int ksplit, int max_m, int* counters, bool cluster, cudaStream_t stream, bool pdl) {
        if (max_m > SKINNY_M || !skinny_enabled()) return false;
        const dim3 g(grid.x, 1, grid.z);
        /* cluster: a tile's split-K parts in one thread-block cluster (see cluster_fixup) */
        const unsigned cz = cluster && counters != NULL && ksplit > 1 && ksplit <= 8 ? ksplit : 1;
        if (runs_on_mma(max_m)) launch_kc(pdl, cz, k_gemm_mma<TRANS_B, EPI>, g, dim3(256), 0, stream, jobs, ksplit, counters, OutFuse());
        else launch_k(pdl, k_gemm_skinny<TRANS_B, EPI, SKINNY_M>, g, dim3(256), 0, stream, jobs, ksplit, counters);
        return true;
    }
    /* The last hidden layer's forward with the output layer (EPI_OUT; see fuse_output). */
    static bool run_output(const GemmJob<float>* jobs, dim3 grid, int* counters, cudaStream_t stream, bool pdl, const OutFuse& fuse) {
        launch_k(pdl, k_gemm_mma<true, EPI_OUT>, dim3(grid.x, 1, grid.z), dim3(256), 0, stream, jobs, 1, counters, fuse);
        return true;
    }
    static void preload();
};

/* The vectorised many-rows kernel in float32 where the launch's operands allow it (NNP_CUDA_BIG4=0
   turns it off for comparisons). */
static int big4_enabled(void) {
    static int enabled = -1;
    if (enabled < 0) enabled = !(getenv("NNP_CUDA_BIG4") && atoi(getenv("NNP_CUDA_BIG4")) == 0);
    return enabled;
}
template <typename real> struct BigGemm4 {
    template <bool TRANS_B, int EPI> static bool run(const GemmJob<real>*, dim3, cudaStream_t, bool) { return false; }
    static void preload() {}
};
template <> struct BigGemm4<float> {
    template <bool TRANS_B, int EPI> static bool run(const GemmJob<float>* jobs, dim3 big, cudaStream_t stream, bool pdl) {
        if (!big4_enabled()) return false;
        launch_k(pdl, k_gemm_big4<TRANS_B, EPI>, big, dim3(256), 0, stream, jobs);
        return true;
    }
    static void preload();
};

/* ------------------------------------------------------------------ output layer */

#define OUTPUT_WARPS 8
/* One row of an output job (every thread of the block; one warp per member, in turn). */
template <typename real>
__device__ __forceinline__ void output_row(const OutputJob<real>& job, int row, int members, const int* __restrict__ all_row_atom,
                                           double scale, double* __restrict__ atom_energy, int with_forces) {
    __shared__ double s_e[NNP_MAX_MEMBERS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32, width = job.width;
    const real* y = job.Y + (size_t)row * job.ldy;
    for (int m = warp; m < members; m += nwarps) {
        const real* w = job.w_out + m * width;
        real partial = 0;
        for (int k = lane; k < width; k += 32) partial += w[k] * __ldcg(y + m * width + k);
        for (int off = 16; off > 0; off >>= 1) partial += __shfl_down_sync(0xffffffffu, partial, off);
        if (lane == 0) s_e[m] = scale * ((double)partial + (double)job.b_out[m]);
        if (with_forces)
            for (int k = lane; k < width; k += 32)
                job.delta[(size_t)row * job.ldy + m * width + k] = (real)scale * w[k] * celu_deriv_from_output(__ldcg(y + m * width + k));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double e = 0;
        for (int m = 0; m < members; m++) e += s_e[m];
        atom_energy[all_row_atom[job.row0 + row]] = e;
    }
}
template <typename real>
__global__ void __launch_bounds__(32 * OUTPUT_WARPS) k_output(const OutputJob<real>* __restrict__ jobs, int members, const int* __restrict__ all_row_atom,
                                                              double scale, double* __restrict__ atom_energy, int with_forces) {
    const OutputJob<real> job = jobs[blockIdx.y];
    pdl_start();
    const int row = blockIdx.x;
    if (row >= job.rows) return;
    output_row<real>(job, row, members, all_row_atom, scale, atom_energy, with_forces);
}

/* ------------------------------------------------------------------ per-batch reduction */

/*
 * The end of an evaluation, in one block: per-batch energies (one warp per batch, atoms in batch
 * order, a fixed reduction tree), their total (fixed order) added to the caller's energy (float or
 * double), then the evaluation's flags. Run by k_finish, or, for few atoms, by an extra first block
 * of k_aev_backward (nothing there depends on the forces, and one launch fewer is one dependency
 * fewer in the step). The flags go to the host's mapped copy only when one is raised: a write into
 * host memory would make every step wait for it at the kernel's end, and a raised flag stays there
 * until the host has read it (check_flags).
 */
struct Finish {
    double* atom_energy;
    const double* self_energy;
    const int* batch_start;
    const int* batch_atoms;
    double* batch_energy;
    void* energy;     /* the caller's energy, or NULL */
    double* total;
    int* flags;       /* device: NaN atom, overflow, same position (cleared here) */
    int* host_flags;  /* mapped pinned memory: what the host reads at its next evaluation */
    double unit;
    int n_atoms, n_batches, energy_is_double;
    /* With the output layer fused (OutFuse; else out_partial is NULL): the atoms' energies are
       first added up here from its partial sums, per element (out_jobs) and row. */
    const OutputJob<float>* out_jobs;
    const float* out_partial;
    const int* row_atom;
    double out_scale;
    int n_out_jobs, members, out_tiles; /* out_tiles: the fused launch's gridDim.x */
};
#define FINISH_SMALL 256 /* up to this many atoms and fused output rows: finish_small */

/* Energy of row `row` of fused output job o: the tiles' partial sums, then the members, in order. */
__device__ __forceinline__ double fused_row_energy(const Finish& f, const OutputJob<float>& o, int job, int row) {
    const int tiles = (o.width + GEMM_TILE - 1) / GEMM_TILE;
    double e = 0;
    for (int m0 = 0; m0 < f.members; m0 += 8) { /* 8 members' loads in flight at once */
        float sum[8];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            sum[i] = 0.f;
            if (m0 + i >= f.members) continue;
            const float* p = f.out_partial + ((size_t)(job * f.members + m0 + i) * f.out_tiles) * 16 + row;
#pragma unroll
            for (int x = 0; x < 4; x++)
                if (x < tiles) sum[i] += __ldcg(p + x * 16);
            for (int x = 4; x < tiles; x++) sum[i] += __ldcg(p + x * 16);
        }
        for (int i = 0; i < 8 && m0 + i < f.members; i++) e += f.out_scale * ((double)sum[i] + (double)o.b_out[m0 + i]);
    }
    return e;
}

/* The total of the batch energies `batch` (global or shared memory, written before a barrier), the
   caller's energy and the flags (thread 0). */
__device__ void finish_total(const Finish& f, const double* batch) {
    __shared__ double s_warp[32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
    double sum = 0;
    for (int b = threadIdx.x; b < f.n_batches; b += blockDim.x) sum += batch[b];
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, off);
    if (lane == 0) s_warp[warp] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0;
        for (int w = 0; w < nwarps; w++) total += s_warp[w];
        *f.total = total;
        if (f.energy != NULL) {
            if (f.energy_is_double) *(double*)f.energy += total;
            else *(float*)f.energy += (float)total;
        }
        int* flags = f.flags;
        volatile int* host = f.host_flags;
        const int nan_atom = flags[0], overflow = flags[1], same = flags[2];
        if (nan_atom != 0x7fffffff) host[0] = nan_atom, flags[0] = 0x7fffffff;
        if (overflow != 0) host[1] = overflow, flags[1] = 0;
        if (same != 0) host[2] = same, flags[2] = 0;
        if (!isfinite(total)) host[3] = 1;
    }
}

/* Few atoms with the output layer fused (at most FINISH_SMALL atoms and batches, empty ones
   included, and out_jobs × 16 rows at most blockDim.x): the batch layout and each thread's row requested before the wait, the atoms' and
   batches' energies kept in shared memory. The same sums in the same order as finish_evaluation's. */
__device__ void finish_small(const Finish& f) {
    __shared__ double s_e[FINISH_SMALL], s_batch[FINISH_SMALL]; /* atom energy + self energy; batch energies */
    __shared__ int s_start[FINISH_SMALL + 1], s_atom[FINISH_SMALL];
    const int t = threadIdx.x, warp = t / 32, lane = t % 32, nwarps = blockDim.x / 32, job = t / 16, row = t % 16;
    for (int b = t; b <= f.n_batches; b += blockDim.x) s_start[b] = f.batch_start[b];
    for (int q = t; q < f.n_atoms; q += blockDim.x) s_atom[q] = f.batch_atoms[q];
    OutputJob<float> o = {};
    int atom = -1;
    double self = 0;
    if (job < f.n_out_jobs) {
        o = f.out_jobs[job];
        if (row < o.rows) atom = f.row_atom[o.row0 + row], self = f.self_energy[atom];
    }
    pdl_start();
    if (atom >= 0) {
        const double e = fused_row_energy(f, o, job, row);
        f.atom_energy[atom] = e;
        s_e[atom] = e + self;
    }
    __syncthreads();
    for (int b = warp; b < f.n_batches; b += nwarps) {
        double sum = 0;
        for (int q = s_start[b] + lane; q < s_start[b + 1]; q += 32) sum += s_e[s_atom[q]];
        for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, off);
        if (lane == 0) f.batch_energy[b] = s_batch[b] = sum * f.unit;
    }
    __syncthreads();
    finish_total(f, s_batch);
}

__device__ void finish_evaluation(const Finish& f) {
    if (f.out_partial != NULL && f.n_atoms <= FINISH_SMALL && f.n_batches <= FINISH_SMALL &&
        f.n_out_jobs * 16 <= min((int)blockDim.x, FINISH_SMALL)) {
        finish_small(f);
        return;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
    pdl_start();
    if (f.out_partial != NULL) {
        for (int q = threadIdx.x; q < f.n_out_jobs * 16; q += blockDim.x) {
            const OutputJob<float>& o = f.out_jobs[q / 16];
            const int row = q % 16;
            if (row >= o.rows) continue;
            f.atom_energy[f.row_atom[o.row0 + row]] = fused_row_energy(f, o, q / 16, row);
        }
        __syncthreads();
    }
    for (int b = warp; b < f.n_batches; b += nwarps) {
        double sum = 0;
        for (int q = f.batch_start[b] + lane; q < f.batch_start[b + 1]; q += 32) {
            int a = f.batch_atoms[q];
            sum += f.atom_energy[a] + f.self_energy[a];
        }
        for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, off);
        if (lane == 0) f.batch_energy[b] = sum * f.unit;
    }
    __syncthreads();
    finish_total(f, f.batch_energy);
}
/* ------------------------------------------------------------------ AEV backward */

/*
 * Forces from dE/dAEV, one block per atom (SPLIT: each atom over gridDim.y blocks). Contributions go
 * to the fixed-point force buffer (index force_index[atom] of component c at c·stride), in units of
 * `unit` per Hartree/Å; fixed point makes the sums independent of the order of the additions, and
 * each contribution is formed the same way on every run, so the result is deterministic.
 * Radial: one thread per neighbour. Angular: one thread per pair doing its terms in order; or, with
 * SPLIT (few atoms, where one block per atom would leave most of the GPU idle; needs lanes_over_shfz),
 * 32 / nShfZ pairs per warp and the lanes over ShfZ, the three derivative sums added by a butterfly.
 */
template <typename real, bool SPLIT>
__global__ void __launch_bounds__(AEV_THREADS) k_aev_backward(const AevParams<real>* __restrict__ params, const int* __restrict__ row_atom, int capacity,
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
    if (SPLIT) { /* (the host splits only where lanes_over_shfz) */
        const int nz = P.nShfZ;
        /* Lane (slot, sz): pair slot `slot` of the warp's 32 / nShfZ pairs, the terms of ShfZ[sz] (one
           power per Zeta, one exponential per outer index), then the sums over sz by a butterfly inside
           the slot's lanes; lanes sz < 3 add component sz of the pair's forces. */
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
        const int ps = 32 / nz, slot = lane / nz, sz = lane % nz;
        const real cosZ = P.cosShfZ[sz], sinZ = P.sinShfZ[sz];
        const int n_pairs = na * (na - 1) / 2, step = slices * nwarps * ps;
        double f_center = 0; /* lanes sz < 3: component sz of the central atom's angular part */
        int e = (slice * nwarps + warp) * ps + slot, p = 0, rem = e;
        while (p < na - 1 && rem >= na - 1 - p) rem -= na - 1 - p, p++;
        for (; e - slot < n_pairs; e += step) { /* warp-uniform: every lane takes part in the butterflies */
            const bool valid = e < n_pairs;
            const int ja = valid ? s_ang[p] : 0, ka = valid ? s_ang[p + 1 + rem] : 0;
            const typename real4_of<real>::type u = s_vec[ja], v = s_vec[ka];
            const real dj = u.w, dk = v.w, denom = fmax(dj * dk, (real)1e-10);
            const real c = (u.x * v.x + u.y * v.y + u.z * v.z) / denom;
            const real ct = (real)0.95 * c, st = dsqrt((real)1 - ct * ct); /* cos θ, sin θ (θ = acos(0.95 c)) */
            real s_theta = 0, s_dj = 0, s_dk = 0;
            const int col = valid ? P.angular_at[P.pair_index[s_el[ja] * NNP_MAX_ELEMENTS + s_el[ka]]] : -1;
            if (col >= 0) { /* live by construction (see live_blocks) */
                const real fj = s_cut[ja].z, fk = s_cut[ka].z, dfj = s_cut[ja].w, dfk = s_cut[ka].w, avg = (real)0.5 * (dj + dk);
                const real base = (real)0.5 * ((real)1 + ct * cosZ + st * sinZ); /* ½(1 + cos(θ − ShfZ)) */
                const real dbase = (real)-0.5 * (st * cosZ - ct * sinZ);       /* −½ sin(θ − ShfZ) */
                const real* gz = g + col + sz;
                for (int ea = 0, o = 0; ea < P.nEtaA; ea++)
                    for (int z = 0; z < P.nZeta; z++) {
                        const real zeta = P.Zeta[z], f1 = dpow(base, zeta);
                        const real df1 = zeta * (base > (real)0 ? f1 / base : dpow(base, zeta - (real)1)) * dbase;
                        for (int sa = 0; sa < P.nShfA; sa++, o++) {
                            const real w = gz[o * nz], x = avg - P.ShfA[sa];
                            const real f2 = dexp(-P.EtaA[ea] * x * x), df2 = f2 * ((real)-2 * P.EtaA[ea] * x) * (real)0.5;
                            s_theta += w * (real)2 * df1 * f2 * fj * fk;
                            s_dj += w * (real)2 * f1 * (df2 * fj * fk + f2 * dfj * fk);
                            s_dk += w * (real)2 * f1 * (df2 * fj * fk + f2 * fj * dfk);
                        }
                    }
            }
            for (int off = nz / 2; off > 0; off >>= 1) {
                s_theta += __shfl_xor_sync(0xffffffffu, s_theta, off);
                s_dj += __shfl_xor_sync(0xffffffffu, s_dj, off);
                s_dk += __shfl_xor_sync(0xffffffffu, s_dk, off);
            }
            if (valid && sz < 3) {
                const real s_c = s_theta * ((real)-0.95 / st);
                const real uk = sz == 0 ? u.x : sz == 1 ? u.y : u.z, vk = sz == 0 ? v.x : sz == 1 ? v.y : v.z;
                const real dc_du = vk / denom - c * uk / (dj * dj), dc_dv = uk / denom - c * vk / (dk * dk);
                const double gu = (double)(s_dj * uk / dj + s_c * dc_du), gv = (double)(s_dk * vk / dk + s_c * dc_dv);
                add_fixed(&forces[s_fidx[ja] + sz * stride], -gu * unit);
                add_fixed(&forces[s_fidx[ka] + sz * stride], -gv * unit);
                f_center += gu + gv;
            }
            rem += step;
            while (p < na - 1 && rem >= na - 1 - p) rem -= na - 1 - p, p++;
        }
        if (sz < 3) fsum[0] += sz == 0 ? f_center : 0, fsum[1] += sz == 1 ? f_center : 0, fsum[2] += sz == 2 ? f_center : 0;
    } else {
        int n_pairs = na * (na - 1) / 2;
        for (int pq = threadIdx.x; pq < n_pairs; pq += blockDim.x) { /* one thread per pair: its 32 terms in order */
            /* Decode pq into p < q over the angular list (row-major upper triangle). */
            int p = 0, rem = pq;
            while (rem >= na - 1 - p) rem -= na - 1 - p, p++;
            int q = p + 1 + rem;
            int ja = s_ang[p], ka = s_ang[q];
            typename real4_of<real>::type u = s_vec[ja], v = s_vec[ka];
            real dj = u.w, dk = v.w;
            real denom = fmax(dj * dk, (real)1e-10);
            real c = (u.x * v.x + u.y * v.y + u.z * v.z) / denom;
            real ct = (real)0.95 * c, st = dsqrt((real)1 - ct * ct); /* cos θ, sin θ (θ = acos(0.95 c)) */
            real fj = s_cut[ja].z, fk = s_cut[ka].z, dfj = s_cut[ja].w, dfk = s_cut[ka].w;
            real avg = (real)0.5 * (dj + dk);
            const real* ga = g + P.angular_at[P.pair_index[s_el[ja] * NNP_MAX_ELEMENTS + s_el[ka]]];
            real s_theta = 0, s_dj = 0, s_dk = 0;
            int t = 0;
            for (int ea = 0; ea < P.nEtaA; ea++)
                for (int z = 0; z < P.nZeta; z++)
                    for (int sa = 0; sa < P.nShfA; sa++) {
                        real x = avg - P.ShfA[sa];
                        real f2 = dexp(-P.EtaA[ea] * x * x);
                        real df2 = f2 * ((real)-2 * P.EtaA[ea] * x) * (real)0.5;
                        for (int sz = 0; sz < P.nShfZ; sz++, t++) {
                            const real cz = P.cosShfZ[sz], sz_ = P.sinShfZ[sz];
                            real base = (real)0.5 * ((real)1 + ct * cz + st * sz_); /* ½(1 + cos(θ − ShfZ)) */
                            real f1 = dpow(base, P.Zeta[z]);
                            real df1 = P.Zeta[z] * (base > (real)0 ? f1 / base : dpow(base, P.Zeta[z] - (real)1)) *
                                       ((real)-0.5 * (st * cz - ct * sz_)); /* −½ sin(θ − ShfZ) */
                            real w = ga[t];
                            s_theta += w * (real)2 * df1 * f2 * fj * fk;
                            s_dj += w * (real)2 * f1 * (df2 * fj * fk + f2 * dfj * fk);
                            s_dk += w * (real)2 * f1 * (df2 * fj * fk + f2 * fj * dfk);
                        }
                    }
            real s_c = s_theta * ((real)-0.95 / st);
            real uu[3] = {u.x, u.y, u.z}, vv[3] = {v.x, v.y, v.z};
            int fjx = s_fidx[ja], fkx = s_fidx[ka];
            for (int k = 0; k < 3; k++) {
                real dc_du = vv[k] / denom - c * uu[k] / (dj * dj);
                real dc_dv = uu[k] / denom - c * vv[k] / (dk * dk);
                double gu = (double)(s_dj * uu[k] / dj + s_c * dc_du);
                double gv = (double)(s_dk * vv[k] / dk + s_c * dc_dv);
                add_fixed(&forces[fjx + k * stride], -gu * unit);
                add_fixed(&forces[fkx + k * stride], -gv * unit);
                fsum[k] += gu + gv;
            }
        }
    }
    for (int c = 0; c < 3; c++)
        if (fsum[c] != 0) add_fixed(&forces[fi + c * stride], fsum[c] * unit);
}

#define FINISH_THREADS 1024
__global__ void __launch_bounds__(FINISH_THREADS) k_finish(const Finish f) {
    finish_evaluation(f); /* waits for the earlier kernels */
}

/* Plain output: fixed-point [3][n] → n×3 doubles. The plan's own buffer uses 2^-48 steps
   (PLAIN_FIXED_EXTRA more than OpenMM's 2^-32), as Hartree/Å forces are small numbers. */
#define PLAIN_FIXED_EXTRA 65536.0
__global__ void k_fixed_to_xyz(const unsigned long long* __restrict__ fixed, int n, double* __restrict__ out) {
    pdl_start();
    int a = blockIdx.x * blockDim.x + threadIdx.x;
    if (a >= n) return;
    for (int c = 0; c < 3; c++)
        out[3 * a + c] = (double)(long long)fixed[a + (size_t)c * n] / ((double)0x100000000LL * PLAIN_FIXED_EXTRA);
}

/* ------------------------------------------------------------------ host side */

/* Driver API functions, found through the runtime (so libnnp needs no libcuda at load time and
   loads on machines without a GPU driver). */
typedef CUresult (*PFN_streamIsCapturing)(CUstream, CUstreamCaptureStatus*);
typedef CUresult (*PFN_ctxGetCurrent)(CUcontext*);
typedef CUresult (*PFN_ctxPushCurrent)(CUcontext);
typedef CUresult (*PFN_ctxPopCurrent)(CUcontext*);
static struct {
    int loaded;
    PFN_streamIsCapturing streamIsCapturing;
    PFN_ctxGetCurrent ctxGetCurrent;
    PFN_ctxPushCurrent ctxPushCurrent;
    PFN_ctxPopCurrent ctxPopCurrent;
} driver;

static nnp_status load_driver(void) {
    if (driver.loaded) return NNP_OK;
    struct { const char* name; void** fn; } fns[] = {{"cuStreamIsCapturing", (void**)&driver.streamIsCapturing},
                                                    {"cuCtxGetCurrent", (void**)&driver.ctxGetCurrent},
                                                    {"cuCtxPushCurrent", (void**)&driver.ctxPushCurrent},
                                                    {"cuCtxPopCurrent", (void**)&driver.ctxPopCurrent}};
    for (size_t k = 0; k < sizeof fns / sizeof fns[0]; k++) {
        cudaDriverEntryPointQueryResult found;
        cudaError_t err = cudaGetDriverEntryPointByVersion(fns[k].name, fns[k].fn, 12000, cudaEnableDefault, &found);
        if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || *fns[k].fn == NULL)
            return nnp_fail(NNP_ERR_CUDA, "the CUDA driver does not provide %s (%s)", fns[k].name,
                            err != cudaSuccess ? cudaGetErrorString(err) : "symbol not found");
    }
    driver.loaded = 1;
    return NNP_OK;
}

struct nnp_cuda_state {
    CUcontext context; /* where the memory lives */
    int precision;     /* NNP_PRECISION_* */
    int n_atoms, n_batches, n_particles, capacity, n_hidden, members, member, units;
    int evaluated;     /* one evaluation outside capture done with these buffers */
    /* per element: rows (atoms of that element, index order) and layer widths */
    int elem_rows[NNP_MAX_ELEMENTS], elem_row0[NNP_MAX_ELEMENTS];
    int width[NNP_MAX_ELEMENTS][NNP_MAX_LAYERS];
    size_t y_offset[NNP_MAX_LAYERS][NNP_MAX_ELEMENTS]; /* element block of hidden layer h (reals) */
    size_t w_offset[NNP_MAX_ELEMENTS][NNP_MAX_LAYERS + 1], b_offset[NNP_MAX_ELEMENTS][NNP_MAX_LAYERS + 1];
    size_t wh_offset[NNP_MAX_ELEMENTS][NNP_MAX_LAYERS][NNP_MAX_MEMBERS], bh_offset[NNP_MAX_ELEMENTS][NNP_MAX_LAYERS][NNP_MAX_MEMBERS];
    /* device memory */
    void* aev_params; /* AevParams<real> */
    void* out_jobs;   /* OutputJob<real>, one per element present */
    int n_out_jobs, max_rows;
    int fuse_output;   /* the output layer inside the last hidden layer's forward (OutFuse) */
    float* out_partial; /* OutFuse::partial */
    int *identity, *batch_start, *batch_atoms, *row_atom, *index_of, *force_index, *nbr_ang, *flags;
    int4 *row_info, *batch_entry; /* k_aev's search tables (FrontIn) */
    int4* defer_rows;             /* DeferredSum's rows, where bwd_defer */
    int bwd_defer;                /* the last backward GEMM's split-K parts added by the AEV backward */
    int mma_cluster;              /* k_gemm_mma's split-K parts added in thread-block clusters (cluster_fixup) */
    int2 *count, *nbr_info; /* neighbour tables (NbrTables) */
    void *nbr_vec, *nbr_cut, *aev, *daev, *weights;
    void* Y[NNP_MAX_LAYERS];
    void* D[NNP_MAX_LAYERS];
    double *atom_energy, *self_energy, *batch_energy, *total;
    unsigned long long* fixed;
    void* jobs; /* GEMM job tables */
    void* w16;  /* k_gemm_mma's weights as FP16 pairs (see MmaWeights) */
    int fwd_jobs[NNP_MAX_LAYERS], bwd_jobs[NNP_MAX_LAYERS];
    size_t fwd_job0[NNP_MAX_LAYERS], bwd_job0[NNP_MAX_LAYERS];
    dim3 fwd_grid[NNP_MAX_LAYERS], bwd_grid[NNP_MAX_LAYERS];
    int fwd_ksplit[NNP_MAX_LAYERS], bwd_ksplit[NNP_MAX_LAYERS];
    int fwd_mn[NNP_MAX_LAYERS], bwd_mn[NNP_MAX_LAYERS]; /* largest m·n of a launch's jobs */
    int fwd_m[NNP_MAX_LAYERS], bwd_m[NNP_MAX_LAYERS];
    int fwd_aligned[NNP_MAX_LAYERS], bwd_aligned[NNP_MAX_LAYERS]; /* operands 16-byte aligned (k_gemm_big4) */   /* largest m of a launch's jobs */
    void* partial;    /* split-K workspace, shared by the launches (they run in order) */
    int* counters;    /* split-K tile counters (zero between launches), shared likewise */
    int pdl; /* programmatic dependent launches (compute capability 9.0 or later; NNP_CUDA_PDL=0: off) */
    int aev_live, aev_angular0; /* stored AEV row length and first angular column (see aev_layout) */
    int n_classes, class_len[NNP_CUDA_MAX_CLASSES]; /* first-layer prefix of each class of batches */
    int class_rows[NNP_MAX_ELEMENTS][NNP_CUDA_MAX_CLASSES], class_row0[NNP_MAX_ELEMENTS][NNP_CUDA_MAX_CLASSES];
    int aev_acc_stride, aev_threads, aev_slices, bwd_slices; /* AEV kernels' shapes (see k_aev, k_aev_backward) */
    size_t aev_shmem, bwd_shmem;
    int* host_flags;     /* mapped pinned memory: flags raised since check_flags last read them (see Finish) */
    int* host_flags_dev; /* the same, as the device sees it */
    /* stage timing (NNP_CUDA_PROFILE=1, evaluations outside capture only) */
    cudaEvent_t events[NNP_CUDA_STAGES + 1];
    int profiling;
    double stage_us[NNP_CUDA_STAGES];
};

static const int FLAG_CLEAR[4] = {0x7fffffff, 0, 0, 0}; /* NaN atom (min), overflow (max), same position, non-finite energy */

static void free_state(nnp_cuda_state* s) {
    if (s == NULL) return;
    CUcontext previous = NULL;
    int pushed = s->context != NULL && driver.loaded && driver.ctxPushCurrent(s->context) == CUDA_SUCCESS;
    void* ptrs[] = {s->partial, s->counters, s->aev_params, s->out_jobs, s->row_info, s->batch_entry, s->defer_rows, s->identity, s->batch_start, s->batch_atoms, s->row_atom, s->index_of,
                    s->force_index, s->count, s->nbr_info, s->nbr_ang, s->nbr_cut, s->flags, s->nbr_vec, s->aev, s->daev, s->weights,
                    s->atom_energy, s->self_energy, s->batch_energy, s->total, s->fixed, s->jobs, s->out_partial, s->w16};
    for (size_t k = 0; k < sizeof ptrs / sizeof ptrs[0]; k++) cudaFree(ptrs[k]);
    for (int h = 0; h < NNP_MAX_LAYERS; h++) cudaFree(s->Y[h]), cudaFree(s->D[h]);
    if (s->host_flags) cudaFreeHost(s->host_flags);
    for (int k = 0; s->profiling && k <= NNP_CUDA_STAGES; k++) cudaEventDestroy(s->events[k]);
    if (pushed) driver.ctxPopCurrent(&previous);
    free(s);
}

extern "C" void nnp_cuda_release(nnp_plan* plan) {
    free_state((nnp_cuda_state*)plan->cuda);
    plan->cuda = NULL;
}

extern "C" int nnp_cuda_available(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

/*
 * Loads every kernel now (module loading is not allowed while capturing) and sets each one's
 * shared-memory carveout to what its resident blocks need, leaving the rest of the SM's memory to
 * L1: the context may prefer shared memory (OpenMM's does), which costs the GEMMs about a third of
 * their speed through L1 misses. Kernels with more than 48 KB of shared memory, static and dynamic
 * together, get their dynamic part allowed here.
 */
template <typename K> static void configure_kernel(K* kernel, int threads, size_t dynamic_smem) {
    cudaFuncAttributes a;
    if (cudaFuncGetAttributes(&a, kernel) != cudaSuccess) return;
    /* Static and dynamic together count against the 48 KB a launch gets without opting in. */
    if (a.sharedSizeBytes + dynamic_smem > 48 * 1024)
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dynamic_smem);
    int device = 0, smem_sm = 0, regs_sm = 0, threads_sm = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
    cudaDeviceGetAttribute(&regs_sm, cudaDevAttrMaxRegistersPerMultiprocessor, device);
    cudaDeviceGetAttribute(&threads_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device);
    if (smem_sm <= 0 || regs_sm <= 0 || threads_sm <= 0) return;
    const int warps = (threads + 31) / 32, regs_per_warp = (max(a.numRegs, 1) * 32 + 255) / 256 * 256;
    const int blocks = max(1, min(min(regs_sm / (regs_per_warp * warps), threads_sm / (warps * 32)), 32));
    const size_t need = (size_t)blocks * (a.sharedSizeBytes + dynamic_smem + 1024);
    int percent = (int)min((size_t)100, (need * 100 + smem_sm - 1) / smem_sm);
    if (getenv("NNP_CUDA_CARVEOUT")) percent = atoi(getenv("NNP_CUDA_CARVEOUT")); /* one value for all (tuning) */
    cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent);
}

void BigGemm4<float>::preload() {
    configure_kernel(k_gemm_big4<true, EPI_BIAS_CELU>, 256, 0);
    configure_kernel(k_gemm_big4<false, EPI_DERIV>, 256, 0);
    configure_kernel(k_gemm_big4<false, EPI_NONE>, 256, 0);
}

template <int MR> static void preload_skinny() {
    configure_kernel(k_gemm_skinny<true, EPI_BIAS_CELU, MR>, 256, 0);
    configure_kernel(k_gemm_skinny<false, EPI_DERIV, MR>, 256, 0);
    configure_kernel(k_gemm_skinny<false, EPI_NONE, MR>, 256, 0);
}
void SkinnyGemm<float>::preload() {
    configure_kernel(k_gemm_mma<true, EPI_BIAS_CELU>, 256, 0);
    configure_kernel(k_gemm_mma<false, EPI_DERIV>, 256, 0);
    configure_kernel(k_gemm_mma<false, EPI_NONE>, 256, 0);
    configure_kernel(k_gemm_mma<true, EPI_OUT>, 256, 0);
    preload_skinny<SKINNY_M>();
}

template <typename real> static void preload(const nnp_cuda_state* s) {
    configure_kernel(k_inverse_order, 256, 0);
    configure_kernel(k_aev<real, false>, s->aev_threads, s->aev_shmem);
    configure_kernel(k_aev<real, true>, s->aev_threads, s->aev_shmem);
    configure_kernel(k_gemm<real, true, EPI_BIAS_CELU>, 256, 0);
    configure_kernel(k_gemm<real, false, EPI_DERIV>, 256, 0);
    configure_kernel(k_gemm<real, false, EPI_NONE>, 256, 0);
    configure_kernel(k_gemm_big<real, true, EPI_BIAS_CELU>, 256, 0);
    configure_kernel(k_gemm_big<real, false, EPI_DERIV>, 256, 0);
    configure_kernel(k_gemm_big<real, false, EPI_NONE>, 256, 0);
    configure_kernel(k_gemm_reduce<real, EPI_BIAS_CELU>, 256, 0);
    configure_kernel(k_gemm_reduce<real, EPI_DERIV>, 256, 0);
    configure_kernel(k_gemm_reduce<real, EPI_NONE>, 256, 0);
    configure_kernel(k_output<real>, 32 * OUTPUT_WARPS, 0);
    configure_kernel(k_aev_backward<real, false>, BWD_THREADS, s->bwd_shmem);
    configure_kernel(k_aev_backward<real, true>, AEV_THREADS, s->bwd_shmem);
    configure_kernel(k_finish, FINISH_THREADS, 0);
    configure_kernel(k_fixed_to_xyz, 128, 0);
    SkinnyGemm<real>::preload();
    BigGemm4<real>::preload();
}

/*
 * The stored AEV layout. Neighbours are atoms of the same batch, so in a batch the radial block of
 * element a can be non-zero only if the batch holds an atom of a, and the angular block of the
 * pair (a, b) only if it holds an a and a b (two a's when a = b). Blocks that no batch can fill are
 * zero for every atom: they are not stored, and the first layer's weights keep only the stored
 * columns, which removes their share of the two largest matrix products (62% of the first layer
 * for molecules of H, C, N and O under ANI-2x) without changing any sum's non-zero terms.
 *
 * Stored order: the live radial blocks (model order), then the live angular blocks, those that
 * more atoms need first. Each batch then needs a prefix of the stored row (up to its last live
 * block); the batches are grouped into at most `max_classes` classes of prefix lengths (chosen to
 * minimise rows × length, with a 64-row allowance per class and element for partly filled tiles),
 * and each class's rows multiply only their prefix in the first layer (forward and backward). The
 * columns past a row's prefix are zero for that atom (forward) and never read (backward).
 *
 * Fills radial_at / angular_at (stored column of each block, or -1), live_feature (model feature
 * of each stored column), class_len (prefix of each class, ascending) and batch_class; returns the
 * stored length. NNP_CUDA_COMPACT=0 stores every block in one class (for comparisons).
 */
/* Batch b's element counts and the angular blocks it can fill (pairs[p] = 1). */
static void batch_blocks(const nnp_plan* plan, int b, int keep_all, int* cnt, int* pairs) {
    const nnp_model* m = plan->model;
    const int E = m->n_elements;
    memset(cnt, 0, sizeof(int) * NNP_MAX_ELEMENTS);
    memset(pairs, 0, sizeof(int) * NNP_MAX_PAIRS);
    for (int q = plan->batch_start[b]; q < plan->batch_start[b + 1]; q++) cnt[plan->elements[plan->order[q]]]++;
    for (int a = 0; a < E; a++)
        for (int c = 0; c < E; c++)
            if (keep_all || (cnt[a] > 0 && cnt[c] > (a == c))) pairs[m->pair_index[a][c]] = 1;
}

static int aev_layout(const nnp_plan* plan, int max_classes, int* radial_at, int* angular_at, int* live_feature, int* angular0,
                      int* n_classes, int* class_len, int* batch_class) {
    const nnp_model* m = plan->model;
    const int E = m->n_elements, NB = plan->n_batches;
    const int n_pairs = (m->aev_length - m->radial_length) / m->angular_sub;
    const int keep_all = getenv("NNP_CUDA_COMPACT") && atoi(getenv("NNP_CUDA_COMPACT")) == 0;
    int radial_live[NNP_MAX_ELEMENTS] = {0};
    double pair_weight[NNP_MAX_PAIRS] = {0}; /* atoms whose batch can fill the pair's block */
    int cnt[NNP_MAX_ELEMENTS], pairs[NNP_MAX_PAIRS];
    for (int b = 0; b < NB; b++) { /* (recomputed per batch below rather than stored: batches may be many) */
        batch_blocks(plan, b, keep_all, cnt, pairs);
        const int atoms = plan->batch_start[b + 1] - plan->batch_start[b];
        for (int a = 0; a < E; a++)
            if (cnt[a] > 0) radial_live[a] = 1;
        for (int p = 0; p < n_pairs; p++)
            if (pairs[p]) pair_weight[p] += atoms;
    }
    int length = 0;
    for (int a = 0; a < E; a++) {
        if (keep_all) radial_live[a] = 1;
        radial_at[a] = radial_live[a] ? length : -1;
        for (int t = 0; radial_live[a] && t < m->radial_sub; t++) live_feature[length++] = a * m->radial_sub + t;
    }
    if (length == 0) { /* no atoms: one block stored, so that no product is empty */
        radial_at[0] = 0;
        for (int t = 0; t < m->radial_sub; t++) live_feature[length++] = t;
    }
    *angular0 = length;
    /* angular blocks by weight (descending), ties in model order; dead ones (weight 0) not stored */
    int order[NNP_MAX_PAIRS], n_live = 0;
    for (int p = 0; p < n_pairs; p++) {
        angular_at[p] = -1;
        if (pair_weight[p] > 0 || keep_all) order[n_live++] = p;
    }
    for (int i = 1; i < n_live; i++) /* stable insertion sort */
        for (int j = i; j > 0 && pair_weight[order[j]] > pair_weight[order[j - 1]]; j--) {
            int tmp = order[j];
            order[j] = order[j - 1], order[j - 1] = tmp;
        }
    for (int i = 0; i < n_live; i++) {
        angular_at[order[i]] = length;
        for (int t = 0; t < m->angular_sub; t++) live_feature[length++] = m->radial_length + order[i] * m->angular_sub + t;
    }
    /* each batch's prefix, then the classes (dynamic programming over the distinct prefixes) */
    int* prefix = (int*)malloc(sizeof(int) * (NB + 1));
    int distinct[NNP_MAX_PAIRS + 2], n_distinct = 0;
    double atoms_at[NNP_MAX_PAIRS + 2] = {0};
    for (int b = 0; b < NB; b++) {
        batch_blocks(plan, b, keep_all, cnt, pairs);
        int end = *angular0;
        for (int p = 0; p < n_pairs; p++)
            if (pairs[p] && angular_at[p] + m->angular_sub > end) end = angular_at[p] + m->angular_sub;
        prefix[b] = end;
        int k = 0;
        while (k < n_distinct && distinct[k] != end) k++;
        if (k == n_distinct) distinct[n_distinct++] = end;
        atoms_at[k] += plan->batch_start[b + 1] - plan->batch_start[b];
    }
    if (n_distinct == 0) distinct[n_distinct++] = length;
    for (int i = 1; i < n_distinct; i++) /* ascending, with their atom counts */
        for (int j = i; j > 0 && distinct[j] < distinct[j - 1]; j--) {
            int t = distinct[j];
            distinct[j] = distinct[j - 1], distinct[j - 1] = t;
            double w = atoms_at[j];
            atoms_at[j] = atoms_at[j - 1], atoms_at[j - 1] = w;
        }
    int K = max_classes < 1 ? 1 : max_classes > NNP_CUDA_MAX_CLASSES ? NNP_CUDA_MAX_CLASSES : max_classes;
    if (K > n_distinct) K = n_distinct;
    /* cost[i][k]: the first i prefixes in k classes, the last one ending at distinct[i-1] */
    double cost[NNP_MAX_PAIRS + 3][NNP_CUDA_MAX_CLASSES + 1];
    int from[NNP_MAX_PAIRS + 3][NNP_CUDA_MAX_CLASSES + 1];
    double allowance = 64.0; /* rows per class and element (NNP_CUDA_CLASS_ROWS overrides: tests, tuning) */
    if (getenv("NNP_CUDA_CLASS_ROWS")) allowance = atof(getenv("NNP_CUDA_CLASS_ROWS"));
    allowance *= E;
    for (int i = 0; i <= n_distinct; i++)
        for (int k = 0; k <= K; k++) cost[i][k] = i == 0 && k == 0 ? 0 : 1e300;
    for (int i = 1; i <= n_distinct; i++)
        for (int k = 1; k <= K; k++)
            for (int j = i - 1; j >= 0; j--) {
                double rows = 0;
                for (int t = j; t < i; t++) rows += atoms_at[t];
                const double c = cost[j][k - 1] + (double)distinct[i - 1] * (rows + allowance);
                if (c < cost[i][k]) cost[i][k] = c, from[i][k] = j;
            }
    int best_k = 1;
    for (int k = 2; k <= K; k++)
        if (cost[n_distinct][k] < cost[n_distinct][best_k]) best_k = k;
    *n_classes = best_k;
    for (int i = n_distinct, k = best_k; k > 0; i = from[i][k], k--) class_len[k - 1] = distinct[i - 1];
    for (int b = 0; b < NB; b++) {
        int c = 0;
        while (class_len[c] < prefix[b]) c++;
        batch_class[b] = c;
    }
    free(prefix);
    return length;
}

template <typename real>
static AevParams<real> aev_params(const nnp_model* m, const int* radial_at, const int* angular_at, int angular0) {
    AevParams<real> P;
    memset(&P, 0, sizeof P);
    const nnp_aev_params* p = &m->aev;
    P.Rcr = (real)p->Rcr, P.Rca = (real)p->Rca;
    P.nEtaR = p->nEtaR, P.nShfR = p->nShfR, P.nEtaA = p->nEtaA, P.nZeta = p->nZeta, P.nShfA = p->nShfA, P.nShfZ = p->nShfZ;
    for (int k = 0; k < p->nEtaR; k++) P.EtaR[k] = (real)p->EtaR[k];
    for (int k = 0; k < p->nShfR; k++) P.ShfR[k] = (real)p->ShfR[k];
    for (int k = 0; k < p->nEtaA; k++) P.EtaA[k] = (real)p->EtaA[k];
    for (int k = 0; k < p->nZeta; k++) P.Zeta[k] = (real)p->Zeta[k];
    for (int k = 0; k < p->nShfA; k++) P.ShfA[k] = (real)p->ShfA[k];
    for (int k = 0; k < p->nShfZ; k++) P.ShfZ[k] = (real)p->ShfZ[k];
    for (int k = 0; k < p->nShfZ; k++) P.cosShfZ[k] = (real)cos(p->ShfZ[k]), P.sinShfZ[k] = (real)sin(p->ShfZ[k]);
    P.n_elements = m->n_elements, P.radial_sub = m->radial_sub, P.angular_sub = m->angular_sub;
    P.radial_length = m->radial_length, P.aev_length = m->aev_length;
    for (int a = 0; a < m->n_elements; a++)
        for (int b = 0; b < m->n_elements; b++) P.pair_index[a * NNP_MAX_ELEMENTS + b] = m->pair_index[a][b];
    P.angular0 = angular0;
    for (int a = 0; a < NNP_MAX_ELEMENTS; a++) P.radial_at[a] = a < m->n_elements ? radial_at[a] : -1;
    for (int p = 0; p < NNP_MAX_PAIRS; p++) P.angular_at[p] = p < (m->aev_length - m->radial_length) / m->angular_sub ? angular_at[p] : -1;
    return P;
}


/* Whether the few-atom AEV kernels can put the ShfZ terms on lanes (aev_angular_sliced and the split
   k_aev_backward): nShfZ a divisor of 32 (at least 3: lanes 0-2 of each pair add the force
   components) and of angular_sub. ANI-1x and ANI-2x have 8 and 4. */
static bool lanes_over_shfz(const nnp_model* m) {
    const int nz = m->aev.nShfZ;
    return nz >= 3 && nz <= 32 && 32 % nz == 0 && m->angular_sub % nz == 0;
}

/* Builds every buffer for the plan's current atoms, member, units and precision (outside capture). */
template <typename real> static nnp_status build_state(nnp_plan* plan, nnp_cuda_state* s, int n_particles) {
    const nnp_model* m = plan->model;
    int n = plan->n_atoms, E = m->n_elements;
    s->precision = plan->cuda_precision;
    s->n_atoms = n, s->n_batches = plan->n_batches, s->n_particles = n_particles, s->member = plan->member;
    s->units = plan->units;
    s->members = plan->member < 0 ? m->n_members : 1;
    if (m->aev.nEtaR > 8 || m->aev.nEtaA > 8 || m->aev.nZeta > 8)
        return nnp_fail(NNP_ERR_UNSUPPORTED, "CUDA evaluation supports at most 8 EtaR, EtaA and Zeta values");
    /* Network shapes: the same layer count everywhere, the same widths for all members of an element. */
    s->n_hidden = m->networks[0].n_layers - 1;
    for (int i = 0; i < m->n_members * E; i++)
        if (m->networks[i].n_layers != s->n_hidden + 1 || s->n_hidden < 1)
            return nnp_fail(NNP_ERR_UNSUPPORTED, "CUDA evaluation needs the same number (>= 2) of layers in every network");
    for (int e = 0; e < E; e++)
        for (int h = 0; h <= s->n_hidden; h++) {
            s->width[e][h] = m->networks[e].layers[h].n_out;
            for (int mm = 0; mm < m->n_members; mm++)
                if (m->networks[mm * E + e].layers[h].n_out != s->width[e][h])
                    return nnp_fail(NNP_ERR_UNSUPPORTED, "CUDA evaluation needs equal layer widths in every member");
        }
    /* The stored AEV (A = its length, columns live_feature) and the batches' classes of prefixes. */
    int radial_at[NNP_MAX_ELEMENTS], angular_at[NNP_MAX_PAIRS];
    int* live_feature = (int*)malloc(sizeof(int) * (m->aev_length + 1));
    int* batch_class = (int*)malloc(sizeof(int) * (plan->n_batches + 1));
    int max_classes = 4;
    if (getenv("NNP_CUDA_CLASSES")) max_classes = atoi(getenv("NNP_CUDA_CLASSES"));
    s->aev_live = aev_layout(plan, max_classes, radial_at, angular_at, live_feature, &s->aev_angular0, &s->n_classes,
                             s->class_len, batch_class);
    /* Rows: atoms by element, then class, index order within. */
    int* row_atom = (int*)malloc(sizeof(int) * (n + 1));
    int rows = 0;
    for (int e = 0; e < E; e++) {
        s->elem_row0[e] = rows;
        for (int c = 0; c < s->n_classes; c++) {
            s->class_row0[e][c] = rows;
            for (int i = 0; i < n; i++)
                if (plan->elements[i] == e && batch_class[plan->batches[i]] == c) row_atom[rows++] = i;
            s->class_rows[e][c] = rows - s->class_row0[e][c];
        }
        s->elem_rows[e] = rows - s->elem_row0[e];
    }
    /* Neighbour capacity: the largest batch bounds it exactly; very large batches are capped. */
    int largest = 0;
    for (int b = 0; b < plan->n_batches; b++)
        if (plan->batch_start[b + 1] - plan->batch_start[b] > largest) largest = plan->batch_start[b + 1] - plan->batch_start[b];
    s->capacity = largest - 1 < NNP_CUDA_MAX_NEIGHBORS ? (largest > 1 ? largest - 1 : 1) : NNP_CUDA_MAX_NEIGHBORS;

    int* atom_batch = plan->batches;
    double* self = (double*)malloc(sizeof(double) * (n + 1));
    int* particle = (int*)malloc(sizeof(int) * (n + 1));
    int* identity = (int*)malloc(sizeof(int) * (n + 1));
    for (int i = 0; i < n; i++) {
        identity[i] = i;
        self[i] = m->self_energies[plan->elements[i]];
        particle[i] = plan->particles ? plan->particles[i] : i;
    }
    /* Weights in `real`: per element, the first layer of all members stacked ([M·W0 × A] and
       [M·W0], the live columns only); deeper hidden layers per member; the output layer stacked ([M × W_last], [M]). */
    size_t total = 0;
    const int M = s->members, m0 = plan->member < 0 ? 0 : plan->member;
    for (int e = 0; e < E; e++) {
        s->w_offset[e][0] = total, total += (size_t)M * s->width[e][0] * s->aev_live;
        s->b_offset[e][0] = total, total += (size_t)M * s->width[e][0];
        for (int h = 1; h < s->n_hidden; h++)
            for (int mm = 0; mm < M; mm++) {
                s->wh_offset[e][h][mm] = total, total += (size_t)s->width[e][h] * s->width[e][h - 1];
                s->bh_offset[e][h][mm] = total, total += s->width[e][h];
            }
        s->w_offset[e][s->n_hidden] = total, total += (size_t)M * s->width[e][s->n_hidden - 1];
        s->b_offset[e][s->n_hidden] = total, total += M;
    }
    real* w = (real*)malloc(sizeof(real) * (total + 1));
    for (int e = 0; e < E; e++)
        for (int mm = 0; mm < M; mm++) {
            const nnp_network* net = &m->networks[(m0 + mm) * E + e];
            size_t W0 = s->width[e][0], A = s->aev_live, A_model = m->aev_length;
            for (size_t o = 0; o < W0; o++)
                for (size_t k = 0; k < A; k++)
                    w[s->w_offset[e][0] + mm * W0 * A + o * A + k] = (real)net->layers[0].weights[o * A_model + live_feature[k]];
            for (size_t k = 0; k < W0; k++) w[s->b_offset[e][0] + mm * W0 + k] = (real)net->layers[0].biases[k];
            for (int h = 1; h < s->n_hidden; h++) {
                size_t nw = (size_t)s->width[e][h] * s->width[e][h - 1];
                for (size_t k = 0; k < nw; k++) w[s->wh_offset[e][h][mm] + k] = (real)net->layers[h].weights[k];
                for (int k = 0; k < s->width[e][h]; k++) w[s->bh_offset[e][h][mm] + k] = (real)net->layers[h].biases[k];
            }
            int WL = s->width[e][s->n_hidden - 1];
            for (int k = 0; k < WL; k++) w[s->w_offset[e][s->n_hidden] + mm * WL + k] = (real)net->layers[s->n_hidden].weights[k];
            w[s->b_offset[e][s->n_hidden] + mm] = (real)net->layers[s->n_hidden].biases[0];
        }
    /* Activations: per hidden layer, element blocks of rows × M·width. */
    size_t ysize[NNP_MAX_LAYERS] = {0};
    for (int h = 0; h < s->n_hidden; h++)
        for (int e = 0; e < E; e++) {
            s->y_offset[h][e] = ysize[h];
            ysize[h] += (size_t)s->elem_rows[e] * M * s->width[e][h];
        }
    nnp_status st = NNP_OK;
    size_t A = s->aev_live, rs = sizeof(real), cap = s->capacity;
#define TRY_ALLOC(ptr, bytes)                                                                       \
    if (st == NNP_OK && cudaMalloc((void**)&(ptr), (bytes) > 0 ? (bytes) : 16) != cudaSuccess)     \
        st = nnp_fail(NNP_ERR_MEMORY, "cannot allocate %zu bytes of GPU memory (%s)", (size_t)(bytes), #ptr);
    TRY_ALLOC(s->row_info, sizeof(int4) * n);
    TRY_ALLOC(s->batch_entry, sizeof(int4) * n);
    TRY_ALLOC(s->identity, sizeof(int) * n);
    TRY_ALLOC(s->batch_start, sizeof(int) * (plan->n_batches + 1));
    TRY_ALLOC(s->batch_atoms, sizeof(int) * n);
    TRY_ALLOC(s->row_atom, sizeof(int) * n);
    TRY_ALLOC(s->index_of, sizeof(int) * (n_particles > 0 ? n_particles : 1));
    TRY_ALLOC(s->force_index, sizeof(int) * n);
    TRY_ALLOC(s->count, sizeof(int2) * n);
    TRY_ALLOC(s->nbr_info, sizeof(int2) * n * cap);
    TRY_ALLOC(s->nbr_ang, sizeof(int) * n * cap);
    TRY_ALLOC(s->nbr_cut, 4 * rs * n * cap);
    TRY_ALLOC(s->flags, sizeof(FLAG_CLEAR));
    TRY_ALLOC(s->nbr_vec, 4 * rs * n * cap);
    TRY_ALLOC(s->aev, rs * n * A);
    TRY_ALLOC(s->daev, rs * n * A);
    TRY_ALLOC(s->weights, rs * total);
    for (int h = 0; h < s->n_hidden; h++) {
        TRY_ALLOC(s->Y[h], rs * ysize[h]);
        TRY_ALLOC(s->D[h], rs * ysize[h]);
    }
    TRY_ALLOC(s->atom_energy, sizeof(double) * n);
    TRY_ALLOC(s->self_energy, sizeof(double) * n);
    TRY_ALLOC(s->batch_energy, sizeof(double) * (plan->n_batches + 1));
    TRY_ALLOC(s->total, sizeof(double));
    TRY_ALLOC(s->fixed, sizeof(unsigned long long) * 3 * n);
    if (st == NNP_OK && (cudaHostAlloc((void**)&s->host_flags, sizeof(FLAG_CLEAR), cudaHostAllocMapped) != cudaSuccess ||
                         cudaHostGetDevicePointer((void**)&s->host_flags_dev, s->host_flags, 0) != cudaSuccess))
        st = nnp_fail(NNP_ERR_MEMORY, "cannot allocate mapped pinned host memory");
    /* GEMM job tables: forward h (h = 0: per element, all members stacked; h >= 1: per element and
       member) and backward h (h >= 1: D[h-1] = (D[h] · W_h) ⊙ celu'(Y[h-1]); h = 0: dAEV). */
    GemmJob<real>* jobs = (GemmJob<real>*)calloc((size_t)2 * NNP_MAX_LAYERS * E * M + (size_t)2 * E * NNP_CUDA_MAX_CLASSES + 1, sizeof(GemmJob<real>));
    size_t nj = 0;
    real* W = (real*)s->weights;
    for (int h = 0; h < s->n_hidden; h++) {
        s->fwd_job0[h] = nj;
        int gx = 0, gy = 0, group = -1; /* group: the element's output job (elements present, in order) */
        for (int e = 0; e < E; e++) {
            int r = s->elem_rows[e];
            if (r == 0) continue;
            group++;
            int W1 = s->width[e][h];
            real* Yh = (real*)s->Y[h] + s->y_offset[h][e];
            if (h == 0) { /* one job per class: its rows' prefix of the stored AEV */
                for (int c = 0; c < s->n_classes; c++) {
                    const int rc = s->class_rows[e][c], off = s->class_row0[e][c] - s->elem_row0[e];
                    if (rc == 0) continue;
                    GemmJob<real> j = {(real*)s->aev + (size_t)s->class_row0[e][c] * A, W + s->w_offset[e][0], Yh + (size_t)off * M * W1,
                                       W + s->b_offset[e][0], NULL, rc, M * W1, s->class_len[c], (int)A, (int)A, M * W1, 0};
                    jobs[nj++] = j;
                }
                gx = max(gx, (M * W1 + GEMM_TILE - 1) / GEMM_TILE);
            } else {
                int W0 = s->width[e][h - 1];
                real* Yp = (real*)s->Y[h - 1] + s->y_offset[h - 1][e];
                for (int mm = 0; mm < M; mm++) {
                    GemmJob<real> j = {Yp + mm * W0, W + s->wh_offset[e][h][mm], Yh + mm * W1, W + s->bh_offset[e][h][mm],
                                       NULL, r, W1, W0, M * W0, W0, M * W1, 0};
                    j.group = group, j.member = mm; /* used by the fused output layer (last layer) */
                    jobs[nj++] = j;
                }
                gx = max(gx, (W1 + GEMM_TILE - 1) / GEMM_TILE);
            }
            gy = max(gy, (r + GEMM_TILE - 1) / GEMM_TILE);
        }
        s->fwd_jobs[h] = (int)(nj - s->fwd_job0[h]);
        s->fwd_grid[h] = dim3(gx, gy, s->fwd_jobs[h]);
    }
    for (int h = s->n_hidden - 1; h >= 0; h--) {
        s->bwd_job0[h] = nj;
        int gx = 0, gy = 0;
        for (int e = 0; e < E; e++) {
            int r = s->elem_rows[e];
            if (r == 0) continue;
            int W1 = s->width[e][h];
            real* Dh = (real*)s->D[h] + s->y_offset[h][e];
            if (h == 0) { /* one job per class: dE/dAEV over its rows' prefix */
                for (int c = 0; c < s->n_classes; c++) {
                    const int rc = s->class_rows[e][c], off = s->class_row0[e][c] - s->elem_row0[e];
                    if (rc == 0) continue;
                    GemmJob<real> j = {Dh + (size_t)off * M * W1, W + s->w_offset[e][0], (real*)s->daev + (size_t)s->class_row0[e][c] * A,
                                       NULL, NULL, rc, s->class_len[c], M * W1, M * W1, (int)A, (int)A, 0};
                    jobs[nj++] = j;
                    gx = max(gx, (s->class_len[c] + GEMM_TILE - 1) / GEMM_TILE);
                }
            } else {
                int W0 = s->width[e][h - 1];
                real* Dp = (real*)s->D[h - 1] + s->y_offset[h - 1][e];
                real* Yp = (real*)s->Y[h - 1] + s->y_offset[h - 1][e];
                for (int mm = 0; mm < M; mm++) {
                    GemmJob<real> j = {Dh + mm * W1, W + s->wh_offset[e][h][mm], Dp + mm * W0, NULL, Yp + mm * W0,
                                       r, W0, W1, M * W1, W0, M * W0, M * W0};
                    jobs[nj++] = j;
                }
                gx = max(gx, (W0 + GEMM_TILE - 1) / GEMM_TILE);
            }
            gy = max(gy, (r + GEMM_TILE - 1) / GEMM_TILE);
        }
        s->bwd_jobs[h] = (int)(nj - s->bwd_job0[h]);
        s->bwd_grid[h] = dim3(gx, gy, s->bwd_jobs[h]);
    }
    /* Split-K where the row counts are small: about split_k values of k per part (so each block
       walks only a few k-steps and many blocks keep loads in flight), at most split_max parts, and
       at most 2^24 partial sums per layer. NNP_CUDA_SPLIT_K / NNP_CUDA_SPLIT_MAX override (tuning). */
    /* Measured on the H200 (docs/benchmarks.md): 32 for k_gemm (of 128, 64, 32, 16), 64 for the
       few-rows kernel (of 32, 64), whose reduction then reads half the partial sums. */
    int split_k = 32, split_k_skinny = 256, split_max = 64;
    /* k_gemm_mma's split-K parts added through distributed shared memory, one tile's parts in a
       thread-block cluster (cluster_fixup), where the GPU launches clusters (NNP_CUDA_CLUSTER=0: by
       the last block of each tile, splitk_fixup; the same sums in the same order) */
    {
        int device = 0, clusters = 0;
        cudaGetDevice(&device);
        if (cudaDeviceGetAttribute(&clusters, cudaDevAttrClusterLaunch, device) != cudaSuccess) clusters = 0;
        s->mma_cluster = clusters && !(getenv("NNP_CUDA_CLUSTER") && atoi(getenv("NNP_CUDA_CLUSTER")) == 0);
    }
    if (getenv("NNP_CUDA_SPLIT_K")) split_k = split_k_skinny = max(GEMM_K, atoi(getenv("NNP_CUDA_SPLIT_K")));
    if (getenv("NNP_CUDA_SPLIT_MAX")) split_max = max(1, atoi(getenv("NNP_CUDA_SPLIT_MAX")));
    size_t partial_size = 0, n_counters = 1;
    size_t* partial_at = (size_t*)malloc(sizeof(size_t) * (nj + 1));
    for (size_t j = 0; j < nj; j++) partial_at[j] = (size_t)-1;
    for (int pass = 0; pass < 2; pass++)
        for (int h = 0; h < s->n_hidden; h++) {
            size_t j0 = pass ? s->bwd_job0[h] : s->fwd_job0[h];
            int count = pass ? s->bwd_jobs[h] : s->fwd_jobs[h];
            int max_m = 0, max_k = 0, max_mn = 0, aligned = 1;
            for (int j = 0; j < count; j++) {
                const GemmJob<real>& g = jobs[j0 + j];
                aligned &= (size_t)g.A % 16 == 0 && (size_t)g.B % 16 == 0 && g.lda % 4 == 0 && g.ldb % 4 == 0;
                max_m = max(max_m, jobs[j0 + j].m);
                max_k = max(max_k, jobs[j0 + j].k);
                max_mn = max(max_mn, jobs[j0 + j].m * jobs[j0 + j].n);
            }
            const bool skinny = sizeof(real) == 4 && max_m <= SKINNY_M && skinny_enabled();
            const int per_part = skinny ? split_k_skinny : split_k;
            /* the few-rows kernel works in chunks of SKINNY_K: parts of whole chunks where possible */
            int ksplit = max_m <= 256 ? max(1, min(split_max, skinny ? (max_k + per_part - 1) / per_part : max_k / per_part)) : 1;
            while (ksplit > 1 && (size_t)ksplit * max_mn * count > ((size_t)1 << 24)) ksplit /= 2;
            size_t offset = 0;
            for (int j = 0; ksplit > 1 && j < count; j++) {
                partial_at[j0 + j] = offset;
                offset += (size_t)ksplit * jobs[j0 + j].m * jobs[j0 + j].n;
            }
            partial_size = offset > partial_size ? offset : partial_size;
            (pass ? s->bwd_ksplit : s->fwd_ksplit)[h] = ksplit;
            (pass ? s->bwd_mn : s->fwd_mn)[h] = max_mn;
            (pass ? s->bwd_m : s->fwd_m)[h] = max_m;
            (pass ? s->bwd_aligned : s->fwd_aligned)[h] = aligned;
            dim3& grid = (pass ? s->bwd_grid : s->fwd_grid)[h];
            grid.z = count * ksplit;
            n_counters = max(n_counters, (size_t)count * grid.x * grid.y);
        }
    TRY_ALLOC(s->partial, sizeof(real) * partial_size);
    TRY_ALLOC(s->counters, sizeof(int) * n_counters);
    if (st == NNP_OK && cudaMemset(s->counters, 0, sizeof(int) * n_counters) != cudaSuccess)
        st = nnp_fail(NNP_ERR_CUDA, "clearing GPU memory failed");
    /* AEV kernels: the pair-parallel angular path where its per-warp accumulators fit in shared
       memory, with 1024 threads per atom when there are fewer atoms than SMs (256 otherwise);
       few atoms are spread over several blocks each in the backward pass (about 4 blocks per SM in
       all, at most 16 per atom). */
    {
        int device = 0, sms = 1, optin = 48 * 1024;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
        const size_t base = aev_smem_base(s->capacity, sizeof(real));
        const int stride = s->aev_live - s->aev_angular0; /* live angular features */
        const size_t static_smem = sizeof(AevParams<real>) + 1024;
        int major = 0;
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
        s->pdl = major >= 9 && !(getenv("NNP_CUDA_PDL") && atoi(getenv("NNP_CUDA_PDL")) == 0);
        s->aev_threads = n < sms ? AEV_MAX_THREADS : AEV_THREADS;
        size_t acc = (size_t)(s->aev_threads / 32) * stride * sizeof(real);
        if (base + acc + static_smem > (size_t)optin && s->aev_threads > AEV_THREADS)
            s->aev_threads = AEV_THREADS, acc = (size_t)(AEV_THREADS / 32) * stride * sizeof(real);
        s->aev_acc_stride = m->angular_sub <= 32 && base + acc + static_smem <= (size_t)optin ? stride : 0;
        s->aev_shmem = base + (s->aev_acc_stride > 0 ? acc : 0);
        /* Few atoms: each atom's AEV over several blocks of AEV_THREADS (k_aev, aev_angular_sliced):
           the largest divisor of the angular terms' outer count (8 for ANI-2x) that keeps the blocks
           within 2 per SM (measured on the H200 for 22 atoms: 2, 4, 6, 8 slices took 62.3, 59.3,
           58.8, 57.7 us per step). NNP_CUDA_AEV_SLICES: tuning. */
        s->aev_slices = 1;
        const int nz = m->aev.nShfZ, n_outer = lanes_over_shfz(m) ? m->angular_sub / nz : 0;
        if (n > 0 && n_outer > 0 && stride > 0) {
            int S = 1;
            for (int d = 2; d <= n_outer; d++)
                if (n_outer % d == 0 && (long long)n * d <= 2LL * sms) S = d;
            if (getenv("NNP_CUDA_AEV_SLICES")) S = max(1, min(n_outer, atoi(getenv("NNP_CUDA_AEV_SLICES"))));
            const int max_ol = (n_outer + S - 1) / S, rowlen = stride / m->angular_sub * max_ol * nz;
            const size_t rowstride = (size_t)(rowlen + 31) / 32 * 32 + nz;
            const size_t acc_sliced = (size_t)(AEV_THREADS / 32) * (32 / nz) * rowstride * sizeof(real);
            if (S >= 2 && base + acc_sliced + static_smem <= (size_t)optin)
                s->aev_slices = S, s->aev_threads = AEV_THREADS, s->aev_acc_stride = rowlen, s->aev_shmem = base + acc_sliced;
        }
        s->bwd_slices = lanes_over_shfz(m) && n > 0 ? min(16, (4 * sms) / n) : 1;
        if (getenv("NNP_CUDA_BWD_SLICES") && lanes_over_shfz(m)) s->bwd_slices = max(1, min(64, atoi(getenv("NNP_CUDA_BWD_SLICES")))); /* tuning */
        if (s->bwd_slices < 2) s->bwd_slices = 1;
        /* + the neighbours' force places, and the dE/dAEV row when split (see aev_atom) */
        s->bwd_shmem = base + align16((size_t)s->capacity * sizeof(int)) + (s->bwd_slices > 1 ? (size_t)s->aev_live * sizeof(real) : 0);
    }
    for (size_t j = 0; st == NNP_OK && j < nj; j++)
        if (partial_at[j] != (size_t)-1) jobs[j].partial = (real*)s->partial + partial_at[j];
    /* The last backward GEMM's split-K parts added by the split AEV backward itself (DeferredSum)
       where that GEMM runs on the few-rows kernels (NNP_CUDA_DEFER=0: added by the GEMM's last
       block per tile, as for the other layers). */
    s->bwd_defer = sizeof(real) == 4 && s->bwd_slices > 1 && s->bwd_ksplit[0] > 1 && s->bwd_m[0] <= SKINNY_M && skinny_enabled() &&
                   !(getenv("NNP_CUDA_DEFER") && atoi(getenv("NNP_CUDA_DEFER")) == 0);
    int4* defer_rows = s->bwd_defer ? (int4*)calloc((size_t)n + 1, sizeof(int4)) : NULL;
    if (s->bwd_defer && defer_rows == NULL) st = nnp_fail(NNP_ERR_MEMORY, "cannot allocate the deferred split-K table");
    for (int j = 0; defer_rows != NULL && j < s->bwd_jobs[0]; j++) {
        const GemmJob<real>& g = jobs[s->bwd_job0[0] + j];
        const size_t row0 = (size_t)(g.C - (real*)s->daev) / A;
        for (int r = 0; r < g.m; r++) defer_rows[row0 + r] = make_int4((int)partial_at[s->bwd_job0[0] + j], g.m * g.n, g.n, r);
    }
    TRY_ALLOC(s->defer_rows, sizeof(int4) * (s->bwd_defer ? n : 1));
    free(partial_at);
    /* MmaWeights: the weights of every launch that runs on k_gemm_mma (float32, at most 16 rows per
       element) split once into FP16 pairs for the mma's operand order: per job, column n and 4 k
       from 4q, one uint4 (high parts of k 4q, 4q+1 | of 4q+2, 4q+3 | the low parts likewise), each
       matrix scaled by the power of two that brings its largest magnitude below 2^14 (fp16_scale);
       the kernel multiplies its sums by wscale, the inverse. Columns of k past the job's are zero. */
    size_t w16_count = 0;
    uint4* w16 = NULL;
    size_t* w16_at = (size_t*)calloc(nj + 1, sizeof(size_t));
    if (w16_at == NULL) st = nnp_fail(NNP_ERR_MEMORY, "cannot allocate the FP16 weight table");
    for (int pass = 0; pass < 2 && st == NNP_OK; pass++)
        for (int h = 0; h < s->n_hidden; h++) {
            if (!(sizeof(real) == 4 && runs_on_mma((pass ? s->bwd_m : s->fwd_m)[h]))) continue;
            const size_t j0 = pass ? s->bwd_job0[h] : s->fwd_job0[h];
            const int count = pass ? s->bwd_jobs[h] : s->fwd_jobs[h];
            for (int j = 0; j < count; j++) {
                w16_at[j0 + j] = w16_count + 1; /* 0: none */
                w16_count += (size_t)jobs[j0 + j].n * ((jobs[j0 + j].k + 15) / 16 * 4);
            }
        }
    TRY_ALLOC(s->w16, sizeof(uint4) * (w16_count + 1));
    if (st == NNP_OK && w16_count > 0 && (w16 = (uint4*)malloc(sizeof(uint4) * w16_count)) == NULL)
        st = nnp_fail(NNP_ERR_MEMORY, "cannot allocate the FP16 weights");
    for (size_t j = 0; st == NNP_OK && w16 != NULL && j < nj; j++) {
        if (w16_at[j] == 0) continue;
        GemmJob<real>& g = jobs[j];
        const bool trans = j < (size_t)s->bwd_job0[s->n_hidden - 1]; /* forward jobs come first: B is [n × k] */
        const real* hb = w + (g.B - W);
        const int ldq = (g.k + 15) / 16 * 4;
        auto at = [&](int col, int k) { return k < g.k ? (float)(trans ? hb[(size_t)col * g.ldb + k] : hb[(size_t)k * g.ldb + col]) : 0.f; };
        float mx = 0.f;
        for (int col = 0; col < g.n; col++)
            for (int k = 0; k < g.k; k++) mx = fmaxf(mx, fabsf(at(col, k)));
        const float sc = fp16_scale(mx);
        uint4* dst = w16 + (w16_at[j] - 1);
        for (int col = 0; col < g.n; col++)
            for (int q = 0; q < ldq; q++) {
                uint4 v;
                fp16_split(at(col, 4 * q) * sc, at(col, 4 * q + 1) * sc, v.x, v.z);
                fp16_split(at(col, 4 * q + 2) * sc, at(col, 4 * q + 3) * sc, v.y, v.w);
                dst[(size_t)col * ldq + q] = v;
            }
        g.B16 = (const uint4*)s->w16 + (w16_at[j] - 1);
        g.ldq = ldq;
        g.wscale = 1.f / sc;
    }
    free(w16_at);
    TRY_ALLOC(s->jobs, sizeof(GemmJob<real>) * (nj + 1));
    TRY_ALLOC(s->aev_params, sizeof(AevParams<real>));
    AevParams<real> P = aev_params<real>(m, radial_at, angular_at, s->aev_angular0);
    /* Output layer jobs, one per element present. */
    OutputJob<real> ojobs[NNP_MAX_ELEMENTS];
    s->n_out_jobs = 0;
    s->max_rows = 0;
    for (int e = 0; e < E; e++) {
        int r = s->elem_rows[e];
        if (r == 0) continue;
        int L = s->n_hidden - 1, WL = s->width[e][L];
        OutputJob<real> o = {(real*)s->Y[L] + s->y_offset[L][e], W + s->w_offset[e][s->n_hidden], W + s->b_offset[e][s->n_hidden],
                             (real*)s->D[L] + s->y_offset[L][e], 0, M * WL, WL, r, 0};
        o.row0 = s->elem_row0[e];
        ojobs[s->n_out_jobs++] = o;
        s->max_rows = max(s->max_rows, r);
    }
    TRY_ALLOC(s->out_jobs, sizeof(OutputJob<real>) * (s->n_out_jobs + 1));
    /* The output layer fused into the last hidden layer's forward where that runs on k_gemm_mma
       without split-K (float32, at most 16 rows per element; NNP_CUDA_FUSE_OUTPUT=0: k_output). */
    {
        const int L = s->n_hidden - 1;
        s->fuse_output = sizeof(real) == 4 && L >= 1 && runs_on_mma(s->fwd_m[L]) && s->fwd_ksplit[L] == 1 &&
                         !(getenv("NNP_CUDA_FUSE_OUTPUT") && atoi(getenv("NNP_CUDA_FUSE_OUTPUT")) == 0);
        TRY_ALLOC(s->out_partial, sizeof(float) * (s->fuse_output ? (size_t)s->fwd_jobs[L] * s->fwd_grid[L].x * 16 : 1));
    }
    if (st == NNP_OK) {
        cudaError_t err = cudaSuccess;
        const int* batch_atoms = plan->order;
#define UPLOAD(dst, src, bytes) if (err == cudaSuccess && (bytes) > 0) err = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice)
        /* k_aev's search tables (FrontIn) */
        int4* row_info = (int4*)malloc(sizeof(int4) * (n + 1));
        int4* batch_entry = (int4*)malloc(sizeof(int4) * (n + 1));
        if (row_info == NULL || batch_entry == NULL) err = cudaErrorMemoryAllocation;
        for (int r = 0; err == cudaSuccess && r < n; r++) {
            const int i = row_atom[r], b = atom_batch[i];
            row_info[r] = make_int4(i, particle[i], plan->batch_start[b], plan->batch_start[b + 1]);
        }
        for (int q = 0; err == cudaSuccess && q < n; q++) {
            const int j = batch_atoms[q];
            batch_entry[q] = make_int4(j, particle[j], plan->elements[j], 0);
        }
        UPLOAD(s->row_info, row_info, sizeof(int4) * n);
        if (defer_rows != NULL) UPLOAD(s->defer_rows, defer_rows, sizeof(int4) * n);
        UPLOAD(s->batch_entry, batch_entry, sizeof(int4) * n);
        free(row_info), free(batch_entry);
        UPLOAD(s->identity, identity, sizeof(int) * n);
        UPLOAD(s->batch_start, plan->batch_start, sizeof(int) * (plan->n_batches + 1));
        UPLOAD(s->batch_atoms, batch_atoms, sizeof(int) * n);
        UPLOAD(s->row_atom, row_atom, sizeof(int) * n);
        UPLOAD(s->self_energy, self, sizeof(double) * n);
        UPLOAD(s->weights, w, sizeof(real) * total);
        UPLOAD(s->jobs, jobs, sizeof(GemmJob<real>) * nj);
        if (w16 != NULL) UPLOAD(s->w16, w16, sizeof(uint4) * w16_count);
        UPLOAD(s->flags, FLAG_CLEAR, sizeof(FLAG_CLEAR));
        UPLOAD(s->aev_params, &P, sizeof(P));
        UPLOAD(s->out_jobs, ojobs, sizeof(OutputJob<real>) * s->n_out_jobs);
#undef UPLOAD
        if (err == cudaSuccess) err = cudaMemset(s->batch_energy, 0, sizeof(double) * (plan->n_batches + 1));
        if (err != cudaSuccess) st = nnp_fail(NNP_ERR_CUDA, "uploading the plan to the GPU failed: %s", cudaGetErrorString(err));
        else memcpy(s->host_flags, FLAG_CLEAR, sizeof(FLAG_CLEAR));
    }
#undef TRY_ALLOC
    free(row_atom), free(self), free(particle), free(identity), free(w), free(jobs), free(live_feature), free(batch_class);
    free(defer_rows), free(w16);
    if (st == NNP_OK) preload<real>(s);
    return st;
}

template <typename real, bool TRANS_B, int EPI>
static void gemm(const GemmJob<real>* jobs, dim3 grid, int ksplit, int max_mn, int max_m, int aligned, int* counters, bool cluster,
                 cudaStream_t stream, bool pdl) {
    if (SkinnyGemm<real>::template run<TRANS_B, EPI>(jobs, grid, ksplit, max_m, counters, cluster, stream, pdl)) return;
    if (ksplit == 1) { /* many rows: the 128×128 kernels (grid given in 64-wide tiles) */
        dim3 big((grid.x + 1) / 2, (grid.y + 1) / 2, grid.z);
        if (!aligned || !BigGemm4<real>::template run<TRANS_B, EPI>(jobs, big, stream, pdl))
            launch_k(pdl, k_gemm_big<real, TRANS_B, EPI>, big, dim3(256), 0, stream, jobs);
        return;
    }
    launch_k(pdl, k_gemm<real, TRANS_B, EPI>, grid, dim3(256), 0, stream, jobs, ksplit);
    launch_k(pdl, k_gemm_reduce<real, EPI>, dim3(min(1024, (max_mn + 255) / 256), grid.z / ksplit), dim3(256), 0, stream, jobs, ksplit);
}

template <typename real>
static nnp_status launch(nnp_plan* plan, nnp_cuda_state* s, const nnp_cuda_io* io, cudaStream_t stream, const Box<real>& box,
                         int profile) {
    typedef typename real4_of<real>::type real4;
    const nnp_model* m = plan->model;
    int n = s->n_atoms, M = s->members;
    const double to_angstrom = s->units == NNP_UNITS_NM_KJMOL ? 10.0 : 1.0;
    const double eunit = s->units == NNP_UNITS_NM_KJMOL ? NNP_HARTREE_TO_KJMOL : 1.0;
    const int with_forces = io->forces_format != NNP_FORCES_NONE;
    const AevParams<real>* P = (const AevParams<real>*)s->aev_params;
    size_t A = s->aev_live;
    int stage = 0;
#define MARK() \
    if (profile) cudaEventRecord(s->events[stage++], stream)
    MARK();
    /* Every kernel but the first may be a programmatic dependent launch (pdl_wait; not while the
       stages are timed); the plain force buffer is cleared before the first. */
    const bool pdl = s->pdl && !profile;
    debug_launched = 0;
    Finish fin;
    fin.atom_energy = s->atom_energy, fin.self_energy = s->self_energy;
    fin.batch_start = s->batch_start, fin.batch_atoms = s->batch_atoms, fin.batch_energy = s->batch_energy;
    fin.energy = io->energy, fin.total = s->total, fin.flags = s->flags, fin.host_flags = s->host_flags_dev;
    fin.unit = eunit, fin.n_atoms = n, fin.n_batches = s->n_batches, fin.energy_is_double = io->energy_is_double;
    fin.out_jobs = (const OutputJob<float>*)s->out_jobs, fin.out_partial = NULL, fin.row_atom = s->row_atom;
    const double scale = 1.0 / M; /* the ensemble mean */
    fin.out_scale = scale, fin.n_out_jobs = s->n_out_jobs, fin.members = M, fin.out_tiles = 0;
    bool finish_fused = false;
    if (n > 0 && with_forces && io->forces_format != NNP_FORCES_FIXED_POINT)
        cudaMemsetAsync(s->fixed, 0, sizeof(unsigned long long) * 3 * n, stream);
    if (n > 0) {
        if (io->sorted_particles)
            launch_k(false, k_inverse_order, dim3((s->n_particles + 255) / 256), dim3(256), 0, stream, io->sorted_particles,
                     s->n_particles, s->index_of);
        MARK();
        FrontIn<real> in;
        in.positions = io->positions, in.format = io->positions_format;
        in.index_of = io->sorted_particles ? s->index_of : NULL;
        in.row_info = s->row_info, in.batch_entry = s->batch_entry;
        NbrTables<real> T;
        T.count = s->count, T.vec = (real4*)s->nbr_vec, T.cut = (real4*)s->nbr_cut, T.info = s->nbr_info, T.ang = s->nbr_ang;
        in.force_index = s->force_index, in.T = T;
        in.flags = s->flags, in.box = box, in.to_angstrom = (real)to_angstrom, in.rc2 = (real)(m->aev.Rcr * m->aev.Rcr);
        launch_k(pdl && io->sorted_particles, s->aev_slices > 1 ? k_aev<real, true> : k_aev<real, false>, dim3(n, s->aev_slices), dim3(s->aev_threads), s->aev_shmem, stream, P, s->capacity, in,
                 (real*)s->aev, (int)A, s->aev_acc_stride);
        MARK();
        GemmJob<real>* jobs = (GemmJob<real>*)s->jobs;
        const bool fuse_output = s->fuse_output && !profile; /* stage timing keeps the output layer apart */
        for (int h = 0; h < s->n_hidden; h++) {
            if (fuse_output && h == s->n_hidden - 1) {
                OutFuse f;
                f.jobs = (const OutputJob<float>*)s->out_jobs, f.partial = s->out_partial, f.scale = (float)scale;
                f.with_forces = with_forces;
                fin.out_partial = s->out_partial, fin.out_tiles = s->fwd_grid[h].x;
                SkinnyGemm<real>::run_output(jobs + s->fwd_job0[h], s->fwd_grid[h], s->counters, stream, pdl, f);
            } else
                gemm<real, true, EPI_BIAS_CELU>(jobs + s->fwd_job0[h], s->fwd_grid[h], s->fwd_ksplit[h], s->fwd_mn[h], s->fwd_m[h],
                                                s->fwd_aligned[h], s->counters, s->mma_cluster, stream, pdl);
        }
        MARK();
        if (!fuse_output)
            launch_k(pdl, k_output<real>, dim3(s->max_rows, s->n_out_jobs), dim3(32 * min(M, OUTPUT_WARPS)), 0, stream,
                     (const OutputJob<real>*)s->out_jobs, M, (const int*)s->row_atom, scale, s->atom_energy, with_forces);
        MARK();
        if (with_forces) {
            for (int h = s->n_hidden - 1; h >= 1; h--)
                gemm<real, false, EPI_DERIV>(jobs + s->bwd_job0[h], s->bwd_grid[h], s->bwd_ksplit[h], s->bwd_mn[h], s->bwd_m[h], s->bwd_aligned[h], s->counters, s->mma_cluster, stream, pdl);
            gemm<real, false, EPI_NONE>(jobs + s->bwd_job0[0], s->bwd_grid[0], s->bwd_ksplit[0], s->bwd_mn[0], s->bwd_m[0], s->bwd_aligned[0],
                                        s->bwd_defer ? NULL : s->counters, s->mma_cluster, stream, pdl); /* no counters: DeferredSum */
            MARK();
            unsigned long long* target;
            const int* findex;
            long long stride;
            double force_unit = eunit * to_angstrom;
            if (io->forces_format == NNP_FORCES_FIXED_POINT) {
                target = (unsigned long long*)io->forces;
                stride = io->forces_stride;
                findex = s->force_index; /* where each atom's position came from */
            } else { /* cleared at the start */
                target = s->fixed;
                stride = n;
                findex = s->identity;
                force_unit *= PLAIN_FIXED_EXTRA;
            }
            finish_fused = s->bwd_slices > 1 && !profile; /* few atoms: the end of the evaluation in its first block */
            const DeferredSum<real> defer = {s->bwd_defer ? s->defer_rows : NULL, (const real*)s->partial, s->bwd_ksplit[0]};
            if (s->bwd_slices > 1)
                launch_k(pdl, k_aev_backward<real, true>, dim3(n + finish_fused, s->bwd_slices), dim3(AEV_THREADS), s->bwd_shmem,
                         stream, P, (const int*)s->row_atom, s->capacity, T, (const real*)s->daev, (int)A, findex, target, stride,
                         force_unit, fin, (int)finish_fused, defer);
            else
                launch_k(pdl, k_aev_backward<real, false>, dim3(n), dim3(BWD_THREADS), s->bwd_shmem, stream, P,
                         (const int*)s->row_atom, s->capacity, T, (const real*)s->daev, (int)A, findex, target, stride, force_unit,
                         fin, 0, DeferredSum<real>{NULL, NULL, 0});
            if (io->forces_format == NNP_FORCES_XYZ_DOUBLE)
                launch_k(pdl, k_fixed_to_xyz, dim3((n + 127) / 128), dim3(128), 0, stream, (const unsigned long long*)s->fixed, n,
                         (double*)io->forces);
            MARK();
        }
    }
    while (profile && stage < NNP_CUDA_STAGES) MARK(); /* stages skipped (no atoms or no forces) take no time */
    if (!finish_fused) launch_k(pdl && n > 0, k_finish, dim3(1), dim3(FINISH_THREADS), 0, stream, fin);
    MARK();
#undef MARK
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return nnp_fail(NNP_ERR_CUDA, "launching the CUDA evaluation failed: %s", cudaGetErrorString(err));
    return NNP_OK;
}

/* ------------------------------------------------------------------ entry points */

static nnp_status capture_state(cudaStream_t stream, int* capturing) {
    nnp_status st = load_driver();
    if (st != NNP_OK) return st;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = driver.streamIsCapturing((CUstream)stream, &status);
    if (r != CUDA_SUCCESS) return nnp_fail(NNP_ERR_CUDA, "cuStreamIsCapturing failed (CUresult %d)", (int)r);
    *capturing = status != CU_STREAM_CAPTURE_STATUS_NONE;
    return NNP_OK;
}

/* Errors the device recorded in earlier evaluations (seen once their flags reached the host). */
static nnp_status check_flags(nnp_plan* plan, nnp_cuda_state* s) {
    int f[4];
    volatile int* host = s->host_flags; /* the GPU may be writing it */
    for (int k = 0; k < 4; k++) /* read and cleared at once: the GPU writes a flag only when it is raised */
        f[k] = __atomic_exchange_n((int*)&host[k], FLAG_CLEAR[k], __ATOMIC_ACQ_REL);
    if (f[0] != 0x7fffffff)
        return nnp_fail(NNP_ERR_NONFINITE, "a coordinate of atom %d is not finite (NaN or infinite) in a recent CUDA evaluation",
                        f[0]);
    if (f[1] > 0)
        return nnp_fail(NNP_ERR_STATE, "an atom had %d neighbours within the cutoff, more than the CUDA evaluation's capacity "
                        "of %d per atom: its energy and forces were wrong; split very large batches", f[1], s->capacity);
    if (f[2] > 0) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "two atoms of one batch were at the same position");
    if (f[3] > 0) return nnp_fail(NNP_ERR_NONFINITE, "the model gave a non-finite energy in a recent CUDA evaluation");
    (void)plan;
    return NNP_OK;
}

extern "C" nnp_status nnp_evaluate_cuda(nnp_plan* plan, const nnp_cuda_io* io) {
    if (plan == NULL || io == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_evaluate_cuda: NULL argument");
    if (plan->n_atoms > 0 && io->positions == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_evaluate_cuda: positions is NULL");
    if (io->forces_format != NNP_FORCES_NONE && io->forces == NULL)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_evaluate_cuda: forces is NULL");
    if (io->positions_format < NNP_POSITIONS_XYZ_DOUBLE || io->positions_format > NNP_POSITIONS_DOUBLE4)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_evaluate_cuda: unknown positions format %d", (int)io->positions_format);
    cudaStream_t stream = (cudaStream_t)io->stream;
    int capturing = 0;
    nnp_status st = capture_state(stream, &capturing);
    if (st != NNP_OK) return st;
    const nnp_model* m = plan->model;
    const double to_angstrom = plan->units == NNP_UNITS_NM_KJMOL ? 10.0 : 1.0;
    nnp_cuda_state* s = (nnp_cuda_state*)plan->cuda;
    if (capturing) {
        /* Only launches from here on: every size must already be known. */
        if (s == NULL || !s->evaluated)
            return nnp_fail(NNP_ERR_CAPTURE, "the CUDA evaluation is being captured into a graph before its first "
                            "evaluation: run one step (or one evaluation) outside capture first, so that the batch count "
                            "and buffer sizes are known");
        if (plan->cuda_dirty)
            return nnp_fail(NNP_ERR_CAPTURE, "the atoms, batches, ensemble member, units or precision changed since the last "
                            "evaluation outside capture (now %d atoms in %d batches): run one step outside capture before "
                            "capturing again", plan->n_atoms, plan->n_batches);
        if (io->sorted_particles && io->n_particles != s->n_particles)
            return nnp_fail(NNP_ERR_CAPTURE, "the particle count changed since the last evaluation outside capture");
    } else {
        if (s != NULL) {
            st = check_flags(plan, s);
            if (st != NNP_OK) return st;
        }
        if (s == NULL || plan->cuda_dirty || (io->sorted_particles && io->n_particles != s->n_particles)) {
            nnp_cuda_release(plan);
            s = (nnp_cuda_state*)calloc(1, sizeof *s);
            if (s == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory");
            driver.ctxGetCurrent(&s->context);
            st = plan->cuda_precision == NNP_PRECISION_DOUBLE ? build_state<double>(plan, s, io->n_particles)
                                                              : build_state<float>(plan, s, io->n_particles);
            if (st != NNP_OK) {
                free_state(s);
                return st;
            }
            plan->cuda = s;
            plan->cuda_dirty = 0;
        }
    }
    if (io->box != NULL) {
        st = nnp_check_box(io->box, m->aev.Rcr, to_angstrom);
        if (st != NNP_OK) return st;
    }
    int profile = 0;
    if (!capturing && getenv("NNP_CUDA_PROFILE") != NULL && atoi(getenv("NNP_CUDA_PROFILE")) > 0) {
        for (int k = 0; !s->profiling && k <= NNP_CUDA_STAGES; k++) CUDA_TRY(cudaEventCreate(&s->events[k]));
        s->profiling = profile = 1;
    }
    if (s->precision == NNP_PRECISION_DOUBLE) {
        Box<double> box = {io->box != NULL, {0}};
        for (int k = 0; io->box && k < 9; k++) box.a[k] = io->box[k] * to_angstrom;
        st = launch<double>(plan, s, io, stream, box, profile);
    } else {
        Box<float> box = {io->box != NULL, {0}};
        for (int k = 0; io->box && k < 9; k++) box.a[k] = (float)(io->box[k] * to_angstrom);
        st = launch<float>(plan, s, io, stream, box, profile);
    }
    if (st != NNP_OK) return st;
    if (profile) {
        CUDA_TRY(cudaEventSynchronize(s->events[NNP_CUDA_STAGES]));
        for (int k = 0; k < NNP_CUDA_STAGES; k++) {
            float ms = 0;
            cudaEventElapsedTime(&ms, s->events[k], s->events[k + 1]);
            s->stage_us[k] = 1000.0 * ms;
        }
    }
    if (!capturing && !s->evaluated) {
        /* The first evaluation with new buffers: wait for it, so that bad input is reported now. */
        CUDA_TRY(cudaStreamSynchronize(stream));
        st = check_flags(plan, s);
        if (st != NNP_OK) return st;
        s->evaluated = 1;
    }
    return NNP_OK;
}

extern "C" nnp_status nnp_cuda_batch_energies(nnp_plan* plan, void* stream, double* energies) {
    if (plan == NULL || (energies == NULL && plan->n_batches > 0))
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_cuda_batch_energies: NULL argument");
    nnp_cuda_state* s = (nnp_cuda_state*)plan->cuda;
    if (s == NULL || !s->evaluated || plan->cuda_dirty)
        return nnp_fail(NNP_ERR_STATE, "no CUDA evaluation of the current atoms yet: evaluate first");
    int capturing = 0;
    nnp_status st = capture_state((cudaStream_t)stream, &capturing);
    if (st != NNP_OK) return st;
    if (capturing)
        return nnp_fail(NNP_ERR_CAPTURE, "batch energies cannot be read while the stream is being captured (it would "
                        "synchronise); read them after the graph has run");
    if (plan->n_batches > 0)
        CUDA_TRY(cudaMemcpyAsync(energies, s->batch_energy, sizeof(double) * plan->n_batches, cudaMemcpyDeviceToHost,
                                 (cudaStream_t)stream));
    CUDA_TRY(cudaStreamSynchronize((cudaStream_t)stream));
    return check_flags(plan, s);
}

extern "C" nnp_status nnp_cuda_aev_layout(nnp_plan* plan, int32_t* model_length, int32_t* stored_length, int32_t* classes) {
    nnp_cuda_state* s = plan ? (nnp_cuda_state*)plan->cuda : NULL;
    if (s == NULL || plan->cuda_dirty)
        return nnp_fail(NNP_ERR_STATE, "no CUDA evaluation of the current atoms yet: evaluate first");
    if (model_length) *model_length = plan->model->aev_length;
    if (stored_length) *stored_length = s->aev_live;
    if (classes) *classes = s->n_classes;
    return NNP_OK;
}

extern "C" nnp_status nnp_cuda_stage_times(nnp_plan* plan, double* microseconds) {
    nnp_cuda_state* s = plan ? (nnp_cuda_state*)plan->cuda : NULL;
    if (s == NULL || microseconds == NULL || !s->profiling)
        return nnp_fail(NNP_ERR_STATE, "no profiled CUDA evaluation: set NNP_CUDA_PROFILE=1 and evaluate outside capture");
    memcpy(microseconds, s->stage_us, sizeof s->stage_us);
    return NNP_OK;
}
