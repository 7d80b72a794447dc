/* Many rows (more than 256 per job): 128×128 register-blocked tiles, one per block, no split-K. */
#pragma once

#include "gemm.cuh"

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

/* A warp's 32×32 results of the tensor-core kernels: 2×4 mma fragments of 4. */
template <int MI> __device__ __forceinline__ void zero_fragments(float (&f)[MI][4][4]) {
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int c = 0; c < 4; c++) f[mi][ni][c] = 0.f;
}

/*
 * The many-rows product in float32 on the tensor cores in FP16 (mma.sync m16n8k16: twice the
 * products of a TF32 m16n8k8 in the same time), where the operands allow 16-byte loads (the plan
 * checks alignment and that every k and n is a multiple of 4). Each operand is scaled by a power of two and split into an FP16 high part and the
 * FP16 rest, x = hi + lo (11 + 11 bits, as a TF32 pair), and a·b = lo·hi + hi·lo + hi·hi (the
 * lo·lo term, about 2^-22 relative, is left out; see fp16_split, fp16_scale, k_gemm_mma). The
 * weights were split and scaled when the plan was made (split_fp16_weights: one scale per job, the
 * lane-ordered uint4 of k_gemm_mma); the activations are split here, each row of each k-stage of 32
 * with its own power-of-two scale that brings its largest magnitude below 2^14, so that FP16's range
 * holds the high parts and, down to 2^-17 of that row's largest value, the low parts as normal
 * numbers (smaller values keep an absolute error below 2^-38 of it). Each k-stage is summed in fresh
 * accumulators (the tensor cores' accumulation truncates), scaled back (powers of two: exact) and
 * added to the result in float32 with rounding. A block computes a 128×64 tile with 8 warps of 32×32
 * results; each k-stage's activations are read into registers (the next stage's while this one is
 * multiplied), split and stored to shared memory in fragment order (per 16-row tile, 16-k step and
 * lane, a uint4 of high parts and one of low parts: one conflict-free 16-byte read per fragment), the
 * weights' fragments copied there by cp.async; one barrier per stage. Within each 16-k step lane q
 * takes k 4q .. 4q+3 for both operands (the order of k_gemm_mma). The sums are formed in a fixed
 * order: the same bits on every run.
 * PRE (without split-K): the activations come presplit (see k_presplit), split once instead of by
 * every block of the tile's row, and each stage is only copied (cp.async) and read (ldmatrix); the
 * same splits, so the same bits. Where the next product reads presplit activations, the epilogue
 * writes its results so too (write_presplit; GemmJob::Cp, OutputJob::delta_p).
 */
#define TH_BM 128
#define TH_BN 64
#define TH_BK 32
#define TH_STAGE_A (TH_BM / 16 * 2 * 2 * 32) /* uint4: 16-row tiles × 16-k steps × (hi, lo) × lanes */
#define TH_STAGE_B (2 * TH_BN * 4)           /* uint4: 16-k steps × columns × lanes of a column */
/* Dynamic shared memory of k_gemm_big_h: two stages of A, of B and of A's row scales. */
#define TH_SMEM (2 * (TH_STAGE_A + TH_STAGE_B) * sizeof(uint4) + 2 * TH_BM * sizeof(float))

/*
 * Presplit activations: a float32 matrix whose rows are whole chunks of 32 values (its row stride
 * and every job's first column multiples of 32) may also be kept as FP16 pairs, split once by its
 * producer instead of by every block of the next product that reads it. Chunk c (values 32c ..
 * 32c + 31 of the float32 buffer) becomes 8 uint4 at p + 8c and its inverse scale inv[c]: the
 * values scaled by fp16_scale of the chunk's largest magnitude (as k_gemm_big_h scales each row of
 * a k-stage), then uint4 0..3 the high parts, 4..7 the low parts, each as the 16-k steps s = 0, 1
 * and within a step the 16-byte blocks b = 0, 1, block b holding the pairs (2i + b) of the step,
 * i = 0..3, in that order: ldmatrix then gives lane q the pairs 2q and 2q + 1 of each step, the
 * k 4q .. 4q+3 that k_gemm_big_h's weights expect. The same bits as the split in k_gemm_big_h.
 */
