/*
 * ANI's CUDA evaluation: the same maths as its CPU evaluation (../cpu.c, the specification), in
 * float32 or float64, for all batches at once, on a stream the caller gives. One translation unit
 * made of parts, each named for what it computes (kernels first, then what launches them):
 *   ani.cuh            the shapes the kernels and the plan share, CELU, split-K sums (and, through
 *                      core/cuda/common.cuh, vectors, fixed point, programmatic dependent launch)
 *   aev.cuh            positions, neighbours within the cutoff and the AEV (k_inverse_order, k_aev)
 *   gemm.cuh           GEMM jobs and epilogues, split-K SIMT product for middle row counts (k_gemm, k_gemm_reduce)
 *   gemm_big.cuh       many and middle rows: tensor cores on FP16 pairs (k_gemm_big_h, k_presplit), 128×128
 *                      register-blocked SIMT tiles (k_gemm_big)
 *   gemm_few_rows.cuh  one or a few molecules: split-K fix-ups, k_gemm_skinny, k_gemm_mma (tensor cores)
 *   finish.cuh         output layer (k_output), per-batch energies and total, flags (k_finish)
 *   aev_backward.cuh   forces from dE/dAEV (k_aev_backward)
 *   state.cuh          the launch plan and the device buffers
 *   build.cuh          making the launch plan (decisions from plan.c), uploading it
 *   launch.cuh         one evaluation's launches, read from the plan
 *   this file          the family's CUDA hooks (nnp_family::evaluate_cuda, cuda_check, cuda_free)
 *                      and ANI's CUDA diagnostics
 * The entry points and the capture contract's checks are the generic core's (core/cuda/nnp_cuda.cu).
 *
 * One evaluation is a fixed sequence of kernels whose sizes all come from the plan (made when the
 * atoms were set, at the last evaluation outside stream capture):
 *   positions     where each particle is in OpenMM's reordered buffers (when reordered)
 *   aev           one block per atom (few atoms: several): its position (any layout) → Å, its
 *                 neighbours within Rcr in the same batch in index order (block-wide ballots), its AEV
 *   layer 1       all members at once: [atoms of element e] × [members·width] GEMM
 *   layers 2..L-1 per (element, member) GEMM with bias and CELU
 *   output        per-atom energy (ensemble mean) and the first backward step (one molecule:
 *                 inside the last hidden layer's forward, see OutFuse)
 *   backward      GEMMs back to dE/dAEV (all members summed inside one GEMM)
 *   aev backward  forces, fixed-point atomic adds (order-independent, so deterministic)
 *   batch sums    one warp per batch, fixed order → per-batch energies; then the total, and the
 *                 error flags into mapped host memory (few atoms: the AEV backward's first block)
 * Inside stream capture nothing is allocated, copied from the host, synchronised or loaded.
 */
#include "build.cuh"
#include "launch.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static nnp_cuda_state* ani_state(nnp_plan* plan) {
    return plan != NULL && plan->model->family == &nnp_family_ani ? (nnp_cuda_state*)plan->cuda : NULL;
}

extern "C" void nnp_ani_cuda_free(nnp_plan* plan) {
    free_state((nnp_cuda_state*)plan->cuda);
    plan->cuda = NULL;
}

/* Errors the device recorded in earlier evaluations (seen once their flags reached the host). */
extern "C" nnp_status nnp_ani_cuda_check(nnp_plan* plan) {
    nnp_cuda_state* s = (nnp_cuda_state*)plan->cuda;
    int f[4];
    volatile int* host = s->host_flags; /* the GPU may be writing it */
    for (int k = 0; k < 4; k++) /* read and cleared at once: the GPU writes a flag only when it is raised */
        f[k] = __atomic_exchange_n((int*)&host[k], FLAG_CLEAR[k], __ATOMIC_ACQ_REL);
    if (f[0] != 0x7fffffff)
        return nnp_fail(NNP_ERR_NONFINITE, "a coordinate of atom %d is not finite (NaN or infinite) in a recent CUDA evaluation",
                        f[0]);
    if (f[1] > 0)
        return nnp_fail(NNP_ERR_STATE, "an atom had %d neighbours within the cutoff, more than the CUDA evaluation's capacity "
                        "of %d per atom: its energy and forces were wrong; split very large batches", f[1], s->capacity);
    if (f[2] > 0) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "two atoms of one batch were at the same position");
    if (f[3] > 0) return nnp_fail(NNP_ERR_NONFINITE, "the model gave a non-finite energy in a recent CUDA evaluation");
    return NNP_OK;
}

