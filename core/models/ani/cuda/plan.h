/*
 * Internal to libnnp, not part of its API: the host-side planning of the CUDA evaluation, in C, so
 * that it can be tested without a GPU (core/tests/test_cuda_plan.c). Given the plan's atoms, the
 * model, the facts of the device and the tuning table, it decides the stored AEV layout and the
 * classes of first-layer prefixes, the order of the network rows, the split-K of every GEMM launch
 * and its kernel, and the shapes of the AEV kernels. build.cuh turns these decisions into
 * device buffers and job tables; launch.cuh only reads them.
 */
#ifndef NNP_CUDA_PLAN_H
#define NNP_CUDA_PLAN_H

#include "../ani.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NNP_CUDA_MAX_NEIGHBORS 512  /* per atom, for batches larger than this plus one */
#define NNP_CUDA_AEV_THREADS 256    /* the AEV kernels' block size, */
#define NNP_CUDA_AEV_MAX_THREADS 1024 /* and k_aev's for fewer atoms than SMs */
#define NNP_CUDA_FEW_ROWS 32        /* rows per job up to which the few-rows GEMMs run (float32) */
#define NNP_CUDA_MMA_ROWS 16        /* of those, up to which the tensor-core one runs */
#define NNP_CUDA_SPLIT_ROWS 256     /* rows per job up to which a GEMM launch may be split over k */
#define NNP_CUDA_GEMM_K 16          /* k-step of the split-K SIMT kernel (parts are multiples of it) */

/* What the plan needs to know of the device (cudaDeviceGetAttribute). */
typedef struct nnp_cuda_device {
    int sms;            /* multiprocessors */
    int smem_optin;     /* bytes of shared memory a block may opt in to */
    int major;          /* compute capability */
    int clusters;       /* thread-block cluster launches */
} nnp_cuda_device;

#define NNP_CUDA_MAX_PAIRS (NNP_MAX_ELEMENTS * (NNP_MAX_ELEMENTS + 1) / 2)

/*
 * The stored AEV layout. Neighbours are atoms of the same batch, so in a batch the radial block of
 * element a can be non-zero only if the batch holds an atom of a, and the angular block of the
 * pair (a, b) only if it holds an a and a b (two a's when a = b). Blocks that no batch can fill are
 * zero for every atom: they are not stored, and the first layer's weights keep only the stored
 * columns, which removes their share of the two largest matrix products (62% of the first layer
 * for molecules of H, C, N and O under ANI-2x) without changing any sum's non-zero terms.
 *
 * Stored order: the live radial blocks (model order), then the live angular blocks, those that
 * more atoms need first (ties in model order). Each batch then needs a prefix of the stored row (up
 * to its last live block); the batches are grouped into at most tuning->max_classes classes of
 * prefix lengths (dynamic programming: least Σ length × (rows + class_rows × elements)), and each
 * class's rows multiply only their prefix in the first layer (forward and backward). The columns
 * past a row's prefix are zero for that atom (forward) and never read (backward).
 */
typedef struct nnp_aev_layout {
    int length;                                /* stored features per row */
    int angular0;                              /* stored column of the first angular feature */
    int radial_at[NNP_MAX_ELEMENTS];      /* stored column of each element's radial block, or -1 */
    int angular_at[NNP_CUDA_MAX_PAIRS];        /* stored column of each pair's angular block, or -1 */
    int* live_feature;                         /* model feature of each stored column (length) */
    int n_classes;
    int class_len[NNP_CUDA_MAX_CLASSES];       /* prefix of each class, ascending; the last is length */
    int* batch_class;                          /* class of each batch (n_batches) */
} nnp_aev_layout;
/* 0, or -1 when out of memory. Free with nnp_aev_layout_free. */
int nnp_cuda_plan_aev_layout(const struct nnp_plan* plan, const nnp_cuda_tuning* tuning, nnp_aev_layout* layout);
void nnp_aev_layout_free(nnp_aev_layout* layout);

/* The network rows: atoms by element, then class, index order within. row_atom: n_atoms entries. */
typedef struct nnp_rows {
    int elem_rows[NNP_MAX_ELEMENTS], elem_row0[NNP_MAX_ELEMENTS];
    int class_rows[NNP_MAX_ELEMENTS][NNP_CUDA_MAX_CLASSES], class_row0[NNP_MAX_ELEMENTS][NNP_CUDA_MAX_CLASSES];
} nnp_rows;
void nnp_cuda_plan_rows(const struct nnp_plan* plan, const nnp_aev_layout* layout, nnp_rows* rows, int* row_atom);

/* Neighbour slots per atom: the largest batch less one (at least 1), capped at NNP_CUDA_MAX_NEIGHBORS. */
int nnp_cuda_plan_capacity(const struct nnp_plan* plan);