#define PRE_CHUNK 32
/* word (FP16 pair) of value pair j (values 2j, 2j + 1, j < 16) of a chunk's high parts; low parts + 16 */
__host__ __device__ __forceinline__ int presplit_word(int j) { return (j >> 3) * 8 + (j & 1) * 4 + ((j & 7) >> 1); }
/* A float32 buffer of `chunks` chunks presplit, 8 threads per chunk (4 values each, the chunk's
   largest magnitude by shuffles), 32 chunks per block of 256. */
__global__ void __launch_bounds__(256) k_presplit(const float* __restrict__ x, int chunks, uint4* __restrict__ p, float* __restrict__ inv) {
    pdl_start();
    const int c = blockIdx.x * 32 + threadIdx.x / 8, j = threadIdx.x % 8; /* values 4j .. 4j+3 of chunk c */
    const float4 f = c < chunks ? __ldcg((const float4*)(x + (size_t)c * PRE_CHUNK) + j) : make_float4(0.f, 0.f, 0.f, 0.f);
    float mx = fmaxf(fmaxf(fabsf(f.x), fabsf(f.y)), fmaxf(fabsf(f.z), fabsf(f.w)));
#pragma unroll
    for (int off = 1; off < 8; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    if (c >= chunks) return;
    const float sc = fp16_scale(mx);
    unsigned* w = (unsigned*)(p + (size_t)c * 8);
    unsigned hi, lo;
    fp16_split(f.x * sc, f.y * sc, hi, lo);
    w[presplit_word(2 * j)] = hi, w[16 + presplit_word(2 * j)] = lo;
    fp16_split(f.z * sc, f.w * sc, hi, lo);
    w[presplit_word(2 * j + 1)] = hi, w[16 + presplit_word(2 * j + 1)] = lo;
    if (j == 0) inv[c] = fp16_inverse_scale(sc);
}
/* k_gemm_big_h reading presplit activations: per stage, A's 128 rows of one chunk each (8 uint4,
   rows TP_LDA uint4 apart so that ldmatrix meets no bank conflict), the weights' fragments (as
   TH_STAGE_B) and A's 128 inverse scales; TP_STAGES stages in flight. */
#define TP_STAGES 3
#define TP_LDA 9
#define TP_STAGE_OF(BM) ((BM) * TP_LDA + TH_STAGE_B + (BM) / 4) /* uint4 per stage of a BM-row tile */
#define TP_SMEM_OF(BM) (TP_STAGES * TP_STAGE_OF(BM) * sizeof(uint4))
#define TP_SMEM TP_SMEM_OF(TH_BM)
/* all but the latest TP_STAGES − 2 groups have landed */
__device__ __forceinline__ void cp_async_wait_stages() { asm volatile("cp.async.wait_group %0;" ::"n"(TP_STAGES - 2) : "memory"); }
__device__ __forceinline__ void ldmatrix_x4(uint4& r, const uint4* p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "r"(a));
}

/* A warp's (16·MI)×32 results of k_gemm_big_h (v[mi][ni][row g, g + 8]: columns 8·ni + 2q, + 1 of the
   tile's rows wm + 16·mi + g + 8·h), one presplit chunk per row, written as FP16 pairs to P (ldp
   uint4 per row) and inverse scales to S (lds per row), chunk `chunk` of each row, rows below m;
   st: 32 × PRE_STAGE_LD words of shared memory that only this warp uses. Every lane takes part. */
#define PRE_STAGE_LD 36
template <int MI>
__device__ __forceinline__ void write_presplit(const float2 (&v)[MI][4][2], uint4* __restrict__ P, float* __restrict__ S, int ldp, int lds,
                                               int chunk, int row0, int m, unsigned* st) {
    const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float mx = 0.f;
#pragma unroll
            for (int ni = 0; ni < 4; ni++) mx = fmaxf(mx, fmaxf(fabsf(v[mi][ni][h].x), fabsf(v[mi][ni][h].y)));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2)); /* the row's 32 values */
            const float sc = fp16_scale(mx);
            const int lr = mi * 16 + 8 * h + g, r = row0 + lr;
            if (q == 0 && r < m) S[(size_t)r * lds + chunk] = fp16_inverse_scale(sc);
#pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                const int w = presplit_word(4 * ni + q);
                fp16_split(v[mi][ni][h].x * sc, v[mi][ni][h].y * sc, st[lr * PRE_STAGE_LD + w], st[lr * PRE_STAGE_LD + 16 + w]);
            }
        }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 4 * MI; i++) { /* 16·MI rows × 8 uint4, 4 rows per step */
        const int e = i * 32 + lane, lr = e / 8, u = e % 8, r = row0 + lr;
        if (r < m) P[(size_t)r * ldp + (size_t)chunk * 8 + u] = *(const uint4*)(st + lr * PRE_STAGE_LD + 4 * u);
    }
    __syncwarp();
}
/* where write_presplit's staging starts in k_gemm_big_h's shared memory (after big_output's 128 floats) */
#define PRE_STAGE_AT 64 /* uint4 */

/* k_gemm_big_h's three products of one 16-k step into a warp's 8 accumulators (A's high and low
   fragments of its two 16-row tiles, B's of its four 8-column tiles: high k 4q..4q+1, 4q+2..4q+3,
   low likewise), small terms first, each term over all 8 accumulators before the next: 8
   independent mma between dependent ones. */
template <int MI>
__device__ __forceinline__ void mma_pair_step(float (&acc)[MI][4][4], const uint4 (&ah)[MI], const uint4 (&al)[MI], const uint4 (&b)[4]) {
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) mma_f16(acc[mi][ni], al[mi].x, al[mi].y, al[mi].z, al[mi].w, b[ni].x, b[ni].y);
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) mma_f16(acc[mi][ni], ah[mi].x, ah[mi].y, ah[mi].z, ah[mi].w, b[ni].z, b[ni].w);
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) mma_f16(acc[mi][ni], ah[mi].x, ah[mi].y, ah[mi].z, ah[mi].w, b[ni].x, b[ni].y);
}
/* a k-stage's sums, scaled back by their rows' inverse scales (inv[r0 + 16·mi + g] and + 8 for the
   rows g and g + 8 of the warp's 16-row tile mi, r0 its first row), added into the result with
   rounding */
template <int MI>
__device__ __forceinline__ void add_stage(float (&sum)[MI][4][4], const float (&acc)[MI][4][4], const float* inv, int r0, int g) {
#pragma unroll
    for (int mi = 0; mi < MI; mi++) {
        const float u0 = inv[r0 + mi * 16 + g], u1 = inv[r0 + mi * 16 + g + 8];
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int c = 0; c < 4; c++) sum[mi][ni][c] = fmaf(acc[mi][ni][c], c < 2 ? u0 : u1, sum[mi][ni][c]);
    }
}

/* EPI_OUT's end of a k_gemm_big_h tile (see OutFuse): the warp's results as in k_gemm_big_h, before
   the weights' scale; red: 128 floats of shared memory no thread reads any more. Each row's sum is
   formed over this thread's 8 columns, then the 4 lanes of the row, then the two warps of the same
   rows, in that order. */
