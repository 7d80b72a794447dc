/*
 * Few rows (at most 32 per job, float32: one or a few molecules): split-K over many blocks, the
 * parts added in a fixed order by the tile's last block or inside a thread-block cluster;
 * k_gemm_skinny (SIMT) and k_gemm_mma (tensor cores on FP16 pairs, at most 16 rows).
 */
#pragma once

#include "gemm.cuh"

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

/*
 * Few rows (m <= SKINNY_M, float32): the step after split-K for one or a few molecules. A block
 * covers 64 columns and one k-range (chunks of SKINNY_K) for all m rows; the weights are read once,
 * straight from global memory, each thread's 16 consecutive k of a chunk requested one chunk ahead
 * (float4 loads along k for TRANS_B where aligned, coalesced along n otherwise), the activation rows
 * staged in shared memory. MR (SKINNY_M; at most 16 rows go to k_gemm_mma)
 * bounds the row loop at compile time: rows m..MR-1 are zeros in shared memory, so no row needs a
 * predicate, each float4 read from shared memory feeds 4 multiply-adds and the MR rows' sums are
 * independent chains.
 * The 4 partial sums of each output are added in a fixed order (a shuffle tree, or shared memory),
 * so the result does not depend on scheduling. Same grid (y = 1) and split-K partial layout as
 * k_gemm; the last block of each column tile adds the parts (splitk_fixup).
 */
#define SKINNY_M NNP_CUDA_FEW_ROWS
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
 * k_gemm_skinny.
 */
#define MMA_K 256
/* uint4 per staged step of activations: the 32 lanes' fragments and 4 of padding, so that steps of
   odd and even index start 16 banks apart. Each staging store of a warp covers 4 steps (2 pairs):
   with 32 uint4 per step they met in the same 8 banks (a 4-way conflict), with 36 in 16 (2-way).
   Measured on the H200 at one molecule: 55.1 -> 52.9 us per graph-replayed step (2026-11-30);
   two lanes per k (8 rows each), which removes the last 2-way conflict, measured the same. */
#define MMA_AROW 36
#define MMA_STEPS (MMA_K / 16) /* m16n8k16 steps per stage */
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
       of a step are one uint4 (split_fp16_weights). The activation fragments are staged in that order: per
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
           split_fp16_weights): one 16-byte load each, requested now */
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
        const float unscale = __fdiv_rn(job.wscale, scale); /* back to the operands' units (powers of two: exact) */
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
