/*
 * cuBLAS on the network GEMMs of the 837-molecule benchmark (ANI-2x ×8, the drug-like set's
 * 18,557 H, 14,084 C, 1,784 N and 2,680 O rows), for comparison with libnnp's own kernels
 * (docs/benchmarks.md). Per element, as libnnp forms them: the first layer's forward as one GEMM
 * over the 8 members (rows × 1,008 AEV features → rows × 8·width; libnnp's first layer uses only
 * the stored features of each class, at most these 1,008), the other layers per member (batched),
 * and the backward products with the weights untransposed, the first layer's back to the 1,008
 * features. Each pass is timed from CUDA events over 20 repetitions after 3 warm-ups, per layer and
 * in all, in cuBLAS's float32 (CUBLAS_COMPUTE_32F), TF32 (CUBLAS_COMPUTE_32F_FAST_TF32) and FP16
 * (CUBLAS_COMPUTE_32F_FAST_16F) modes; the two fast modes' error against float32 is printed for the
 * H first layer (random operands in [-1, 1]), and whether two float32 runs give the same bits.
 *
 *   nvcc -O3 -arch=sm_90 bench/gemm_cublas.cu -lcublas -o gemm_cublas && ./gemm_cublas
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));    \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)
#define CB(x)                                                                     \
    do {                                                                          \
        cublasStatus_t s_ = (x);                                                  \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                        \
            fprintf(stderr, "%s:%d: cuBLAS status %d\n", __FILE__, __LINE__, (int)s_); \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

struct Element {
    const char* name;
    int rows, width[3];
};
static const Element elements[] = {{"H", 18557, {256, 192, 160}}, {"C", 14084, {224, 192, 160}}, {"N", 1784, {192, 160, 128}}, {"O", 2680, {192, 160, 128}}};
static const int AEV = 1008, MEMBERS = 8;

/* Row-major C[m × n] = A[m × k] · op(B), op(B) = Bᵀ for B [n × k] (trans) or B [k × n], rows lda
   and ldc apart, in `batch` products sa, sb, sc apart (the members' column blocks): column-major
   Cᶜ[n × m] = op(Bᶜ) · Aᶜ. */
static void gemm(cublasHandle_t h, cublasComputeType_t mode, bool trans, int m, int n, int k, const float* A, int lda, long long sa,
                 const float* B, long long sb, float* C, int ldc, long long sc, int batch) {
    const float one = 1.f, zero = 0.f;
    CB(cublasGemmStridedBatchedEx(h, trans ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, B, CUDA_R_32F, trans ? k : n, sb, A,
                                  CUDA_R_32F, lda, sa, &zero, C, CUDA_R_32F, ldc, sc, batch, mode, CUBLAS_GEMM_DEFAULT));
}

