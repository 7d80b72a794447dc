/*
 * libnnp — neural-network potentials (ANI, TensorNet) for many molecules at once.
 *
 * The engine-agnostic core of openmm-nnp: model files, evaluation of energies, per-batch
 * energies and forces. Pure C11; no OpenMM dependency.
 *
 * Conventions
 *  - Every function that can fail returns an nnp_status. On failure it leaves its outputs
 *    untouched and stores a message, readable with nnp_last_error() on the same thread.
 *  - Models come in families (nnp_model_family): ANI ensembles and torchmd-net TensorNet models.
 *  - Units. A model file records its units (ANI: Å, Hartree; TensorNet: as converted, e.g. Å and
 *    eV). The evaluation works in the units chosen for the plan with nnp_plan_set_units():
 *      NNP_UNITS_ANGSTROM_HARTREE (default): positions and box in Å, energies in Hartree,
 *                                            forces in Hartree/Å;
 *      NNP_UNITS_NM_KJMOL:                   positions and box in nm, energies in kJ/mol,
 *                                            forces in kJ/mol/nm (OpenMM's units).
 *    Hartree→kJ/mol is NNP_HARTREE_TO_KJMOL (TorchANI's constant).
 *  - Forces are −dE/dr (not gradients).
 *  - Thread safety: a loaded model is immutable and may be shared by any number of plans and
 *    threads. A plan must be used by one thread at a time. A model must outlive its plans.
 */
#ifndef NNP_H
#define NNP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define NNP_API __declspec(dllexport)
#else
#define NNP_API __attribute__((visibility("default")))
#endif

#define NNP_VERSION_MAJOR 0
#define NNP_VERSION_MINOR 1
#define NNP_VERSION_PATCH 0

/** Hartree → kJ/mol (TorchANI's constant). */
#define NNP_HARTREE_TO_KJMOL 2625.4996387552483
/** Hartree → kcal/mol (TorchANI's constant). */
#define NNP_HARTREE_TO_KCALMOL 627.5094738898777
/** Batch indices are 0 .. NNP_MAX_BATCHES - 1 (a plan keeps per-batch buffers of max + 1 entries). */
#define NNP_MAX_BATCHES (1 << 26)
/** The most threads a CPU evaluation uses (nnp_plan_set_num_threads). */
#define NNP_MAX_THREADS 64

typedef enum nnp_status {
    NNP_OK = 0,
    NNP_ERR_INVALID_ARGUMENT = 1, /**< NULL pointer, negative count, out-of-range index */
    NNP_ERR_IO = 2,               /**< a file cannot be opened, read or written */
    NNP_ERR_FORMAT = 3,           /**< a model file is corrupt, truncated or inconsistent */
    NNP_ERR_ELEMENT = 4,          /**< an element the model does not cover */
    NNP_ERR_BATCH = 5,            /**< a negative batch index */
    NNP_ERR_NONFINITE = 6,        /**< NaN or infinite coordinates or box */
    NNP_ERR_BOX = 7,              /**< a periodic box that is not valid or too small */
    NNP_ERR_MEMORY = 8,           /**< out of memory */
    NNP_ERR_STATE = 9,            /**< call not valid in the object's current state */
    NNP_ERR_CUDA = 10,            /**< a CUDA call failed */
    NNP_ERR_CAPTURE = 11,         /**< not allowed while a CUDA stream is being captured */
    NNP_ERR_UNSUPPORTED = 12      /**< feature not built into this library */
} nnp_status;

typedef enum nnp_units {
    NNP_UNITS_ANGSTROM_HARTREE = 0,
    NNP_UNITS_NM_KJMOL = 1,
    NNP_UNITS_MODEL = 2
} nnp_units;

/** Model families. */
typedef enum nnp_family_id {
    NNP_FAMILY_ANI = 1,       /**< ANI ensembles (TorchANI / NeuroChem): AEVs and atomic networks */
    NNP_FAMILY_TENSORNET = 2  /**< torchmd-net TensorNet (e.g. AceFF), with a total charge per batch */
} nnp_family_id;

typedef struct nnp_model nnp_model;
typedef struct nnp_plan nnp_plan;

/* ---------------------------------------------------------------- library */

/** Version string "major.minor.patch". */
NNP_API const char* nnp_version(void);
/** Short name of a status code ("NNP_ERR_FORMAT", ...). */
NNP_API const char* nnp_status_name(nnp_status status);
/** Message of the last failed call on this thread ("" if none). Valid until the next call. */
NNP_API const char* nnp_last_error(void);
/** Frees memory returned by the library (buffers from nnp_model_save_buffer, nnp_xyz_read). */
NNP_API void nnp_free(void* ptr);

