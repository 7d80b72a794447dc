/* Internal declarations of libnnp; not part of the public API. */
#ifndef NNP_INTERNAL_H
#define NNP_INTERNAL_H

#include "nnp.h"
#include "cuda_tuning.h"

#ifdef __cplusplus
extern "C" {
#endif

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define NNP_MAX_ELEMENTS 16   /* elements per model */
#define NNP_MAX_TERMS 64      /* entries of each AEV parameter list */
#define NNP_MAX_LAYERS 16     /* layers per atomic network */
#define NNP_MAX_MEMBERS 64    /* ensemble members */
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

/* A model family: what the generic core (model file container, plans, neighbour search, per-batch
   sums, unit conversion) asks of a family. One table per family; the model points to its own. */
typedef struct nnp_family nnp_family;
struct reader;
struct writer;

struct nnp_model {
    char name[64];
    const nnp_family* family;
    void* family_data;       /* the family's own parameters (NULL for ANI, whose fields follow) */
    double energy_to_kjmol;  /* the model's energy unit in kJ/mol (ANI: Hartree) */
    double length_to_angstrom; /* the model's length unit in Å (ANI: 1) */
    /* ANI's parameters */
    nnp_aev_params aev;
    int32_t n_elements;
    int32_t atomic_numbers[NNP_MAX_ELEMENTS];
    double self_energies[NNP_MAX_ELEMENTS]; /* Hartree */
    int32_t n_members;
    nnp_network* networks; /* n_members × n_elements */
    /* derived by nnp_model_finish */
    int32_t radial_sub, angular_sub, radial_length, aev_length;
    int32_t pair_index[NNP_MAX_ELEMENTS][NNP_MAX_ELEMENTS]; /* angular block of an element pair */
};

/* Neighbours of every atom within a cutoff, in its batch (neighbors.c). */
typedef struct nnp_neighbor {
    int32_t j;
    double r[3]; /* r_j − r_i, in the model's length unit (minimum image when periodic) */
    double d;
} nnp_neighbor;

typedef struct nnp_neighbors {
    int32_t* start; /* n_atoms + 1 offsets into items; atom i's neighbours are in increasing index order */
    nnp_neighbor* items;
} nnp_neighbors;

/* All pairs closer than cutoff in the same batch (pos, box in the model's length unit; box NULL
   or reduced form). Two atoms of a batch at the same position are an error. */
nnp_status nnp_neighbors_build(const nnp_plan* plan, const double* pos, const double* box, double cutoff,
                               nnp_neighbors* out);
void nnp_neighbors_free(nnp_neighbors* nl);

/* Runs fn(ctx, item, thread) for item = 0 .. n_items-1 on up to n_threads threads (thread 0 is the
   caller); items are taken in order from a shared counter. */
void nnp_parallel_for(int32_t n_threads, int32_t n_items, void (*fn)(void* ctx, int32_t item, int32_t thread),
                      void* ctx);
/* The thread count of a CPU evaluation: the plan's, else NNP_NUM_THREADS, else every core. */
int32_t nnp_plan_threads(const nnp_plan* plan);

struct nnp_family {
    nnp_family_id id;
    const char* name;
    /* Reads the family's payload (after the name) into model; writes it back. */
    nnp_status (*read_payload)(struct reader* r, nnp_model* model);
    void (*write_payload)(struct writer* w, const nnp_model* model);
    void (*free_data)(nnp_model* model);
    /* The interaction range in the model's length unit. */
    double (*cutoff)(const nnp_model* model);
    /* Whether an atomic number is covered (index ≥ 0, the per-atom element index), or -1. */
    int32_t (*element_index)(const nnp_model* model, int32_t atomic_number);
    /* NNP_OK if the family can evaluate a batch of this total charge; else an error naming why. */
    nnp_status (*check_charge)(const nnp_model* model, int32_t batch, int32_t charge);
    /* CPU evaluation in the model's units. pos, box: model length unit. Adds each atom's energy to
       atom_energy and each batch's constant terms to batch_energy; if grad != NULL, adds dE/dr. */
    nnp_status (*evaluate_cpu)(nnp_plan* plan, const double* pos, const double* box, double* atom_energy,
                               double* batch_energy, double* grad);
};
extern const nnp_family nnp_family_ani;
extern const nnp_family nnp_family_tensornet;
const nnp_family* nnp_family_by_id(uint32_t id);

/* A chunk of the CPU evaluation: up to CHUNK atoms of one element (cpu.c). */
typedef struct nnp_chunk {
    int32_t element, first, count; /* atoms by_element[first .. first+count) */
} nnp_chunk;

struct nnp_plan {
    const nnp_model* model;
    nnp_units units;
    int32_t member;    /* -1: ensemble mean */
    int32_t n_atoms;
    int32_t n_batches; /* cached: max batch + 1 */
    int32_t* atomic_numbers;
    int32_t* elements; /* element index in the model, per atom */
    int32_t* batches;
    int32_t* batch_charges; /* n_batches total charges (elementary charges), default 0 */
    int32_t* order;       /* atoms sorted by batch, stable (index order within a batch) */
    int32_t* batch_start; /* n_batches + 1 offsets into order */
    int32_t n_threads;    /* CPU evaluation threads; 0: NNP_NUM_THREADS or all cores */
    /* CPU evaluation scratch, sized with the atoms */
    double* pos;          /* 3 × n_atoms, Å */
    int32_t* by_element;  /* atoms sorted by element */
    nnp_chunk* chunks;    /* at most n_atoms + n_elements */
    /* CUDA evaluation */
    int32_t* particles;   /* particle index per atom, or NULL for the identity */
    int cuda_precision;   /* nnp_precision */
    int cuda_dirty;       /* atoms, member, units or precision changed since the buffers were made */
    void* cuda;           /* struct nnp_cuda_state (core/cuda/state.cuh), NULL until the first CUDA evaluation */
    nnp_cuda_tuning cuda_tuning; /* the CUDA evaluation's tuning table (defaults: nnp_cuda_tuning_defaults) */
    int cuda_profile;     /* time the CUDA evaluation's stages (nnp_plan_set_cuda_profiling) */
};

/* Box checks shared by the CPU and CUDA evaluations (cpu.c). */
nnp_status nnp_check_box(const double* box, double cutoff, double to_angstrom);
/* Frees the plan's GPU state (core/cuda/nnp_cuda.cu, or a no-op without CUDA). */
void nnp_cuda_release(nnp_plan* plan);

/* Records a message for nnp_last_error() and returns status. printf-style. */
nnp_status nnp_fail(nnp_status status, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void nnp_clear_error(void);

/* Model helpers (model.c). */
nnp_model* nnp_model_alloc(int32_t n_members, int32_t n_elements);
/* Validates AEV parameters and fills the derived sizes; NNP_ERR_FORMAT on nonsense. */
nnp_status nnp_model_finish(nnp_model* model);
/* Element index of an atomic number in the model, or -1. */
int32_t nnp_model_element_index(const nnp_model* model, int32_t atomic_number);
/* Validates one network against the model's AEV length. */
nnp_status nnp_network_check(const nnp_model* model, const nnp_network* net, const char* what);

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

/* Whether a buffer starts with the own format's magic bytes (nnpm.c). */
int nnp_is_nnpm(const void* data, size_t size);

/* File helpers. nnp_read_file: a whole file (at most max_size bytes; a larger regular file is refused
   from its size before any read) into a new NUL-terminated buffer. nnp_read_rest: the rest of an open
   stream after the head_len bytes already read (head), the same way. nnp_regular_file_size: the size
   of an open regular file, -1 for anything else (pipe, FIFO, terminal). */
nnp_status nnp_read_file(const char* path, size_t max_size, unsigned char** data, size_t* size);
nnp_status nnp_read_rest(FILE* f, const char* path, size_t max_size, const unsigned char* head, size_t head_len,
                         unsigned char** data, size_t* size);
long long nnp_regular_file_size(FILE* f);

/* A NeuroChem model from the text of its .info file, already read from info_path (neurochem.c). */
nnp_status nnp_model_load_neurochem_text(const char* info_path, const char* info, size_t info_size, nnp_model** out);
/* Longest .info file accepted. */
#define NNP_MAX_INFO (1u << 20)

#ifdef __cplusplus
}
#endif

#endif