template <int MI>
__device__ __forceinline__ void big_output(const GemmJob<float>& job, int row0, int col0, int wm, int wn, const float (&sum)[MI][4][4],
                                           const OutFuse& fuse, float* red) {
    const OutputJob<float> o = fuse.jobs[job.group];
    const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    float2 bias[4], w[4];
#pragma unroll
    for (int ni = 0; ni < 4; ni++) { /* n is a multiple of 4: both columns or neither */
        const int col = col0 + wn + ni * 8 + 2 * q;
        bias[ni] = w[ni] = make_float2(0.f, 0.f);
        if (col < job.n)
            bias[ni] = __ldg((const float2*)(job.bias + col)), w[ni] = __ldg((const float2*)(o.w_out + job.member * o.width + col));
    }
    float e[MI][2];   /* [mi][row g, g + 8] */
    float2 d[MI][4][2]; /* delta, as write_presplit takes it */
#pragma unroll
    for (int mi = 0; mi < MI; mi++) e[mi][0] = e[mi][1] = 0.f;
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = row0 + wm + mi * 16 + g + 8 * h;
#pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                const int col = col0 + wn + ni * 8 + 2 * q;
                d[mi][ni][h] = make_float2(0.f, 0.f);
                if (r >= job.m || col >= job.n) continue;
                const float y0 = celu(sum[mi][ni][2 * h] * job.wscale + bias[ni].x), y1 = celu(sum[mi][ni][2 * h + 1] * job.wscale + bias[ni].y);
                e[mi][h] += w[ni].x * y0;
                e[mi][h] += w[ni].y * y1;
                d[mi][ni][h] = make_float2(fuse.scale * w[ni].x * celu_deriv_from_output(y0), fuse.scale * w[ni].y * celu_deriv_from_output(y1));
                if (fuse.with_forces && o.delta_p == NULL) *(float2*)(o.delta + (size_t)r * o.ldy + job.member * o.width + col) = d[mi][ni][h];
            }
        }
    if (fuse.with_forces && o.delta_p != NULL && col0 + wn < job.n) /* (n is then a multiple of 32: every column of the chunk) */
        write_presplit(d, o.delta_p, o.delta_s, o.ldp, o.lds, (job.member * o.width + col0 + wn) / PRE_CHUNK, row0 + wm, job.m,
                       (unsigned*)(red + 4 * PRE_STAGE_AT) + (threadIdx.x / 32) * 32 * PRE_STAGE_LD);
#pragma unroll
    for (int off = 1; off < 4; off <<= 1)
#pragma unroll
        for (int mi = 0; mi < MI; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) e[mi][h] += __shfl_xor_sync(0xffffffffu, e[mi][h], off);
    if (wn != 0 && q == 0)
#pragma unroll
        for (int mi = 0; mi < MI; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) red[wm + mi * 16 + g + 8 * h] = e[mi][h];
    __syncthreads();
    if (wn == 0 && q == 0)
#pragma unroll
        for (int mi = 0; mi < MI; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = wm + mi * 16 + g + 8 * h;
                if (row0 + r < job.m)
                    fuse.partial[((size_t)blockIdx.z * gridDim.x + blockIdx.x) * fuse.rows + row0 + r] = e[mi][h] + red[r];
            }
}

/* MI: 16-row tiles per warp; the block's tile is 64·MI rows × 64 (MI = 1: only with presplit
   activations, for middle row counts; see big_h). */