/* ---------------------------------------------------------------- models */

/**
 * Loads a model by name or path: a name (see nnp_model_find) is resolved first; a file is read in
 * the project's own single-file format (detected by its magic bytes) or as the NeuroChem layout of
 * the ANI model zoo, given by its `<name>.info` file.
 */
NNP_API nnp_status nnp_model_load(const char* name_or_path, nnp_model** model);
/**
 * Resolves a model name to a file. A *name* is 1-63 letters, digits, '-', '_' or '.', not starting
 * with '.' and not ending in ".nnpm" or ".info" (e.g. "ani2x", "ani1x", "ani1ccx"); anything else is
 * a path and is copied to `path` unchanged. A name resolves to `<name>.nnpm` in the first folder
 * that holds one, in this order:
 *   1. the folders of the environment variable NNP_MODEL_PATH (':'-separated), in order;
 *   2. the per-user cache, $XDG_CACHE_HOME/openmm-nnp/models or ~/.cache/openmm-nnp/models;
 *   3. `share/openmm-nnp/models` beside the folder of this library (where the openmm-nnp-models
 *      wheel, an install prefix or a build tree put them).
 * The first match is taken: a match that is not a readable regular file is an NNP_ERR_IO error, not
 * skipped. An unknown name is an NNP_ERR_IO error whose message lists every place looked at and how
 * to get the model. `path` receives at most `size` bytes including the terminating NUL.
 */
NNP_API nnp_status nnp_model_find(const char* name_or_path, char* path, size_t size);
/** The folders nnp_model_find searches, in order, each followed by '\n', into `out` (`size` bytes). */
NNP_API nnp_status nnp_model_search_path(char* out, size_t size);
/** Loads the NeuroChem layout from `<name>.info`. Every size is checked against the files. */
NNP_API nnp_status nnp_model_load_neurochem(const char* info_path, nnp_model** model);
/** Loads the project's own format from memory (as written by nnp_model_save_buffer). */
NNP_API nnp_status nnp_model_load_buffer(const void* data, size_t size, nnp_model** model);
/** Writes the project's own format (versioned, CRC-32 checked) to a file. */
NNP_API nnp_status nnp_model_save(const nnp_model* model, const char* path);
/** Writes the project's own format to a new buffer; free it with nnp_free(). */
NNP_API nnp_status nnp_model_save_buffer(const nnp_model* model, void** data, size_t* size);
NNP_API void nnp_model_free(nnp_model* model);

/** Family of the model (0 for NULL). */
NNP_API nnp_family_id nnp_model_family(const nnp_model* model);
/** Short name of the model's family: "ani", "tensornet" ("" for NULL). */
NNP_API const char* nnp_model_family_name(const nnp_model* model);
/**
 * The model's own units: its energy unit in kJ/mol and its length unit in Å (ANI: Hartree and Å;
 * a TensorNet model: the units given when it was converted). Either pointer may be NULL.
 */
NNP_API nnp_status nnp_model_units(const nnp_model* model, double* energy_kjmol, double* length_angstrom);
/** Name of the model (e.g. "ani-2x_8x"). */
NNP_API const char* nnp_model_name(const nnp_model* model);
/** Number of ensemble members (0 for NULL). */
NNP_API int32_t nnp_model_num_members(const nnp_model* model);
/** Number of elements the model covers (0 for NULL). */
NNP_API int32_t nnp_model_num_elements(const nnp_model* model);
/** Atomic number of the model's i-th element, or -1 if out of range. */
NNP_API int32_t nnp_model_element(const nnp_model* model, int32_t index);
/** ANI: self energy of an element in Hartree; NNP_ERR_ELEMENT if the model lacks it,
    NNP_ERR_UNSUPPORTED for another family. */
NNP_API nnp_status nnp_model_self_energy(const nnp_model* model, int32_t atomic_number,
                                         double* hartree);
/** The interaction range in Å (ANI: the radial cutoff; TensorNet: cutoff_upper), or 0 for NULL. */
NNP_API double nnp_model_cutoff(const nnp_model* model);
/** ANI: length of the atomic environment vector (network input size); 0 for NULL or another family. */
NNP_API int32_t nnp_model_aev_length(const nnp_model* model);

/* ---------------------------------------------------------------- plans */