/* The GEMM kernels, by regime (gemm*.cuh). */
typedef enum nnp_gemm_kernel {
    NNP_GEMM_MMA = 0,      /* k_gemm_mma: float32, <= 16 rows per job, tensor cores, split-K fix-up in the kernel */
    NNP_GEMM_FEW_ROWS = 1, /* k_gemm_skinny: float32, <= 32 rows per job, split-K fix-up in the kernel */
    NNP_GEMM_SPLIT_K = 2,  /* k_gemm + k_gemm_reduce: <= 256 rows per job split over k */
    NNP_GEMM_BIG = 3,      /* k_gemm_big: one 128x128 tile per block (SIMT) */
    NNP_GEMM_BIG_H = 4     /* k_gemm_big_h: float32 on the tensor cores (FP16 pairs), 16-byte aligned operands */
} nnp_gemm_kernel;
/* One GEMM launch (a layer's jobs, forward or backward), as the plan decides it. */
typedef struct nnp_gemm_shape {
    int jobs, max_m, max_k, max_mn;
    int aligned;  /* every A and B 16-byte aligned, leading dimensions, k and n multiples of 4; C, aux
                     and bias 8-byte aligned, C's and aux's leading dimensions even */
    int is_float;
} nnp_gemm_shape;
typedef struct nnp_gemm_choice {
    nnp_gemm_kernel kernel;
    int ksplit;    /* parts over k (1: none) */
    int tile_rows; /* BIG_H: rows per tile (64 or 128; 64 only where the activations are presplit) */
} nnp_gemm_choice;
/* Split-K: about split_k (few rows: split_k_few_rows; middle row counts on the tensor cores:
   split_k_tensor) values of k per part where the jobs have at most NNP_CUDA_SPLIT_ROWS rows, at most
   split_max parts and at most 2^24 partial sums; then the kernel of the regime: few rows
   NNP_GEMM_MMA / FEW_ROWS; middle row counts in float32, aligned, big_tensor_cores = 1: BIG_H
   (split or not; middle_tile_rows rows per tile); else SPLIT_K where split; then the many-rows
   kernels (BIG_H: 128 rows per tile). */
nnp_gemm_choice nnp_cuda_plan_gemm(const nnp_cuda_tuning* tuning, const nnp_gemm_shape* shape);

/* Whether the few-atom AEV kernels can put the ShfZ terms on lanes: nShfZ a divisor of 32 (at least
   3: lanes 0-2 of each pair add the force components) and of angular_sub. ANI-1x and ANI-2x have 8
   and 4. */
int nnp_cuda_lanes_over_shfz(int nShfZ, int angular_sub);

/* Shapes of k_aev and k_aev_backward. */
typedef struct nnp_aev_kernels {
    int aev_threads;   /* k_aev's block size */
    int aev_acc_stride; /* > 0: the pair-parallel angular path, its accumulator row (sliced: rowlen) */
    int aev_slices;    /* blocks per atom of k_aev (1: one) */
    size_t aev_shmem;  /* k_aev's dynamic shared memory */
    int bwd_slices;    /* blocks per atom of k_aev_backward (1: one) */
    size_t bwd_shmem;
} nnp_aev_kernels;
typedef struct nnp_aev_kernel_input {
    int n_atoms, capacity, stored_length, angular0, angular_sub, nShfZ;
    size_t real_size;   /* 4 or 8 */
    size_t static_smem; /* the kernels' static shared memory (the AEV parameters) and a margin */
    int pair_factors;   /* the angular terms' factors per pair: nZeta · nShfZ powers + nEtaA · nShfA exponentials */
} nnp_aev_kernel_input;
/* Reals per pair in k_aev's table of pair factors (the factors, fc2 and the stored column; odd, so
   that the threads' rows fall in distinct banks). */
#define NNP_CUDA_PAIR_STRIDE(factors) (((factors) + 2) | 1)
void nnp_cuda_plan_aev_kernels(const nnp_cuda_tuning* tuning, const nnp_cuda_device* device, const nnp_aev_kernel_input* in,
                               nnp_aev_kernels* out);
/* The AEV kernels' dynamic shared memory per neighbour slot: the vector and cutoff values (8 reals),
   the element and the angular list (2 ints); see AevAtom in aev.cuh. */
size_t nnp_cuda_aev_smem_base(int capacity, size_t real_size);
/* k_aev's block size with one block per atom (at least as many atoms as SMs): warps per atom halved
   from 8 down to 2 while the atoms would fill more than 16 warps per SM. Fewer warps per atom means
   more atoms per SM, barriers that wait on fewer warps and fewer accumulator rows to clear and add
   up; with few atoms per SM, more warps share each atom's work. Measured on the H200 (graph step):
   837 molecules (37,105 atoms) 4,508 / 4,231 / about 4,130 us with 8 / 4 / 2 warps; 10 molecules
   (220 atoms) about 170 us with 8 warps, 184 us with 2. */
int nnp_cuda_aev_atom_threads(int n_atoms, int sms);

#ifdef __cplusplus
}
#endif

#endif
