#ifndef OPENMM_CUDANNPKERNELS_H_
#define OPENMM_CUDANNPKERNELS_H_

#include "NNPKernels.h"
#include "internal/NNPModel.h"
#include "openmm/cuda/CudaContext.h"

#include <memory>
#include <vector>

namespace NNPPlugin {

class NNPForceInfo;

/**
 * NNPForce on the CUDA platform: hands OpenMM's buffers (positions in their reordered layout, the
 * atom index array, the fixed-point force buffer, the energy buffer) and its current stream to
 * libnnp's CUDA evaluation. Safe inside CUDA graph capture of a whole step (see libnnp's contract).
 * Precision: float32 arithmetic in single and mixed precision, float64 in double precision.
 */
class CudaCalcNNPForceKernel : public CalcNNPForceKernel {
public:
    CudaCalcNNPForceKernel(const std::string& name, const OpenMM::Platform& platform, OpenMM::CudaContext& cu);
    ~CudaCalcNNPForceKernel();
    void initialize(const OpenMM::System& system, const NNPForce& force) override;
    double execute(OpenMM::ContextImpl& context, bool includeForces, bool includeEnergy) override;
    std::vector<double> getBatchEnergies(OpenMM::ContextImpl& context) override;
    void copyParametersToContext(OpenMM::ContextImpl& context, const NNPForce& force) override;

private:
    void setAtoms(const NNPForce& force);
    void evaluate(bool includeForces, bool includeEnergy);
    OpenMM::CudaContext& cu;
    std::shared_ptr<const NNPModel> model;
    nnp_plan* plan;
    NNPForceInfo* info;
    bool periodic;
};

} // namespace NNPPlugin

#endif