/**
 * A plan holds the atoms of one evaluation: an element and a batch index per atom. Atoms of
 * different batches never interact. The batch count (max batch + 1) is computed and cached
 * when the atoms are set; batches without atoms have energy 0.
 */
NNP_API nnp_status nnp_plan_create(const nnp_model* model, nnp_plan** plan);
NNP_API void nnp_plan_free(nnp_plan* plan);
/**
 * Sets the atoms. atomic_numbers and batches have n_atoms entries each; every element must be
 * one of the model's and every batch ≥ 0. n_atoms may be 0.
 */
NNP_API nnp_status nnp_plan_set_atoms(nnp_plan* plan, int32_t n_atoms,
                                      const int32_t* atomic_numbers, const int32_t* batches);
NNP_API int32_t nnp_plan_num_atoms(const nnp_plan* plan);
/** Cached batch count (max batch index + 1, 0 without atoms), or -1 for NULL. */
NNP_API int32_t nnp_plan_num_batches(const nnp_plan* plan);
/** Ensemble member to evaluate: -1 (default) for the ensemble mean, else 0..members-1. */
NNP_API nnp_status nnp_plan_set_member(nnp_plan* plan, int32_t member);
NNP_API int32_t nnp_plan_member(const nnp_plan* plan);
/**
 * Total charge (in elementary charges) of each batch: n_batches values, n_batches ≤ the plan's batch
 * count (batches beyond get 0). nnp_plan_set_atoms() keeps the charges of batches that remain.
 * ANI models refuse a non-zero charge (NNP_ERR_UNSUPPORTED); TensorNet takes them as torchmd-net
 * does (q of the batch in its (1 + 0.1 q) factors).
 */
NNP_API nnp_status nnp_plan_set_batch_charges(nnp_plan* plan, int32_t n_batches, const int32_t* charges);
/** Total charge of a batch (0 if not set or out of range). */
NNP_API int32_t nnp_plan_batch_charge(const nnp_plan* plan, int32_t batch);
/**
 * Threads of the CPU evaluation: 0 (default) for the environment variable NNP_NUM_THREADS or else
 * every online core. Results do not depend on the thread count.
 */
NNP_API nnp_status nnp_plan_set_num_threads(nnp_plan* plan, int32_t n_threads);
/** Units of positions, box, energies and forces (default NNP_UNITS_ANGSTROM_HARTREE). */
NNP_API nnp_status nnp_plan_set_units(nnp_plan* plan, nnp_units units);

typedef enum nnp_precision { NNP_PRECISION_SINGLE = 0, NNP_PRECISION_DOUBLE = 1 } nnp_precision;
/**
 * Arithmetic of the CPU evaluation (default NNP_PRECISION_DOUBLE, exact). NNP_PRECISION_SINGLE
 * runs ANI's networks in float32 and its AEV and the AEV's backward pass in float64 on SIMD
 * (AVX-512F, AVX2 or SSE2: nnp_plan_set_cpu_simd, by default the widest the CPU runs; the AEV's
 * exp, log and pow by polynomials, within 2 ulp), with the atom and batch energies and the forces
 * in float64; results stay independent of the thread count. For TensorNet it reads the radial filters (the
 * embedding's and each layer's, functions of the distance only) from tables of 2,049 nodes per model,
 * made by the first such evaluation, with cubic Hermite interpolation, and runs its linears on the same
 * SIMD, in float64 (per-batch energies within 1e-8 relative of the exact evaluation, forces 1e-5).
 */
NNP_API nnp_status nnp_plan_set_cpu_precision(nnp_plan* plan, nnp_precision precision);

typedef enum nnp_cpu_simd {
    NNP_CPU_SIMD_AUTO = 0,     /* the widest the CPU runs (the default) */
    NNP_CPU_SIMD_BASELINE = 1, /* the build's baseline (x86-64: SSE2) */
    NNP_CPU_SIMD_AVX2 = 2,
    NNP_CPU_SIMD_AVX512 = 3    /* AVX-512F */
} nnp_cpu_simd;
/**
 * The instruction set of the CPU evaluation with NNP_PRECISION_SINGLE (ANI's float32 networks,
 * TensorNet's linears): AVX2 and
 * AVX-512F fuse multiply-adds and give the same bits (each atom's sums in one order, whatever the
 * vector width); the baseline multiplies and adds apart, so its results differ from theirs by float32
 * rounding. AUTO picks nnp_cpu_simd_available() (AVX2 needs FMA too). A level the CPU or this build does not run is
 * refused (NNP_ERR_UNSUPPORTED), as is an unknown value (NNP_ERR_INVALID_ARGUMENT).
 */
