/*
 * Device helpers shared by every part of the CUDA evaluation: error checks, vector types, the
 * maths functions in both precisions, CELU, fixed-point force accumulation, programmatic dependent
 * launch, and the ordered sum of split-K parts. The shapes the kernels and the plan share.
 */
#define NNP_PI_F 3.14159265358979323846
#define AEV_THREADS NNP_CUDA_AEV_THREADS         /* the AEV kernels' block size, */
#define AEV_MAX_THREADS NNP_CUDA_AEV_MAX_THREADS /* and k_aev's for few atoms (more warps share each atom's pairs) */
#define BWD_THREADS 64 /* k_aev_backward's, one block per atom, */
#define BWD_BLOCKS 14  /* of which at least this many per SM (registers capped at 72: 28 warps per SM instead of 24) */
#define BWD_SHFZ 8 /* k_aev_backward (one block per atom): the ShfZ terms whose f1 one thread holds at once */
#define GEMM_TILE 64
#define GEMM_K NNP_CUDA_GEMM_K
#define NNP_MAX_PAIRS NNP_CUDA_MAX_PAIRS

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
__device__ __forceinline__ float dpow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double dpow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float dsqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double dsqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float dexpm1(float x) { return expm1f(x); }
__device__ __forceinline__ double dexpm1(double x) { return expm1(x); }

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

__device__ __forceinline__ void add_fixed(unsigned long long* target, double value) {
    atomicAdd(target, (unsigned long long)((long long)(value * (double)0x100000000LL)));
}

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
