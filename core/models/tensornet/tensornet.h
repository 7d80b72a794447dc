/*
 * Internal to libnnp: TensorNet's model data, shared by its CPU evaluation (tensornet.c) and its
 * CUDA evaluation (cuda/).
 */
#ifndef NNP_TENSORNET_H
#define NNP_TENSORNET_H

#include "internal.h"

#include <pthread.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TN_PI 3.14159265358979323846
#define TN_MAX_WIDTH 1024 /* hidden channels F, radial functions, head widths */
#define TN_MAX_LAYERS 16
#define TN_MAX_HEAD 16    /* linear layers of the Scalar head */
#define TN_MAX_Z 256      /* rows of the atom embedding */
#define TN_LN_EPS 1e-5    /* torch.nn.LayerNorm's default, used by TensorNet */
/* The CPU evaluation with forces keeps every layer's per-edge radial MLP values from the forward
   pass for the backward pass while they take at most this many bytes (else computes them again). */
#define TN_KEEP_BYTES (512.0 * 1024 * 1024)
/* Intervals of the CPU evaluation's radial tables (NNP_PRECISION_SINGLE) over [cutoff_lower, cutoff_upper]. */
#define TN_TABLE_INTERVALS 2048

enum { TN_GROUP_O3 = 1, TN_GROUP_SO3 = 2 };
/* torchmd-net's activations (its act_class_mapping): SiLU, shifted softplus, tanh, sigmoid, Swish
   (β = 1, the same function as SiLU) and Mish; the low byte of the model file's activation field. */
enum { TN_ACT_SILU = 1, TN_ACT_SSP = 2, TN_ACT_TANH = 3, TN_ACT_SIGMOID = 4, TN_ACT_SWISH = 5, TN_ACT_MISH = 6 };
/* torchmd-net's radial bases (rbf_type), in the model file's activation field above its low byte. */
enum { TN_RBF_EXPNORM = 0, TN_RBF_GAUSS = 1 };

typedef struct tn_linear {
    int32_t n_in, n_out;
    const double* w;  /* n_out × n_in, row per output */
    const double* b;  /* n_out, or NULL (no bias) */
    const double* wt; /* the same weights n_in × n_out (made on load): y = W x as sums over k of
                         rows of wt, which vectorise over the outputs and keep each output's order */
} tn_linear;

typedef struct tn_member {
    int32_t F, L, R, max_z, group, activation, n_head, has_atomref;
    int32_t rbf; /* the radial basis: TN_RBF_EXPNORM (means, betas) or TN_RBF_GAUSS (offsets in means, −coeff in betas) */
    double cl, cu, alpha, std, mean;
    const double *means, *betas, *emb, *atomref;
    tn_linear emb2, dp[3], elt[3], els[2], lls[TN_MAX_LAYERS][3], llt[TN_MAX_LAYERS][6], linear, head[TN_MAX_HEAD];
    const double *init_w, *init_b, *out_w, *out_b;
    double* storage;
    double* transposed; /* every wt, one allocation */
} tn_member;

/* A member's radial tables for the CPU evaluation with NNP_PRECISION_SINGLE (tensornet.c): filter 0
   is the embedding's dp_q(rbf(d)) · C(d), filter 1 + l layer l's SiLU(L₃ SiLU(L₂ SiLU(L₁ rbf(d)))) ·
   C(d), 3F values each (blocks q = 1, 2, 3 or I, A, S). */
typedef struct tn_table {
    int32_t intervals, width, n_filters; /* width: 3F; n_filters: L + 1 */
    double lo, h;                        /* first node (cutoff_lower) and spacing */
    double* self;  /* n_filters × width: the exact values at d = 0 (the self loop) */
    double* nodes; /* n_filters × (intervals + 1) × 2 width: per filter and node, values then slopes */
} tn_table;

typedef struct tn_model {
    int32_t n_members;
    tn_member* members;
    double cutoff; /* largest cutoff_upper */
    int32_t max_z; /* smallest embedding size */
    pthread_mutex_t table_lock; /* guards tables: made by the first evaluation that needs them */
    tn_table* tables;           /* n_members, or NULL until then */
} tn_model;

/* The CUDA evaluation (cuda/tensornet_cuda.cu): the family's hooks. */
nnp_status nnp_tn_evaluate_cuda(nnp_plan* plan, const nnp_cuda_io* io, int capturing);
nnp_status nnp_tn_cuda_check(nnp_plan* plan);
void nnp_tn_cuda_free(nnp_plan* plan);

#ifdef __cplusplus
}
#endif

#endif
