/*
 * The networks' matrix products: the job tables (GemmJob, OutputJob), the epilogues, the split-K
 * fix-up by the last block of a tile, and the SIMT kernel for middle row counts (k_gemm, split over
 * k, with k_gemm_reduce). The kernels for many rows are in gemm_big.cuh, for few rows in
 * gemm_few_rows.cuh; nnp_cuda_plan_gemm (plan.c) chooses one per launch.
 */
#pragma once

#include "ani.cuh"

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
    /* k_gemm_mma (float32, few rows): op(B) split into FP16 pairs and scaled (see split_fp16_weights in build.cuh): per
       column n, ldq uint4 of 4 k each; wscale = 1 / the scale */
    const uint4* B16;
    int ldq;
    float wscale;
    /* k_gemm_big_h with presplit activations (see k_presplit): A as FP16 pairs, ldp uint4 per row, and
       each row's inverse scales, lds per row (both 0 where A is read as float32) */
    const uint4* Ap;
    const float* As;
    int ldp, lds;
    /* k_gemm_big_h without split-K whose results the next product reads presplit: C also (EPI_BIAS_CELU)
       or only (EPI_DERIV: C = NULL) as FP16 pairs and inverse scales, or NULL */
    uint4* Cp;
    float* Cs;
    int ldcp, ldcs;
};

/* FP16 pairs on the tensor cores (k_gemm_mma, k_gemm_big_h): mma.sync m16n8k16, FP16 inputs, float32 sums. */
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
/* The power of two that brings magnitudes up to mx below 2^14 (1 for 0, NaN or infinity):
   2^(14 − e) for mx < 2^e, e as small as possible, within float's normal range. For a normal mx of
   biased exponent E, e = E − 126, so the scale's biased exponent is min(254, 267 − E), read off the
   bits (frexpf and ldexpf cost the tensor-core kernels, which scale every row of every k-stage,
   about 40 instructions a call). */
__host__ __device__ inline float fp16_scale(float mx) {
    if (!(mx > 0.f) || isinf(mx)) return 1.f;
    unsigned u;
    memcpy(&u, &mx, sizeof u);
    int e = (int)(u >> 23) - 126;
    if (e == -126) frexpf(mx, &e); /* subnormal: mx < 2^e */
    const unsigned r = (unsigned)(min(127, max(-126, 14 - e)) + 127) << 23;
    float s;
    memcpy(&s, &r, sizeof s);
    return s;
}
/* 1 / s for a scale s of fp16_scale, exactly and without a division (with -prec-div=false a float
   division is an approximate reciprocal): s = 2^(E − 127) for its biased exponent E (1 to 254), so
   1 / s has biased exponent 254 − E; for E = 254 that is the subnormal 2^−127. */
__host__ __device__ inline float fp16_inverse_scale(float s) {
    unsigned u;
    memcpy(&u, &s, sizeof u);
    const unsigned e = u >> 23, r = e >= 254u ? 0x00400000u : (254u - e) << 23;
    float inv;
    memcpy(&inv, &r, sizeof inv);
    return inv;
}
template <typename real> __device__ __forceinline__ real epilogue(int epi, const GemmJob<real>& job, int gr, int gc, real v) {
    if (epi == EPI_BIAS || epi == EPI_BIAS_CELU) v += job.bias[gc];
    if (epi == EPI_BIAS_CELU) v = celu(v);
    if (epi == EPI_DERIV) v *= celu_deriv_from_output(job.aux[(size_t)gr * job.ldaux + gc]);
    return v;
}

/* The epilogue with its operand already loaded: bias[col] (EPI_BIAS, EPI_BIAS_CELU) or the layer's
   output aux[row, col] (EPI_DERIV); the kernels that request every operand before their first store
   use it (a load after a store waits for it: the compiler cannot know that they do not alias). */