NNP_API nnp_status nnp_plan_set_cpu_simd(nnp_plan* plan, nnp_cpu_simd simd);
/** The widest instruction set of the float32 CPU evaluation that this CPU and build run. */
NNP_API nnp_cpu_simd nnp_cpu_simd_available(void);

/**
 * CPU evaluation (double precision unless nnp_plan_set_cpu_precision says otherwise).
 *
 * positions       n_atoms × 3, in the plan's length unit.
 * box             NULL for no periodicity, else 9 values: the box vectors a, b, c (row by row)
 *                 in OpenMM's reduced form (a = (ax,0,0), b = (bx,by,0), c = (cx,cy,cz),
 *                 |bx|,|cx| ≤ ax/2, |cy| ≤ by/2); minimum image is applied, and each of
 *                 ax, by, cz must be at least twice the model's cutoff.
 * energy          NULL or the total energy (sum of the batch energies).
 * batch_energies  NULL or nnp_plan_num_batches() values: each batch's energy, the sum of its
 *                 atoms' network energies and self energies.
 * forces          NULL or n_atoms × 3: −dE/dr. Skipping forces skips the backward pass.
 */
NNP_API nnp_status nnp_evaluate_cpu(nnp_plan* plan, const double* positions, const double* box,
                                    double* energy, double* batch_energies, double* forces);

/* ---------------------------------------------------------------- CUDA evaluation */

/**
 * The CUDA evaluation runs on the CUDA context current on the calling thread and on the stream
 * given; it can be recorded into a CUDA graph (stream capture) and replayed:
 *  - every buffer is sized, and the atoms uploaded, by an evaluation outside capture (the first
 *    one, or the first after a change to the plan); only that one waits for the GPU;
 *  - while the stream is being captured (cuStreamIsCapturing), nothing is allocated, uploaded,
 *    downloaded, synchronised or loaded; capturing before that first evaluation, or after a change
 *    that needs new buffers or a new batch count, is refused with NNP_ERR_CAPTURE;
 *  - errors the GPU finds (non-finite coordinates, a neighbour list over capacity) are reported by
 *    the next call outside capture that looks: nnp_cuda_batch_energies() or the next evaluation.
 * Arithmetic: float32 (default) or float64 (nnp_plan_set_cuda_precision); per-atom energies and
 * the per-batch sums are accumulated in float64; forces are summed as 64-bit fixed point (2^-32),
 * so results do not depend on the order of the GPU's additions.
 */
typedef enum nnp_positions_format {
    NNP_POSITIONS_XYZ_DOUBLE = 0, /**< double[3] per particle */
    NNP_POSITIONS_FLOAT4 = 1,     /**< float4 (x, y, z, unused) per particle, OpenMM single/mixed */
    NNP_POSITIONS_DOUBLE4 = 2     /**< double4 per particle, OpenMM double */
} nnp_positions_format;
typedef enum nnp_forces_format {
    NNP_FORCES_NONE = 0,       /**< energies only */
    NNP_FORCES_XYZ_DOUBLE = 1, /**< double[3] per atom of the plan, overwritten */
    NNP_FORCES_FIXED_POINT = 2 /**< OpenMM's buffer: long long, component c of position index i at
                                    [i + c·stride], value·2^32, added */
} nnp_forces_format;

typedef struct nnp_cuda_io {
    void* stream;                         /**< cudaStream_t / CUstream (NULL: legacy stream, not capturable) */
    const void* positions;                /**< device pointer, in the plan's length unit */
    nnp_positions_format positions_format;
    const int32_t* sorted_particles;      /**< device: particle of each position index (OpenMM's atom
                                               index array), or NULL if positions are indexed by particle */
    int32_t n_particles;                  /**< length of sorted_particles */
    const double* box;                    /**< host: 9 values as for nnp_evaluate_cpu, or NULL */
    void* forces;                         /**< device pointer (see forces_format), or NULL */
    nnp_forces_format forces_format;
    int64_t forces_stride;                /**< NNP_FORCES_FIXED_POINT: component stride */
    void* energy;                         /**< device: the total energy is added here, or NULL */
    int energy_is_double;                 /**< energy points to a double (1) or a float (0) */
} nnp_cuda_io;

/** 1 if the library was built with CUDA and a CUDA device is present, else 0. */
NNP_API int nnp_cuda_available(void);
/**
 * Particle index of every atom, for the CUDA evaluation (its positions and forces are indexed by
 * particle). Default: atom i ↔ particle i; nnp_plan_set_atoms() resets it, so call this after it.
 */
