/*
 * compute-sanitizer racecheck with a kernel filter that leaves out a kernel reading distributed
 * shared memory (a thread-block cluster's ld.shared::cluster, as k_gemm_mma's cluster_fixup does):
 * does the sanitizer handle it? (docs/cuda.md, "compute-sanitizer and clusters")
 *   nvcc -arch=sm_90 -o /tmp/repro scripts/sanitizer-cluster-repro.cu
 *   /tmp/repro                                   # prints "ok" natively
 *   compute-sanitizer --tool racecheck --kernel-name kns=other /tmp/repro   # cluster kernel not instrumented
 *   compute-sanitizer --tool racecheck --kernel-name kns=k_cluster /tmp/repro
 */
#include <cuda_runtime.h>
#include <stdio.h>

__device__ __forceinline__ float cluster_load(const float* p, unsigned rank) {
    unsigned local = (unsigned)__cvta_generic_to_shared(p), remote;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
    return v;
}
__device__ __forceinline__ void cluster_barrier() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
/* Clusters of 2 along z: each block leaves 256 values, then adds its partner's to its own. */
__global__ void k_cluster(float* out) {
    __shared__ float mine[256];
    const unsigned rank = blockIdx.z % 2;
    mine[threadIdx.x] = (float)(blockIdx.z * 256 + threadIdx.x);
    cluster_barrier();
    const float other = cluster_load(&mine[threadIdx.x], rank ^ 1u);
    out[blockIdx.z * 256 + threadIdx.x] = mine[threadIdx.x] + other;
    cluster_barrier();
}
__global__ void k_other(float* out) {
    __shared__ float s[256];
    s[threadIdx.x] = out[threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = s[255 - threadIdx.x];
}

int main() {
    const int blocks = 64;
    float* d;
    cudaMalloc((void**)&d, sizeof(float) * 256 * blocks);
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 1, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 2;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(1, 1, blocks), config.blockDim = dim3(256), config.attrs = &attr, config.numAttrs = 1;
    for (int r = 0; r < 3; r++) {
        cudaLaunchKernelEx(&config, k_cluster, d);
        k_other<<<1, 256>>>(d);
    }
    cudaError_t e = cudaDeviceSynchronize();
    static float h[256 * 64];
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    /* after the last k_cluster: block z, thread t holds (z·256 + t) + ((z^1)·256 + t); k_other then
       reversed block 0's values: out[t] = value of thread 255 - t of block 0 */
    int bad = 0;
    for (int z = 1; z < blocks; z++)
        for (int t = 0; t < 256; t++) bad += h[z * 256 + t] != (float)(z * 256 + t + (z ^ 1) * 256 + t);
    for (int t = 0; t < 256; t++) bad += h[t] != (float)(2 * (255 - t) + 256);
    printf("%s (%s, %d wrong)\n", e == cudaSuccess && bad == 0 ? "ok" : "FAILED", cudaGetErrorString(e), bad);
    return e == cudaSuccess && bad == 0 ? 0 : 1;
}
