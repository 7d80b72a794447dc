/*
 * libnnp's CUDA entry points, the same for every model family: argument checks, the capture
 * contract, the family's evaluation (nnp_family::evaluate_cuda, e.g. core/models/ani/cuda/), the
 * first evaluation's synchronisation and the per-batch energies.
 *
 * The capture contract: every size (atoms, batches, charges, particles, buffers) is fixed by the
 * last evaluation outside stream capture; inside capture the family only launches kernels (nothing
 * is allocated, copied from the host, synchronised or loaded), and errors its kernels raise are
 * reported by the next call outside capture that looks (nnp_cuda_batch_energies or an evaluation).
 */
#include "common.cuh"

#include <stdlib.h>

nnp_cuda_driver_table nnp_cuda_driver;

nnp_status nnp_cuda_load_driver(void) {
    if (nnp_cuda_driver.loaded) return NNP_OK;
    struct { const char* name; void** fn; } fns[] = {{"cuStreamIsCapturing", (void**)&nnp_cuda_driver.streamIsCapturing},
                                                    {"cuCtxGetCurrent", (void**)&nnp_cuda_driver.ctxGetCurrent},
                                                    {"cuCtxPushCurrent", (void**)&nnp_cuda_driver.ctxPushCurrent},
                                                    {"cuCtxPopCurrent", (void**)&nnp_cuda_driver.ctxPopCurrent}};
    for (size_t k = 0; k < sizeof fns / sizeof fns[0]; k++) {
        cudaDriverEntryPointQueryResult found;
        cudaError_t err = cudaGetDriverEntryPointByVersion(fns[k].name, fns[k].fn, 12000, cudaEnableDefault, &found);
        if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || *fns[k].fn == NULL)
            return nnp_fail(NNP_ERR_CUDA, "the CUDA driver does not provide %s (%s)", fns[k].name,
                            err != cudaSuccess ? cudaGetErrorString(err) : "symbol not found");
    }
    nnp_cuda_driver.loaded = 1;
    return NNP_OK;
}

extern "C" void nnp_cuda_release(nnp_plan* plan) {
    if (plan->cuda != NULL) plan->model->family->cuda_free(plan);
    plan->cuda = NULL;
}

extern "C" int nnp_cuda_available(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

static nnp_status capture_state(cudaStream_t stream, int* capturing) {
    nnp_status st = nnp_cuda_load_driver();
    if (st != NNP_OK) return st;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = nnp_cuda_driver.streamIsCapturing((CUstream)stream, &status);
    if (r != CUDA_SUCCESS) return nnp_fail(NNP_ERR_CUDA, "cuStreamIsCapturing failed (CUresult %d)", (int)r);
    *capturing = status != CU_STREAM_CAPTURE_STATUS_NONE;
    return NNP_OK;
}

extern "C" nnp_status nnp_evaluate_cuda(nnp_plan* plan, const nnp_cuda_io* io) {
    if (plan == NULL || io == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_evaluate_cuda: NULL argument");
    const nnp_family* family = plan->model->family;
    if (family->evaluate_cuda == NULL)
        return nnp_fail(NNP_ERR_UNSUPPORTED, "this libnnp has no CUDA evaluation of %s models such as '%s' (evaluate it "
                        "with nnp_evaluate_cpu, or OpenMM's Reference or CPU platform)", family->name, plan->model->name);
    if (plan->n_atoms > 0 && io->positions == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_evaluate_cuda: positions is NULL");
    if (plan->n_atoms > 0 && io->forces_format != NNP_FORCES_NONE && io->forces == NULL)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_evaluate_cuda: forces is NULL");
    if (io->positions_format < NNP_POSITIONS_XYZ_DOUBLE || io->positions_format > NNP_POSITIONS_DOUBLE4)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_evaluate_cuda: unknown positions format %d", (int)io->positions_format);
    cudaStream_t stream = (cudaStream_t)io->stream;
    int capturing = 0;
    nnp_status st = capture_state(stream, &capturing);
    if (st != NNP_OK) return st;
    nnp_cuda_base* s = (nnp_cuda_base*)plan->cuda;
    if (capturing) {
        /* Only launches from here on: every size must already be known. */
        if (s == NULL || !s->evaluated)
            return nnp_fail(NNP_ERR_CAPTURE, "the CUDA evaluation is being captured into a graph before its first "
                            "evaluation: run one step (or one evaluation) outside capture first, so that the batch count "
                            "and buffer sizes are known");
        if (plan->cuda_dirty)
            return nnp_fail(NNP_ERR_CAPTURE, "the atoms, batches, charges, ensemble member, units or precision changed since "
                            "the last evaluation outside capture (now %d atoms in %d batches): run one step outside capture "
                            "before capturing again", plan->n_atoms, plan->n_batches);
        if (io->sorted_particles && io->n_particles != s->n_particles)
            return nnp_fail(NNP_ERR_CAPTURE, "the particle count changed since the last evaluation outside capture");
    } else {
        if (s != NULL) {
            st = family->cuda_check(plan);
            if (st != NNP_OK) return st;
        }
        if (s != NULL && (plan->cuda_dirty || (io->sorted_particles && io->n_particles != s->n_particles)))
            nnp_cuda_release(plan); /* the family makes new buffers */
        plan->cuda_dirty = 0;
    }
    st = family->evaluate_cuda(plan, io, capturing);
    if (st != NNP_OK) return st;
    s = (nnp_cuda_base*)plan->cuda;
    if (!capturing && !s->evaluated) {
        /* The first evaluation with new buffers: wait for it, so that bad input is reported now. */
        CUDA_TRY(cudaStreamSynchronize(stream));
        st = family->cuda_check(plan);
        if (st != NNP_OK) return st;
        s->evaluated = 1;
    }
    return NNP_OK;
}

extern "C" nnp_status nnp_cuda_batch_energies(nnp_plan* plan, void* stream, double* energies) {
    if (plan == NULL || (energies == NULL && plan->n_batches > 0))
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_cuda_batch_energies: NULL argument");
    nnp_cuda_base* s = (nnp_cuda_base*)plan->cuda;
    if (s == NULL || !s->evaluated || plan->cuda_dirty)
        return nnp_fail(NNP_ERR_STATE, "no CUDA evaluation of the current atoms yet: evaluate first");
    int capturing = 0;
    nnp_status st = capture_state((cudaStream_t)stream, &capturing);
    if (st != NNP_OK) return st;
    if (capturing)
        return nnp_fail(NNP_ERR_CAPTURE, "batch energies cannot be read while the stream is being captured (it would "
                        "synchronise); read them after the graph has run");
    if (plan->n_batches > 0)
        CUDA_TRY(cudaMemcpyAsync(energies, s->batch_energy, sizeof(double) * plan->n_batches, cudaMemcpyDeviceToHost,
                                 (cudaStream_t)stream));
    CUDA_TRY(cudaStreamSynchronize((cudaStream_t)stream));
    return plan->model->family->cuda_check(plan);
}