template <int EPI, bool SPLIT, bool PRE, int MI>
__global__ void __launch_bounds__(256, 2) k_gemm_big_h(const GemmJob<float>* __restrict__ jobs, int ksplit_arg, int* __restrict__ counters,
                                                       const OutFuse fuse) {
    static_assert(MI == 2 || (MI == 1 && PRE), "64-row tiles only with presplit activations");
    constexpr int BM = 64 * MI;
    const int ksplit = SPLIT ? ksplit_arg : 1; /* SPLIT: middle row counts, split over k (ksplit_arg > 1) */
    const GemmJob<float> job = jobs[blockIdx.z / ksplit];
    pdl_start();
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * TH_BN;
    if (row0 >= job.m || col0 >= job.n) return;
    /* split-K part blockIdx.z mod ksplit: k in [kbegin, kend), whole stages but the last */
    const int part = blockIdx.z % ksplit, kc = ((job.k + ksplit - 1) / ksplit + TH_BK - 1) / TH_BK * TH_BK;
    const int kbegin = min(job.k, part * kc), kend = min(job.k, kbegin + kc);
    extern __shared__ uint4 th_smem[];
    const int t = threadIdx.x, warp = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
    const int wm = (warp / 2) * 16 * MI, wn = (warp % 2) * 32; /* this warp's (16·MI)×32 results in the tile */
    float sum[MI][4][4]; /* the result so far, rounded to nearest after each k-stage */
    zero_fragments(sum);
    if constexpr (PRE) {
        /* Presplit activations: every stage (A's BM rows × one 128-byte chunk, their inverse scales,
           the weights' fragments) copied by cp.async, TP_STAGES in flight; A's fragments read by
           ldmatrix (lane l gives the address of row l mod 8 + 8·(l / 8 mod 2), 16-byte block l / 16).
           Each thread copies from addresses it keeps across stages (recomputing them per stage cost
           2% at 837 molecules): A's rows ar + 32·i at uint4 ac of the chunk, the inverse scale of row
           t (t < BM), the weights' 16 bytes of column bn at 4-byte group kq0 + 4·i. */
        const int nk = (kend - kbegin + TH_BK - 1) / TH_BK, c0 = kbegin / TH_BK;
        const int ar = t / 8, ac = t % 8, bn = t / 4, kq0 = kbegin / 4 + t % 4;
        const uint4* const a_src = job.Ap + (size_t)(row0 + ar) * job.ldp + (size_t)c0 * 8 + ac;
        const size_t a_step = (size_t)32 * job.ldp;
        const float* const s_src = job.As + (size_t)(row0 + t) * job.lds + c0;
        const bool s_ok = t < BM && row0 + t < job.m, b_ok = col0 + bn < job.n;
        const uint4* const b_src = job.B16 + (size_t)(col0 + bn) * job.ldq + kq0;
        auto load_stage = [&](int buf, int kt) {
            uint4* const as = th_smem + buf * TP_STAGE_OF(BM);
            uint4* const bs = as + BM * TP_LDA;
            float* const sc = (float*)(bs + TH_STAGE_B);
            const uint4* src = a_src + (size_t)kt * 8;
#pragma unroll
            for (int i = 0; i < 2 * MI; i++, src += a_step) {
                const bool ok = row0 + ar + 32 * i < job.m;
                cp_async16(as + (ar + 32 * i) * TP_LDA + ac, ok ? src : job.Ap, ok);
            }
            if (t < BM) cp_async4(sc + t, s_ok ? s_src + kt : job.As, s_ok);
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const bool ok = b_ok && kq0 + kt * (TH_BK / 4) + 4 * i < job.ldq;
                cp_async16(bs + i * (TH_BN * 4) + t, ok ? b_src + kt * (TH_BK / 4) + 4 * i : job.B16, ok);
            }
        };
#pragma unroll
        for (int i = 0; i < TP_STAGES - 1; i++) {
            if (i < nk) load_stage(i, i);
            cp_async_commit();
        }
        const int lrow = (lane & 7) + ((lane >> 3) & 1) * 8, lblk = lane >> 4;
        for (int kt = 0; kt < nk; kt++) {
            cp_async_wait_stages(); /* stage kt has landed, for this thread's copies */
            __syncthreads();        /* for every thread's; and every read of stage kt − 1 is done */
            if (kt + TP_STAGES - 1 < nk) load_stage((kt + TP_STAGES - 1) % TP_STAGES, kt + TP_STAGES - 1);
            cp_async_commit();
            const uint4* const as = th_smem + (kt % TP_STAGES) * TP_STAGE_OF(BM);
            const uint4* const bs = as + BM * TP_LDA;
            const float* const sc = (const float*)(bs + TH_STAGE_B);
            float acc[MI][4][4];
            zero_fragments(acc);
#pragma unroll
            for (int s = 0; s < 2; s++) {
                uint4 b[4], ah[MI], al[MI];
#pragma unroll
                for (int ni = 0; ni < 4; ni++) b[ni] = bs[s * (TH_BN * 4) + (wn + ni * 8 + g) * 4 + q];
#pragma unroll
                for (int mi = 0; mi < MI; mi++) {
                    const uint4* at = as + (wm + mi * 16 + lrow) * TP_LDA + 2 * s + lblk;
                    ldmatrix_x4(ah[mi], at);
                    ldmatrix_x4(al[mi], at + 4);
                }
                mma_pair_step(acc, ah, al, b);
            }
            add_stage(sum, acc, sc, wm, g);
        }
        cp_async_wait_all();
        __syncthreads(); /* the shared memory is free (big_output reuses it) */
    } else {
        uint4* const As = th_smem;                               /* [2][8 tiles][2 steps][hi, lo][32 lanes] */
        uint4* const Bs = th_smem + 2 * TH_STAGE_A;              /* [2][2 steps][64 columns][4 lanes] */
        float* const Sc = (float*)(th_smem + 2 * (TH_STAGE_A + TH_STAGE_B)); /* [2][128]: 1 / each row's scale */
        /* This thread reads and splits, for 16-row tile `warp` of the block, lane (g, q)'s fragments of
           both 16-k steps of a stage: rows g and g + 8, k 4q .. 4q+3 of each step. */
        const int ar = row0 + warp * 16 + g;
        float4 x[2][2]; /* [step][row g, g + 8] */
        auto fetch_a = [&](int kt) {
#pragma unroll
            for (int s = 0; s < 2; s++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = ar + 8 * h, k = kbegin + kt * TH_BK + 16 * s + 4 * q;
                    x[s][h] = r < job.m && k < kend ? __ldcg((const float4*)(job.A + (size_t)r * job.lda + k)) : make_float4(0.f, 0.f, 0.f, 0.f);
                }
        };
        auto store_a = [&](int buf) {
            float sc[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float mx = 0.f;
#pragma unroll
                for (int s = 0; s < 2; s++) mx = fmaxf(mx, fmaxf(fmaxf(fabsf(x[s][h].x), fabsf(x[s][h].y)), fmaxf(fabsf(x[s][h].z), fabsf(x[s][h].w))));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2)); /* the row's 32 k of this stage */
                sc[h] = fp16_scale(mx);
                if (q == 0) Sc[buf * TH_BM + warp * 16 + g + 8 * h] = fp16_inverse_scale(sc[h]);
            }
