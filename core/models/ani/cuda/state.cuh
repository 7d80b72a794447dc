/*
 * The CUDA evaluation's state: the launch plan (every size, grid and kernel choice, fixed when the
 * plan's buffers are made by build_state, build.cuh) and the device buffers it points into.
 * launch() (launch.cuh) only reads it.
 */
#pragma once

#include "ani.cuh"
#include "gemm.cuh"

#define NNP_CUDA_STAGES 7 /* positions, neighbours+AEV, forward, output, backward, forces, batch sums */

/* One GEMM launch: a layer's jobs (forward or backward), as nnp_cuda_plan_gemm chose it. */
struct GemmLaunch {
    size_t job0;        /* first job in the job table */
    int jobs;
    dim3 grid;          /* in 64-wide tiles; z = jobs · ksplit */
    int ksplit;         /* split-K parts */
    int tile_rows;      /* k_gemm_big_h: 64-row tiles where also presplit, else 128 (see big_h) */
    int max_mn;         /* largest m·n of its jobs (k_gemm_reduce's grid) */
    nnp_gemm_kernel kernel;
    unsigned cluster_z; /* k_gemm_mma: a tile's split-K parts in one thread-block cluster (cluster_fixup), else 1 */
    int* counters;      /* split-K tile counters, or NULL: the parts stay in the workspace (DeferredSum) */
    /* k_gemm_big_h with presplit activations (tuning presplit): the float32 buffer its jobs read as A
       and the FP16 pairs and inverse scales k_presplit makes of it first, or presplit = 0 */
    int presplit, split_chunks;
    int split_by_producer; /* the launch before writes them (then no k_presplit; see plan_presplit) */
    const float* split_src;
    uint4* split_p;
    float* split_inv;
};

struct nnp_cuda_state {
    nnp_cuda_base base; /* evaluated, n_particles, batch_energy (what nnp_cuda.cu reads) */
    CUcontext context; /* where the memory lives */
    int precision;     /* NNP_PRECISION_* */
    int n_atoms, n_batches, capacity, n_hidden, members, units;
    nnp_cuda_tuning tuning; /* the plan's table when the buffers were made */
    /* the AEV layout and the rows (nnp_cuda_plan_aev_layout, nnp_cuda_plan_rows) */
    int aev_live, aev_ld, aev_angular0, n_classes; /* aev_ld: the AEV's row stride, aev_live rounded up to 32 (zeros past aev_live) */
    nnp_rows rows;
    int width[NNP_MAX_ELEMENTS][NNP_MAX_LAYERS]; /* layer widths per element */
    /* launches */
    GemmLaunch fwd[NNP_MAX_LAYERS], bwd[NNP_MAX_LAYERS];
    int n_out_jobs; /* output layer: one job per element present */
    int fuse_output;          /* the output layer inside the last hidden layer's forward (OutFuse; on k_gemm_big_h the
                                 atoms' energies are then added up by k_output_rows) */
    int out_rows;             /* OutFuse::rows */
    int bwd_defer;            /* the last backward GEMM's split-K parts added by the AEV backward (DeferredSum) */
    int pdl;                  /* programmatic dependent launches */
    nnp_aev_kernels aevk;     /* AEV kernels' shapes (nnp_cuda_plan_aev_kernels) */
    /* device memory */
    void* aev_params; /* AevParams<real> */
    void* out_jobs;   /* OutputJob<real>, one per element present */
    float* out_partial; /* OutFuse::partial */
    int *identity, *batch_start, *batch_atoms, *row_atom, *index_of, *force_index, *nbr_ang, *flags;
    int4 *row_info, *batch_entry; /* k_aev's search tables (FrontIn) */
    int4* defer_rows;             /* DeferredSum's rows, where bwd_defer */
    int2 *count, *nbr_info; /* neighbour tables (NbrTables) */
    void *nbr_vec, *nbr_cut, *aev, *daev, *weights;
    void* Y[NNP_MAX_LAYERS];
    void* D[NNP_MAX_LAYERS];
    double *atom_energy, *self_energy, *total;
    unsigned long long* fixed;
    void* jobs;       /* GEMM job tables */
    void* w16;        /* k_gemm_mma's weights as FP16 pairs (see split_fp16_weights) */
    uint4* split_p[2];   /* presplit activations (GemmLaunch::split_p), alternating between launches */
    float* split_inv[2];
    void* partial;    /* split-K workspace, shared by the launches (they run in order) */
    int* counters;    /* split-K tile counters (zero between launches), shared likewise */
    int* host_flags;     /* mapped pinned memory: flags raised since check_flags last read them (see Finish) */
    int* host_flags_dev; /* the same, as the device sees it */
    /* stage timing (nnp_plan_set_cuda_profiling; evaluations outside capture only) */
    cudaEvent_t events[NNP_CUDA_STAGES + 1];
    int profiling;
    double stage_us[NNP_CUDA_STAGES];
};

static const int FLAG_CLEAR[4] = {0x7fffffff, 0, 0, 0}; /* NaN atom (min), overflow (max), same position, non-finite energy */

static void free_state(nnp_cuda_state* s) {
    if (s == NULL) return;
    CUcontext previous = NULL;
    int pushed = s->context != NULL && nnp_cuda_driver.loaded && nnp_cuda_driver.ctxPushCurrent(s->context) == CUDA_SUCCESS;
    void* ptrs[] = {s->partial, s->counters, s->aev_params, s->out_jobs, s->row_info, s->batch_entry, s->defer_rows, s->identity,
                    s->batch_start, s->batch_atoms, s->row_atom, s->index_of, s->force_index, s->count, s->nbr_info, s->nbr_ang,
                    s->nbr_cut, s->flags, s->nbr_vec, s->aev, s->daev, s->weights, s->atom_energy, s->self_energy,
                    s->base.batch_energy, s->total, s->fixed, s->jobs, s->out_partial, s->w16, s->split_p[0], s->split_p[1], s->split_inv[0], s->split_inv[1]};
    for (size_t k = 0; k < sizeof ptrs / sizeof ptrs[0]; k++) cudaFree(ptrs[k]);
    for (int h = 0; h < NNP_MAX_LAYERS; h++) cudaFree(s->Y[h]), cudaFree(s->D[h]);
    if (s->host_flags) cudaFreeHost(s->host_flags);
    for (int k = 0; s->profiling && k <= NNP_CUDA_STAGES; k++) cudaEventDestroy(s->events[k]);
    if (pushed) nnp_cuda_driver.ctxPopCurrent(&previous);
    free(s);
}