NNP_API nnp_status nnp_plan_set_particles(nnp_plan* plan, const int32_t* particles);
/** Arithmetic of the CUDA evaluation (default NNP_PRECISION_SINGLE). */
NNP_API nnp_status nnp_plan_set_cuda_precision(nnp_plan* plan, nnp_precision precision);
/** Evaluates on the GPU, asynchronously on io->stream. */
NNP_API nnp_status nnp_evaluate_cuda(nnp_plan* plan, const nnp_cuda_io* io);
/**
 * Per-batch energies of the last CUDA evaluation (nnp_plan_num_batches values, host memory, the
 * plan's energy unit). Waits for the stream; refused while it is being captured. Also reports
 * errors the GPU found since the last check.
 */
NNP_API nnp_status nnp_cuda_batch_energies(nnp_plan* plan, void* stream, double* energies);
/**
 * Diagnostics: with profiling on (enabled != 0), each CUDA evaluation outside capture times its
 * stages with CUDA events and waits for them; it then launches its kernels one after the other
 * (no programmatic dependent launches) and keeps the output layer apart, so the stages are slower
 * than in a normal evaluation and the last float32 digits may differ. Off by default.
 */
NNP_API nnp_status nnp_plan_set_cuda_profiling(nnp_plan* plan, int enabled);
/**
 * Diagnostics: the last profiled evaluation's 7 stage times in µs (nnp_plan_set_cuda_profiling):
 * positions (the inverse of OpenMM's atom order), neighbours and AEV, network forward, output
 * layer, network backward, AEV backward (forces), per-batch reduction (batch sums and total).
 */
NNP_API nnp_status nnp_cuda_stage_times(nnp_plan* plan, double* microseconds);
/**
 * Diagnostics: the layout of the last CUDA evaluation's AEVs. The CUDA evaluation stores only the
 * AEV blocks some batch can fill (element pairs absent from every batch give zero features) and
 * groups the batches into classes that multiply only a prefix of the stored row in the first
 * layer (docs/cuda.md). Gives the model's AEV length, the stored length and the number of classes
 * (any pointer may be NULL).
 */
NNP_API nnp_status nnp_cuda_aev_layout(nnp_plan* plan, int32_t* model_length, int32_t* stored_length, int32_t* classes);

/* ---------------------------------------------------------------- several devices */

/**
 * Splits batches 0 .. n_batches−1 into n_parts contiguous ranges, in batch order, of near-equal
 * cost, to evaluate one set of batches on several devices (each part a plan of its own): part p
 * gets batches first[p] .. first[p+1]−1; first has n_parts + 1 entries, first[0] = 0 and
 * first[n_parts] = n_batches. The largest part's cost is the smallest any contiguous split
 * reaches (to 1e-13 relative); no part is empty while there are at least as many batches as
 * parts. cost: n_batches finite values ≥ 0, e.g. from nnp_plan_batch_costs(). A pure function of
 * its input.
 */
NNP_API nnp_status nnp_partition_batches(int32_t n_batches, const double* cost, int32_t n_parts, int32_t* first);
/**
 * The estimated evaluation cost of each of the plan's batches at these positions (as for
 * nnp_evaluate_cpu): its atoms plus a fixed fraction of an atom per pair within the model's
 * cutoff. costs: nnp_plan_num_batches() values.
 */
NNP_API nnp_status nnp_plan_batch_costs(nnp_plan* plan, const double* positions, const double* box, double* costs);

/* ---------------------------------------------------------------- XYZ files */

/**
 * Reads an XYZ file (plain or extended with Lattice="..."). Returns newly allocated arrays
 * (free with nnp_free): atomic numbers (n_atoms) and positions in Å (n_atoms × 3). If box is
 * not NULL it receives 9 values (Å) and *has_box says whether the file gave a lattice.
 */
NNP_API nnp_status nnp_xyz_read(const char* path, int32_t* n_atoms, int32_t** atomic_numbers,
                                double** positions, double* box, int* has_box);
/** Atomic number of an element symbol ("C", "Cl"), or -1 if unknown. */
NNP_API int32_t nnp_element_from_symbol(const char* symbol);
/** Symbol of an atomic number, or NULL if unknown. */
NNP_API const char* nnp_element_symbol(int32_t atomic_number);

#ifdef __cplusplus
}
#endif
#endif /* NNP_H */