int main() {
    cublasHandle_t h;
    CB(cublasCreate(&h));
    size_t most = 0;
    for (const Element& e : elements) most = std::max(most, (size_t)e.rows * std::max(AEV, MEMBERS * e.width[0]));
    float *X, *Y, *W;
    CK(cudaMalloc(&X, most * sizeof(float)));
    CK(cudaMalloc(&Y, most * sizeof(float)));
    CK(cudaMalloc(&W, (size_t)AEV * MEMBERS * 256 * sizeof(float)));
    {
        std::vector<float> host(most);
        srand(1);
        for (size_t i = 0; i < most; i++) host[i] = 2.f * rand() / RAND_MAX - 1.f;
        CK(cudaMemcpy(X, host.data(), most * sizeof(float), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(W, host.data(), (size_t)AEV * MEMBERS * 256 * sizeof(float), cudaMemcpyHostToDevice));
    }
    const cublasComputeType_t modes[] = {CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_COMPUTE_32F_FAST_16F};
    const char* mode_names[] = {"float32 (CUBLAS_COMPUTE_32F)", "TF32 (CUBLAS_COMPUTE_32F_FAST_TF32)", "FP16 (CUBLAS_COMPUTE_32F_FAST_16F)"};
    cudaEvent_t ev[7];
    for (cudaEvent_t& e : ev) CK(cudaEventCreate(&e));
    printf("cuBLAS %d, the 837-molecule GEMM shapes (ANI-2x x8; H 18557, C 14084, N 1784, O 2680 rows)\n", CUBLAS_VERSION);
    for (int mi = 0; mi < 3; mi++) {
        const cublasComputeType_t mode = modes[mi];
        double t[6] = {0};
        for (int rep = 0; rep < 23; rep++) {
            CK(cudaEventRecord(ev[0]));
            for (int layer = 0; layer < 3; layer++) { /* forward */
                for (const Element& e : elements) {
                    const int w = e.width[layer];
                    const int p = layer > 0 ? e.width[layer - 1] : 0;
                    if (layer == 0) gemm(h, mode, true, e.rows, MEMBERS * w, AEV, X, AEV, 0, W, 0, Y, MEMBERS * w, 0, 1);
                    else gemm(h, mode, true, e.rows, w, p, X, MEMBERS * p, p, W, (long long)w * p, Y, MEMBERS * w, w, MEMBERS);
                }
                CK(cudaEventRecord(ev[1 + layer]));
            }
            for (int layer = 2; layer >= 0; layer--) { /* backward: delta of layer-1 from delta of layer */
                for (const Element& e : elements) {
                    const int w = e.width[layer];
                    const int p = layer > 0 ? e.width[layer - 1] : 0;
                    if (layer == 0) gemm(h, mode, false, e.rows, AEV, MEMBERS * w, X, MEMBERS * w, 0, W, 0, Y, AEV, 0, 1);
                    else gemm(h, mode, false, e.rows, p, w, X, MEMBERS * w, w, W, (long long)w * p, Y, MEMBERS * p, p, MEMBERS);
                }
                CK(cudaEventRecord(ev[6 - layer]));
            }
            CK(cudaEventSynchronize(ev[6]));
            if (rep < 3) continue;
            for (int i = 0; i < 6; i++) {
                float ms;
                CK(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
                t[i] += 1000.0 * ms / 20;
            }
        }
        printf("%-38s forward %8.1f us (layers %.1f, %.1f, %.1f), backward %8.1f us (layers 3->2 %.1f, 2->1 %.1f, 1->AEV %.1f)\n", mode_names[mi],
               t[0] + t[1] + t[2], t[0], t[1], t[2], t[3] + t[4] + t[5], t[3], t[4], t[5]);
    }
    /* accuracy of the fast modes on the H first layer, and float32's run-to-run bits */
    const Element& e = elements[0];
    const size_t count = (size_t)e.rows * MEMBERS * e.width[0];
    std::vector<float> ref(count), out(count);
    gemm(h, CUBLAS_COMPUTE_32F, true, e.rows, MEMBERS * e.width[0], AEV, X, AEV, 0, W, 0, Y, MEMBERS * e.width[0], 0, 1);
    CK(cudaMemcpy(ref.data(), Y, count * sizeof(float), cudaMemcpyDeviceToHost));
    gemm(h, CUBLAS_COMPUTE_32F, true, e.rows, MEMBERS * e.width[0], AEV, X, AEV, 0, W, 0, Y, MEMBERS * e.width[0], 0, 1);
    CK(cudaMemcpy(out.data(), Y, count * sizeof(float), cudaMemcpyDeviceToHost));
    printf("float32 twice: %s\n", memcmp(ref.data(), out.data(), count * sizeof(float)) == 0 ? "bit-identical" : "DIFFERENT");
    for (int mi = 1; mi < 3; mi++) {
        gemm(h, modes[mi], true, e.rows, MEMBERS * e.width[0], AEV, X, AEV, 0, W, 0, Y, MEMBERS * e.width[0], 0, 1);
        CK(cudaMemcpy(out.data(), Y, count * sizeof(float), cudaMemcpyDeviceToHost));
        double d = 0, r = 0;
        for (size_t i = 0; i < count; i++) d += (double)(out[i] - ref[i]) * (out[i] - ref[i]), r += (double)ref[i] * ref[i];
        printf("%-38s H first layer: relative RMS difference from float32 %.2e\n", mode_names[mi], sqrt(d / r));
    }
    cublasDestroy(h);
    return 0;
}
