/*
 * What the parts of ANI's CUDA evaluation share: the shapes the kernels and the plan share, CELU
 * in both precisions, and the ordered sum of split-K parts.
 */
#pragma once

#include "../../../cuda/common.cuh"
#include "../ani.h"
#include "plan.h"

#include <cuda_fp16.h>

#define NNP_PI_F 3.14159265358979323846
#define AEV_THREADS NNP_CUDA_AEV_THREADS         /* the AEV kernels' block size, */
#define AEV_MAX_THREADS NNP_CUDA_AEV_MAX_THREADS /* and k_aev's for few atoms (more warps share each atom's pairs) */
#define BWD_THREADS 64 /* k_aev_backward's, one block per atom, */
#define BWD_BLOCKS 14  /* of which at least this many per SM (registers capped at 72: 28 warps per SM instead of 24) */
#define BWD_SHFZ 8 /* k_aev_backward (one block per atom): the ShfZ terms whose f1 one thread holds at once */
#define GEMM_TILE 64
#define GEMM_K NNP_CUDA_GEMM_K
#define NNP_MAX_PAIRS NNP_CUDA_MAX_PAIRS

/*
 * expm1(x) for float x <= 0, within about one ulp (docs/cuda.md, Precision), in fused multiply-adds
 * without branches (expm1f also handles the ranges this never sees): x = j·ln2 + r with |r| <= ln2/2
 * (Cody–Waite: j·ln2's high part is exact for |j| < 512), expm1(r) by its Taylor series to r^8
 * (remainder below 3e-10 of r), then 2^j·(1 + expm1(r)) − 1 = fma(2^j, expm1(r), 2^j − 1), where
 * 2^j − 1 is exact for j >= −24 and −1 to float precision below. x is clamped at −80 (expm1 is −1
 * to float precision from −17), which keeps 2^j normal.
 */
__device__ __forceinline__ float expm1_nonpositive(float x) {
    x = fmaxf(x, -80.f);
    const float j = rintf(x * 1.44269504f);
    float r = fmaf(j, -0.693145751953125f, x); /* ln2's high part: 0x3f317200 */
    r = fmaf(j, -1.42860677e-6f, r);            /* and the rest: ln2 − 0x1.62e4p-1 */
    float c = fmaf(r, 1.f / 40320.f, 1.f / 5040.f);
    c = fmaf(r, c, 1.f / 720.f);
    c = fmaf(r, c, 1.f / 120.f);
    c = fmaf(r, c, 1.f / 24.f);
    c = fmaf(r, c, 1.f / 6.f);
    c = fmaf(r, c, 0.5f);
    const float p = fmaf(r * r, c, r);
    const float s = __int_as_float(((int)j + 127) << 23);
    return fmaf(s, p, s - 1.f);
}

/* CELU(α = 0.1) and its derivative expressed through the output y (exp(z/α) = y/α + 1). In float,
   z/α as z·10 (1/α is 10 exactly: closer to the double evaluation than a division by 0.1f, and no
   division's instruction sequence) and expm1 by expm1_nonpositive; in double, as written. */
template <typename real> __device__ __forceinline__ real celu(real z) {
    return z > 0 ? z : (real)NNP_CELU_ALPHA * dexpm1(z / (real)NNP_CELU_ALPHA);
}
template <> __device__ __forceinline__ float celu(float z) {
    return z > 0.f ? z : (float)NNP_CELU_ALPHA * expm1_nonpositive(z * (float)(1.0 / NNP_CELU_ALPHA));
}
template <typename real> __device__ __forceinline__ real celu_deriv_from_output(real y) {
    return y > 0 ? (real)1 : y / (real)NNP_CELU_ALPHA + (real)1;
}
template <> __device__ __forceinline__ float celu_deriv_from_output(float y) {
    return y > 0.f ? 1.f : fmaf(y, (float)(1.0 / NNP_CELU_ALPHA), 1.f);
}

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