/* One evaluation (the family's evaluate_cuda). Outside capture, plan->cuda is NULL when the buffers
   must be made (nnp_evaluate_cuda freed the old ones); inside capture they exist and fit. */
extern "C" nnp_status nnp_ani_evaluate_cuda(nnp_plan* plan, const nnp_cuda_io* io, int capturing) {
    cudaStream_t stream = (cudaStream_t)io->stream;
    const nnp_model* m = plan->model;
    const double to_angstrom = plan->units == NNP_UNITS_NM_KJMOL ? 10.0 : 1.0;
    nnp_cuda_state* s = (nnp_cuda_state*)plan->cuda;
    nnp_status st;
    if (s == NULL) {
        s = (nnp_cuda_state*)calloc(1, sizeof *s);
        if (s == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory");
        nnp_cuda_driver.ctxGetCurrent(&s->context);
        st = plan->cuda_precision == NNP_PRECISION_DOUBLE ? build_state<double>(plan, s, io->n_particles)
                                                          : build_state<float>(plan, s, io->n_particles);
        if (st != NNP_OK) {
            free_state(s);
            return st;
        }
        plan->cuda = s;
    }
    if (io->box != NULL) {
        st = nnp_check_box(io->box, nnp_ani_of(m)->aev.Rcr, to_angstrom);
        if (st != NNP_OK) return st;
    }
    int profile = 0;
    if (!capturing && plan->cuda_profile) {
        for (int k = 0; !s->profiling && k <= NNP_CUDA_STAGES; k++) CUDA_TRY(cudaEventCreate(&s->events[k]));
        s->profiling = profile = 1;
    }
    if (s->precision == NNP_PRECISION_DOUBLE) {
        Box<double> box = {io->box != NULL, {0}};
        for (int k = 0; io->box && k < 9; k++) box.a[k] = io->box[k] * to_angstrom;
        st = launch<double>(plan, s, io, stream, box, profile);
    } else {
        Box<float> box = {io->box != NULL, {0}};
        for (int k = 0; io->box && k < 9; k++) box.a[k] = (float)(io->box[k] * to_angstrom);
        st = launch<float>(plan, s, io, stream, box, profile);
    }
    if (st != NNP_OK) return st;
    if (profile) {
        CUDA_TRY(cudaEventSynchronize(s->events[NNP_CUDA_STAGES]));
        for (int k = 0; k < NNP_CUDA_STAGES; k++) {
            float ms = 0;
            cudaEventElapsedTime(&ms, s->events[k], s->events[k + 1]);
            s->stage_us[k] = 1000.0 * ms;
        }
    }
    return NNP_OK;
}

/* ------------------------------------------------------------------ diagnostics (ANI's) */

extern "C" nnp_status nnp_cuda_aev_layout(nnp_plan* plan, int32_t* model_length, int32_t* stored_length, int32_t* classes) {
    nnp_cuda_state* s = ani_state(plan);
    if (s == NULL || plan->cuda_dirty)
        return nnp_fail(NNP_ERR_STATE, "no CUDA evaluation of the current atoms yet: evaluate first");
    if (model_length) *model_length = nnp_ani_of(plan->model)->aev_length;
    if (stored_length) *stored_length = s->aev_live;
    if (classes) *classes = s->n_classes;
    return NNP_OK;
}

extern "C" nnp_status nnp_cuda_activations_internal(nnp_plan* plan, int32_t* modes, int32_t* n) {
    nnp_cuda_state* s = ani_state(plan);
    if (modes == NULL || n == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_cuda_activations_internal: NULL argument");
    if (s == NULL || plan->cuda_dirty) return nnp_fail(NNP_ERR_STATE, "no CUDA evaluation of the current atoms yet: evaluate first");
    int k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < s->n_hidden; i++) {
            const int h = pass ? s->n_hidden - 1 - i : i;
            const GemmLaunch& g = (pass ? s->bwd : s->fwd)[h];
            modes[k++] = !g.presplit ? NNP_CUDA_A_FLOAT32 : !g.split_by_producer ? NNP_CUDA_A_PRESPLIT : NNP_CUDA_A_BY_PRODUCER;
        }
    *n = k;
    return NNP_OK;
}

extern "C" nnp_status nnp_cuda_stage_times(nnp_plan* plan, double* microseconds) {
    nnp_cuda_state* s = ani_state(plan);
    if (s == NULL || microseconds == NULL || !s->profiling)
        return nnp_fail(NNP_ERR_STATE, "no profiled CUDA evaluation: turn profiling on (nnp_plan_set_cuda_profiling) and evaluate outside capture");
    memcpy(microseconds, s->stage_us, sizeof s->stage_us);
    return NNP_OK;
}
