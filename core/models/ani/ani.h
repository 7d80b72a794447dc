/*
 * The ANI family (internal to libnnp): atomic environment vectors (AEVs) and one network per
 * element, ensembles of members. Its parameters hang off nnp_model::family_data (nnp_ani_of).
 *   ani.c        the parameters: allocation, validation, the .nnpm payload, the family table
 *   neurochem.c  NeuroChem/TorchANI model folders (.info, constants, .nnf networks)
 *   cpu.c        the CPU evaluation in double precision (the specification of the maths)
 *   cuda/        the CUDA evaluation (its own translation unit) and its host-side planning
 */
#ifndef NNP_ANI_H
#define NNP_ANI_H

#include "../../src/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NNP_MAX_ELEMENTS 16   /* elements per model */
#define NNP_MAX_TERMS 64      /* entries of each AEV parameter list */
#define NNP_MAX_LAYERS 16     /* layers per atomic network */
#define NNP_MAX_WIDTH 16384   /* neurons per layer, and AEV length */

/* Activation codes of the NeuroChem files. */
#define NNP_ACT_LINEAR 6
#define NNP_ACT_CELU 9        /* CELU with alpha = 0.1 */
#define NNP_CELU_ALPHA 0.1

typedef struct nnp_layer {
    int32_t n_in, n_out, activation;
    float* weights; /* n_out × n_in, row-major (one row per output neuron) */
    float* biases;  /* n_out */
} nnp_layer;

typedef struct nnp_network {
    int32_t n_layers;
    nnp_layer layers[NNP_MAX_LAYERS];
} nnp_network;

typedef struct nnp_aev_params {
    double Rcr, Rca;
    int32_t nEtaR, nShfR, nEtaA, nZeta, nShfA, nShfZ;
    double EtaR[NNP_MAX_TERMS], ShfR[NNP_MAX_TERMS], EtaA[NNP_MAX_TERMS], Zeta[NNP_MAX_TERMS],
        ShfA[NNP_MAX_TERMS], ShfZ[NNP_MAX_TERMS];
} nnp_aev_params;

/* An ANI ensemble: model->n_members members over model->n_elements elements. */
typedef struct nnp_ani {
    nnp_aev_params aev;
    int32_t atomic_numbers[NNP_MAX_ELEMENTS];
    double self_energies[NNP_MAX_ELEMENTS]; /* Hartree */
    nnp_network* networks; /* n_members × n_elements, member-major */
    /* derived by nnp_ani_finish */
    int32_t radial_sub, angular_sub, radial_length, aev_length;
    int32_t pair_index[NNP_MAX_ELEMENTS][NNP_MAX_ELEMENTS]; /* angular block of an element pair */
} nnp_ani;

static inline nnp_ani* nnp_ani_of(const nnp_model* model) { return (nnp_ani*)model->family_data; }

/* A new ANI model with room for n_members × n_elements networks (layers not allocated), or NULL. */
nnp_model* nnp_ani_model_alloc(int32_t n_members, int32_t n_elements);
/* Validates AEV parameters and elements and fills the derived sizes; NNP_ERR_FORMAT on nonsense. */
nnp_status nnp_ani_finish(nnp_model* model);
/* Validates one network against the model's AEV length. */
nnp_status nnp_ani_network_check(const nnp_model* model, const nnp_network* net, const char* what);

/* The CPU evaluation (the family's evaluate_cpu, cpu.c): pos and box in Å, energies in Hartree. */
nnp_status nnp_ani_evaluate_cpu(nnp_plan* plan, const double* pos, const double* box, double* atom_energy,
                                double* batch_energy, double* grad);

/* The CUDA evaluation (cuda/ani_cuda.cu; NULL hooks in a build without CUDA). */
nnp_status nnp_ani_evaluate_cuda(nnp_plan* plan, const nnp_cuda_io* io, int capturing);
nnp_status nnp_ani_cuda_check(nnp_plan* plan);
void nnp_ani_cuda_free(nnp_plan* plan);

/* Parsers, exposed for the fuzzer (neurochem.c). */
nnp_status nnp_parse_constants(const char* text, size_t size, nnp_model* model);
/* Parses an .nnf file (text header, '=', bzip2 stream) into layer shapes and parameter file
   names; weights are not loaded. */
typedef struct nnp_nnf_layer {
    int32_t nodes, activation, blocksize;
    char wfile[128], bfile[128];
    int64_t wcount, bcount;
} nnp_nnf_layer;
typedef struct nnp_nnf {
    int32_t inputsize, n_layers;
    char element[8];
    nnp_nnf_layer layers[NNP_MAX_LAYERS];
} nnp_nnf;
nnp_status nnp_parse_nnf(const unsigned char* data, size_t size, nnp_nnf* out);

#ifdef __cplusplus
}
#endif

#endif
