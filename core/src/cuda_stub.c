/* The CUDA entry points of a libnnp built without CUDA: each says so. */
#include "internal.h"

static nnp_status no_cuda(void) {
    return nnp_fail(NNP_ERR_UNSUPPORTED, "this libnnp was built without CUDA (configure with the CUDA toolkit present)");
}

int nnp_cuda_available(void) { return 0; }
void nnp_cuda_release(nnp_plan* plan) { (void)plan; }
nnp_status nnp_evaluate_cuda(nnp_plan* plan, const nnp_cuda_io* io) { (void)plan, (void)io; return no_cuda(); }
nnp_status nnp_cuda_batch_energies(nnp_plan* plan, void* stream, double* energies) {
    (void)plan, (void)stream, (void)energies;
    return no_cuda();
}
nnp_status nnp_cuda_aev_layout(nnp_plan* plan, int32_t* model_length, int32_t* stored_length, int32_t* classes) {
    (void)plan, (void)model_length, (void)stored_length, (void)classes;
    return no_cuda();
}
nnp_status nnp_cuda_activations_internal(nnp_plan* plan, int32_t* modes, int32_t* n) {
    (void)plan, (void)modes, (void)n;
    return no_cuda();
}
nnp_status nnp_cuda_stage_times(nnp_plan* plan, double* microseconds) {
    (void)plan, (void)microseconds;
    return no_cuda();
}
