/* Internal declarations of libnnp; not part of the public API. */
#ifndef NNP_INTERNAL_H
#define NNP_INTERNAL_H

#include "nnp.h"
#include "../models/ani/cuda/tuning.h" /* ANI's CUDA tuning table, kept in the plan */

#ifdef __cplusplus
extern "C" {
#endif

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define NNP_MAX_MEMBERS 64    /* ensemble members */

/* A model family: what the generic core (model file container, plans, neighbour search, per-batch
   sums, unit conversion) asks of a family. One table per family; the model points to its own. */
typedef struct nnp_family nnp_family;
struct reader;
struct writer;

struct nnp_model {
    char name[64];
    const nnp_family* family;
    void* family_data;         /* the family's own parameters (core/models/<family>/) */
    double energy_to_kjmol;    /* the model's energy unit in kJ/mol (ANI: Hartree) */
    double length_to_angstrom; /* the model's length unit in Å (ANI: 1) */
    int32_t n_members;         /* ensemble members */
    int32_t n_elements;        /* element indices 0 .. n_elements-1 (the family maps atomic numbers to them) */
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
/* The same with the way of finding candidate pairs chosen (tests): AUTO as nnp_neighbors_build (a cell
   grid for large batches), ALL_PAIRS every pair of a batch, CELLS the grid wherever it fits. */
enum { NNP_NEIGHBORS_AUTO = 0, NNP_NEIGHBORS_ALL_PAIRS = 1, NNP_NEIGHBORS_CELLS = 2 };
nnp_status nnp_neighbors_build_with(const nnp_plan* plan, const double* pos, const double* box, double cutoff, int method,
                                    nnp_neighbors* out);

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
    /* The family's element of an element index (its atomic number). */
    int32_t (*element)(const nnp_model* model, int32_t index);
    /* CUDA evaluation (NULL where the family has none). nnp_evaluate_cuda (core/cuda/nnp_cuda.cu) has
       checked the arguments and found whether the stream is capturing; the family keeps its device
       state in plan->cuda (a struct starting with nnp_cuda_base) and follows the capture contract.
       cuda_check reports the errors its device code raised since the last check; cuda_free frees
       the state. */
    nnp_status (*evaluate_cuda)(nnp_plan* plan, const nnp_cuda_io* io, int capturing);
    nnp_status (*cuda_check)(nnp_plan* plan);
    void (*cuda_free)(nnp_plan* plan);
};
extern const nnp_family nnp_family_ani;
extern const nnp_family nnp_family_tensornet;
const nnp_family* nnp_family_by_id(uint32_t id);

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
    int cpu_precision;    /* nnp_precision of the CPU evaluation (default double) */
    int cpu_simd;         /* nnp_cpu_simd of its float32 networks (default AUTO) */
    double* pos;          /* CPU evaluation scratch: 3 × n_atoms, the model's length unit */
    /* CUDA evaluation */
    int32_t* particles;   /* particle index per atom, or NULL for the identity */
    int cuda_precision;   /* nnp_precision */
    int cuda_dirty;       /* atoms, member, units or precision changed since the buffers were made */
    void* cuda;           /* the family's device state (starts with nnp_cuda_base), NULL until the first CUDA evaluation */
    nnp_cuda_tuning cuda_tuning; /* ANI's CUDA tuning table (defaults: nnp_cuda_tuning_defaults) */
    int cuda_profile;     /* time the CUDA evaluation's stages (nnp_plan_set_cuda_profiling) */
};

/* What every family's CUDA state starts with (plan->cuda). */
typedef struct nnp_cuda_base {
    int evaluated;        /* one evaluation outside capture done with these buffers */
    int n_particles;      /* the particle count those buffers were made for */
    double* batch_energy; /* device: n_batches per-batch energies in kJ/mol or the plan's unit */
} nnp_cuda_base;

/* The plan's units against the model's (cpu.c): energy_factor converts the model's energies into the
   plan's energy unit; length_angstrom is the plan's length unit in Å. */
void nnp_plan_units(const nnp_plan* plan, double* energy_factor, double* length_angstrom);

/* Box checks shared by the CPU and CUDA evaluations (cpu.c). */
nnp_status nnp_check_box(const double* box, double cutoff, double to_angstrom);
/* Frees the plan's GPU state (core/cuda/nnp_cuda.cu: the family's cuda_free; a no-op without CUDA). */
void nnp_cuda_release(nnp_plan* plan);

/* Records a message for nnp_last_error() and returns status. printf-style. */
nnp_status nnp_fail(nnp_status status, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void nnp_clear_error(void);

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

/* A NeuroChem (ANI) model from the text of its .info file, already read from info_path
   (core/models/ani/neurochem.c). */
nnp_status nnp_model_load_neurochem_text(const char* info_path, const char* info, size_t info_size, nnp_model** out);
/* Longest .info file accepted. */
#define NNP_MAX_INFO (1u << 20)

#ifdef __cplusplus
}
#endif

#endif