template <typename real> __device__ __forceinline__ real epilogue_with(int epi, real v, real operand) {
    if (epi == EPI_BIAS || epi == EPI_BIAS_CELU) v += operand;
    if (epi == EPI_BIAS_CELU) v = celu(v);
    if (epi == EPI_DERIV) v *= celu_deriv_from_output(operand);
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
    /* FIXUP_ELEMS elements per thread at a time, every load of a group (their epilogue operands, then
       FIXUP_PARTS parts of each) requested before the group's first addition and its first store:
       one element after the other, each part's load waited for in turn, had left the tile's last
       block a chain of dependent L2 round trips. The sums: from 0, part by part, as sum_parts. */
    constexpr int FIXUP_ELEMS = 8, FIXUP_PARTS = 4;
    const size_t stride = (size_t)job.m * job.n;
    for (int e0 = 0; e0 < rows * cols; e0 += FIXUP_ELEMS * (int)blockDim.x) {
        real v[FIXUP_ELEMS], op[FIXUP_ELEMS];
        size_t at[FIXUP_ELEMS]; /* the element's place in part 0, or SIZE_MAX */
#pragma unroll
        for (int i = 0; i < FIXUP_ELEMS; i++) {
            const int e = e0 + i * (int)blockDim.x + (int)threadIdx.x, gr = row0 + e / cols, gc = col0 + e % cols;
            const bool ok = e < rows * cols && gr < job.m && gc < job.n;
            at[i] = ok ? (size_t)gr * job.n + gc : SIZE_MAX;
            v[i] = op[i] = real(0);
            if (ok && (EPI == EPI_BIAS || EPI == EPI_BIAS_CELU)) op[i] = job.bias[gc];
            if (ok && EPI == EPI_DERIV) op[i] = job.aux[(size_t)gr * job.ldaux + gc];
        }
        for (int p = 0; p < ksplit; p += FIXUP_PARTS) {
            real t[FIXUP_PARTS][FIXUP_ELEMS];
#pragma unroll
            for (int q = 0; q < FIXUP_PARTS; q++)
#pragma unroll
                for (int i = 0; i < FIXUP_ELEMS; i++)
                    t[q][i] = p + q < ksplit && at[i] != SIZE_MAX ? __ldcg(job.partial + at[i] + (size_t)(p + q) * stride) : real(0);
#pragma unroll
            for (int q = 0; q < FIXUP_PARTS; q++)
#pragma unroll
                for (int i = 0; i < FIXUP_ELEMS; i++)
                    if (p + q < ksplit) v[i] += t[q][i];
        }
#pragma unroll
        for (int i = 0; i < FIXUP_ELEMS; i++) {
            if (at[i] == SIZE_MAX) continue;
            const int e = e0 + i * (int)blockDim.x + (int)threadIdx.x, gr = row0 + e / cols, gc = col0 + e % cols;
            job.C[(size_t)gr * job.ldc + gc] = epilogue_with<real>(EPI, v[i], op[i]);
        }
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
    /* k_gemm_big_h's fused output when the first backward product reads presplit: delta only as FP16
       pairs and inverse scales (see GemmJob::Cp), or NULL */
    uint4* delta_p;
    float* delta_s;
    int ldp, lds;
};

/*
 * The output layer fused into the last hidden layer's forward (EPI_OUT; one molecule: k_gemm_mma
 * without split-K; many rows: k_gemm_big_h without split-K). Each block takes its tile's y =
 * celu(acc + bias) (y itself is not stored: nothing reads it): the first backward step delta =
 * scale · w_out ⊙ celu'(y) (with forces), and the tile's Σ_col w_out·y per row (lanes, then warps,
 * in a fixed order) into partial[z][tile][rows], z = element·members + member, rows = 16 (k_gemm_mma)
 * or the most rows of an element (k_gemm_big_h). The end of the evaluation (finish_evaluation; many
 * rows: k_output_rows) adds, per row, the tiles in order and then the members in order with their
 * biases, as k_output would: e = Σ_m scale·(Σ w·y + b_m).
 * The output weights and biases are requested before the wait for the earlier kernel.
 */
struct OutFuse {
    const OutputJob<float>* jobs; /* per element; GemmJob::group indexes them */
    float* partial;
    float scale;
    int with_forces;
    int rows; /* partial's row stride */
};
