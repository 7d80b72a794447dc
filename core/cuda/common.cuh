/*
 * What every family's CUDA evaluation shares (included by each family's translation unit): error
 * checks, vector types, the maths functions in both precisions, fixed-point force accumulation,
 * programmatic dependent launch, and the CUDA driver functions found at run time.
 */
#pragma once

#include "../src/internal.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stddef.h>

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

/* Thread-block clusters (sm_90 and later): the blocks in this block's cluster (1 without one), a
   barrier over them that also orders their shared-memory writes before the reads after it, and
   block `rank`'s copy of a shared variable (ld.shared::cluster). */
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
/* The two halves of cluster_barrier, for a block that signals without waiting: arrive (relaxed:
   orders nothing; release: this thread's earlier writes, remote shared memory included, are visible
   to the threads that wait after it) and wait (acquire). Each thread alternates them; a thread
   that has exited no longer holds a barrier up. */
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_arrive_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}
/* Stores v into block `rank`'s copy of the shared variable *p (st.shared::cluster). */
__device__ __forceinline__ void cluster_store(float* p, int rank, float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned local = (unsigned)__cvta_generic_to_shared(p), remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(remote), "f"(v) : "memory");
#endif
}
__device__ __forceinline__ void cluster_store(double* p, int rank, double v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned local = (unsigned)__cvta_generic_to_shared(p), remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    asm volatile("st.shared::cluster.f64 [%0], %1;" ::"r"(remote), "d"(v) : "memory");
#endif
}
__device__ __forceinline__ float cluster_load(const float* p, int rank) {
    float v = 0.f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned local = (unsigned)__cvta_generic_to_shared(p), remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
#endif
    return v;
}
__device__ __forceinline__ double cluster_load(const double* p, int rank) {
    double v = 0.0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned local = (unsigned)__cvta_generic_to_shared(p), remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    asm volatile("ld.shared::cluster.f64 %0, [%1];" : "=d"(v) : "r"(remote) : "memory");
#endif
    return v;
}

/* Copies from global to shared memory, asynchronously (cp.async); zeros where !valid (src is then
   not read). cp_async_commit closes a group of them, cp_async_wait_all waits for every group. */
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async8(void* dst, const void* src, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(s), "l"(src), "r"(valid ? 8 : 0) : "memory");
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(s), "l"(src), "r"(valid ? 4 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

/* Launches a kernel, as a programmatic dependent launch when pdl is set (see pdl_wait), in
   thread-block clusters of the given shape where it has more than one block (launch_kc: cluster_z
   blocks along z). */
template <typename... KArgs, typename... Args>
static void launch_kc3(bool pdl, dim3 cluster, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       Args... args) {
    cudaLaunchAttribute attr[2] = {};
    unsigned n = 0;
    if (pdl) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster.x * cluster.y * cluster.z > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = cluster.x, attr[n].val.clusterDim.y = cluster.y, attr[n++].val.clusterDim.z = cluster.z;
    }
    cudaLaunchConfig_t config = {};
    config.gridDim = grid, config.blockDim = block, config.dynamicSmemBytes = smem, config.stream = stream;
    config.attrs = attr, config.numAttrs = n;
    cudaLaunchKernelEx(&config, kernel, args...);
}
template <typename... KArgs, typename... Args>
static void launch_kc(bool pdl, unsigned cluster_z, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                      Args... args) {
    launch_kc3(pdl, dim3(1, 1, cluster_z), kernel, grid, block, smem, stream, args...);
}
template <typename... KArgs, typename... Args>
static void launch_k(bool pdl, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args... args) {
    launch_kc(pdl, 1, kernel, grid, block, smem, stream, args...);
}

__host__ __device__ static inline size_t align16(size_t bytes) { return (bytes + 15) / 16 * 16; }

/* Driver API functions, found through the runtime (so libnnp needs no libcuda at load time and
   loads on machines without a GPU driver); nnp_cuda_load_driver fills the table once (nnp_cuda.cu). */
typedef CUresult (*PFN_streamIsCapturing)(CUstream, CUstreamCaptureStatus*);
typedef CUresult (*PFN_ctxGetCurrent)(CUcontext*);
typedef CUresult (*PFN_ctxPushCurrent)(CUcontext);
typedef CUresult (*PFN_ctxPopCurrent)(CUcontext*);
struct nnp_cuda_driver_table {
    int loaded;
    PFN_streamIsCapturing streamIsCapturing;
    PFN_ctxGetCurrent ctxGetCurrent;
    PFN_ctxPushCurrent ctxPushCurrent;
    PFN_ctxPopCurrent ctxPopCurrent;
};
extern nnp_cuda_driver_table nnp_cuda_driver;
nnp_status nnp_cuda_load_driver(void);

/* Lets a kernel take up to all of the opt-in shared memory per block as dynamic shared memory (the
   device's most, less its static shared memory), for launches over 48 KB. The largest, not a plan's
   own need: the attribute belongs to the kernel in every CUDA context of the process (CUDA ≥ 12), so
   a smaller value set for another plan (another Context, another device of the same Context) would
   make this plan's launches fail. */
template <typename K> static void allow_dynamic_smem(K* kernel) {
    cudaFuncAttributes a;
    int device = 0, optin = 0;
    if (cudaFuncGetAttributes(&a, kernel) != cudaSuccess || cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
        return;
    if (optin > (int)a.sharedSizeBytes && a.maxDynamicSharedSizeBytes < optin - (int)a.sharedSizeBytes)
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin - (int)a.sharedSizeBytes);
}