#pragma unroll
            for (int s = 0; s < 2; s++) {
                uint4 hi, lo; /* (a0, a1, a2, a3) = (row g, k 4q..4q+1), (g + 8, same), (g, 4q+2..4q+3), (g + 8, same) */
                fp16_split(x[s][0].x * sc[0], x[s][0].y * sc[0], hi.x, lo.x);
                fp16_split(x[s][1].x * sc[1], x[s][1].y * sc[1], hi.y, lo.y);
                fp16_split(x[s][0].z * sc[0], x[s][0].w * sc[0], hi.z, lo.z);
                fp16_split(x[s][1].z * sc[1], x[s][1].w * sc[1], hi.w, lo.w);
                uint4* at = As + (size_t)(((buf * 8 + warp) * 2 + s) * 2) * 32 + lane;
                at[0] = hi, at[32] = lo;
            }
        };
        /* the weights' fragments of stage kt: 512 uint4, 2 per thread (step i, column e / 4, lane e mod 4);
           past kend they meet zeros of A */
        auto load_b = [&](int buf, int kt) {
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int e = t, n = e / 4, kq = kbegin / 4 + kt * (TH_BK / 4) + 4 * i + e % 4;
                const bool ok = col0 + n < job.n && kq < job.ldq;
                cp_async16(Bs + (buf * 2 + i) * (TH_BN * 4) + e, ok ? job.B16 + (size_t)(col0 + n) * job.ldq + kq : job.B16, ok);
            }
        };
        const int nk = (kend - kbegin + TH_BK - 1) / TH_BK;
        if (nk > 0) {
            fetch_a(0);
            load_b(0, 0);
            cp_async_commit();
            store_a(0);
            cp_async_wait_all();
        }
        __syncthreads();
        for (int kt = 0; kt < nk; kt++) {
            const int buf = kt & 1;
            const bool more = kt + 1 < nk;
            if (more) {
                fetch_a(kt + 1);
                load_b(buf ^ 1, kt + 1);
                cp_async_commit();
            }
            float acc[2][4][4];
            zero_fragments(acc);
#pragma unroll
            for (int s = 0; s < 2; s++) {
                uint4 b[4], ah[2], al[2]; /* B: (hi k 4q..4q+1, hi 4q+2..4q+3, lo, lo) of column wn + 8·ni + g */
#pragma unroll
                for (int ni = 0; ni < 4; ni++) b[ni] = Bs[(buf * 2 + s) * (TH_BN * 4) + (wn + ni * 8 + g) * 4 + q];
#pragma unroll
                for (int mi = 0; mi < 2; mi++) {
                    const uint4* at = As + (size_t)(((buf * 8 + wm / 16 + mi) * 2 + s) * 2) * 32 + lane;
                    ah[mi] = at[0], al[mi] = at[32];
                }
                mma_pair_step(acc, ah, al, b);
            }
            add_stage(sum, acc, Sc, buf * TH_BM + wm, g);
            if (more) store_a(buf ^ 1);
            cp_async_wait_all();
            __syncthreads(); /* stage kt + 1 is in place, and every read of stage kt is done */
        }
    }
    /* C fragment: rows g and g + 8, columns 2q and 2q + 1 of each 16×8 (n is a multiple of 4: both
       or neither in range), the weights' scale undone. Split over k: the part's sums into the
       workspace, added in part order by the tile's last block (splitk_fixup). */
    if constexpr (SPLIT) {
#pragma unroll
        for (int mi = 0; mi < MI; mi++)
#pragma unroll
            for (int ni = 0; ni < 4; ni++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = row0 + wm + mi * 16 + g + 8 * h, col = col0 + wn + ni * 8 + 2 * q;
                    if (r < job.m && col < job.n)
                        *(float2*)(job.partial + ((size_t)part * job.m + r) * job.n + col) =
                            make_float2(sum[mi][ni][2 * h] * job.wscale, sum[mi][ni][2 * h + 1] * job.wscale);
                }
        splitk_fixup<float, EPI>(job, ksplit, row0, BM, col0, TH_BN,
                                 counters + ((size_t)(blockIdx.z / ksplit) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x);
    } else if constexpr (EPI == EPI_OUT) {
        big_output(job, row0, col0, wm, wn, sum, fuse, (float*)th_smem);
    } else {
        /* The epilogue's operands are all requested before the first store (see epilogue_with); C,
           aux and bias allow 8-byte accesses (the plan). */
        float2 op[MI][4][2]; /* [mi][ni][row g, g + 8] */
#pragma unroll
        for (int mi = 0; mi < MI; mi++)
#pragma unroll
            for (int ni = 0; ni < 4; ni++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = row0 + wm + mi * 16 + g + 8 * h, col = col0 + wn + ni * 8 + 2 * q;
                    op[mi][ni][h] = make_float2(0.f, 0.f);
                    if (EPI == EPI_DERIV && r < job.m && col < job.n) op[mi][ni][h] = __ldg((const float2*)(job.aux + (size_t)r * job.ldaux + col));
                    if ((EPI == EPI_BIAS || EPI == EPI_BIAS_CELU) && mi == 0 && h == 0 && col < job.n) op[0][ni][0] = __ldg((const float2*)(job.bias + col));
                }
        float2 v[MI][4][2];
#pragma unroll
        for (int mi = 0; mi < MI; mi++)
#pragma unroll
            for (int ni = 0; ni < 4; ni++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = row0 + wm + mi * 16 + g + 8 * h, col = col0 + wn + ni * 8 + 2 * q;
                    const float2 o = EPI == EPI_DERIV ? op[mi][ni][h] : op[0][ni][0];
                    v[mi][ni][h] = make_float2(epilogue_with(EPI, sum[mi][ni][2 * h] * job.wscale, o.x),
                                               epilogue_with(EPI, sum[mi][ni][2 * h + 1] * job.wscale, o.y));
                    if (r < job.m && col < job.n && job.C != NULL) *(float2*)(job.C + (size_t)r * job.ldc + col) = v[mi][ni][h];
                }
        /* for the next product, presplit (the plan sets Cp only where n is a multiple of 32, and C = NULL
           where the float32 results are not read: EPI_DERIV); rows past m are not written, so their
           values do not matter */
        if (job.Cp != NULL && col0 + wn < job.n)
            write_presplit(v, job.Cp, job.Cs, job.ldcp, job.ldcs, (col0 + wn) / PRE_CHUNK, row0 + wm, job.m,
                           (unsigned*)(th_smem + PRE_STAGE_AT) + warp * 32 * PRE_STAGE_LD);
    }
}
