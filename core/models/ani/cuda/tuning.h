/*
 * Internal to libnnp, not part of its API: the tuning table of the CUDA evaluation (one per plan).
 */
#ifndef NNP_CUDA_TUNING_H
#define NNP_CUDA_TUNING_H

#include "nnp.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NNP_CUDA_MAX_CLASSES 8 /* classes of first-layer prefixes (see nnp_cuda_plan_aev_layout) */

/*
 * The tuning table: every choice of the CUDA evaluation that is not forced by the shapes, with its
 * default in nnp_cuda_tuning_defaults() and nowhere else. Every plan starts with the defaults. The
 * variants exist because tests compare them (bit for bit where the comment says "same bits") or
 * because other GPUs need them; nothing outside libnnp's own tests and benchmarks should change them.
 */
typedef struct nnp_cuda_tuning {
    /* AEV layout (nnp_cuda_plan_aev_layout) */
    int max_classes;      /* most classes of first-layer prefixes, 1..NNP_CUDA_MAX_CLASSES (default 4) */
    double class_rows;    /* rows allowed per class and element for partly filled tiles (64; 0 lets small classes stand alone) */
    /* GEMM launches (nnp_cuda_plan_gemm) */
    int split_k;          /* k values per split-K part of the SIMT kernel (32) */
    int split_k_few_rows; /* k values per part of the few-rows kernels (256) */
    int split_max;        /* most split-K parts of a launch (64) */
    int split_k_tensor;   /* k values per part of k_gemm_big_h for middle row counts (256) */
    int middle_tile_rows; /* rows per tile of k_gemm_big_h for middle row counts, where its activations are
                             presplit: 64 (default) or 128; same bits */
    int big_tensor_cores; /* more than 32 rows in float32, where aligned, on the tensor cores: k_gemm_big_h (FP16
                             pairs, 1, default); 0: the SIMT kernels (k_gemm_big, k_gemm + k_gemm_reduce) */
    int cluster_split_k;  /* k_gemm_mma's parts added in thread-block clusters where the GPU has them (1),
                             else by each tile's last block; same bits */
    int defer_split_k;    /* the last backward GEMM's parts added by the split AEV backward (1), else by the
                             GEMM's last blocks; same bits */
    int fuse_output;      /* the output layer inside the last hidden layer's forward where that runs on
                             k_gemm_mma or k_gemm_big_h without split-K (1), else k_output */
    int presplit;         /* k_gemm_big_h (split over k or not) reads its activations split into FP16 pairs once, by
                             k_presplit, instead of by each of its blocks (1); same bits */
    /* AEV kernels (nnp_cuda_plan_aev_kernels) */
    int aev_slices;       /* blocks per atom of k_aev for few atoms: 0 chooses (default), 1 none, n forces n */
    int bwd_slices;       /* blocks per atom of the split AEV backward: 0 chooses (default), 1 none, n forces n (<= 64) */
    /* Launches */
    int pdl;              /* programmatic dependent launches on compute capability >= 9.0 (1) */
} nnp_cuda_tuning;

NNP_API void nnp_cuda_tuning_defaults(nnp_cuda_tuning* tuning);

/* Internal (tests and benchmarks only): the plan's tuning table; the next CUDA evaluation outside
   capture makes new buffers with it. NULL restores the defaults. */
NNP_API nnp_status nnp_plan_set_cuda_tuning_internal(nnp_plan* plan, const nnp_cuda_tuning* tuning);
NNP_API nnp_status nnp_plan_get_cuda_tuning_internal(const nnp_plan* plan, nnp_cuda_tuning* tuning);

/* Internal (tests only): how each GEMM launch of the plan's last CUDA evaluation reads its
   activations, in launch order (the forward layers, then the backward from the last layer):
   NNP_CUDA_A_FLOAT32, NNP_CUDA_A_PRESPLIT (split into FP16 pairs by k_presplit just before),
   NNP_CUDA_A_BY_PRODUCER (written as pairs by the launch before). modes: room for 2 · NNP_MAX_LAYERS;
   *n: the launches. */
enum { NNP_CUDA_A_FLOAT32 = 0, NNP_CUDA_A_PRESPLIT = 1, NNP_CUDA_A_BY_PRODUCER = 2 };
NNP_API nnp_status nnp_cuda_activations_internal(nnp_plan* plan, int32_t* modes, int32_t* n);

#ifdef __cplusplus
}
#endif

#endif
