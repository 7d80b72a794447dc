#ifndef OPENMM_CUDANNPKERNELS_H_
#define OPENMM_CUDANNPKERNELS_H_

#include "NNPKernels.h"
#include "internal/NNPModel.h"
#include "openmm/cuda/CudaContext.h"
#include "openmm/cuda/CudaPlatform.h"
#include "openmm/Kernel.h"

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
    /**
     * One device's share of a Context on several GPUs: only batches firstBatch .. endBatch−1 (all when
     * endBatch < 0, the default). Takes effect now if initialized; the next evaluation re-sizes.
     */
    void setBatchRange(const NNPForce& force, int firstBatch, int endBatch);
    /** Batch energies of the last evaluation: endBatch − firstBatch values (waits for the stream). */
    std::vector<double> lastBatchEnergies();

private:
    void setAtoms(const NNPForce& force);
    void evaluate(bool includeForces, bool includeEnergy);
    OpenMM::CudaContext& cu;
    std::shared_ptr<const NNPModel> model;
    nnp_plan* plan;
    NNPForceInfo* info;
    bool periodic;
    int firstBatch = 0, endBatch = -1;
};

/**
 * NNPForce in a Context on several GPUs (DeviceIndex "0,1,..."): its batches are split, in order,
 * into one contiguous range per device by their cost (atoms and pairs within the cutoff, from the
 * positions of the first evaluation; nnp_partition_batches); each device evaluates its range on its
 * own thread into its own force and energy buffers, which OpenMM sums; batch energies are gathered
 * in batch order. Each range is evaluated exactly as on one GPU, so a batch's energy and forces do
 * not depend on the split.
 */
class CudaParallelCalcNNPForceKernel : public CalcNNPForceKernel {
public:
    CudaParallelCalcNNPForceKernel(const std::string& name, const OpenMM::Platform& platform,
                                   OpenMM::CudaPlatform::PlatformData& data);
    void initialize(const OpenMM::System& system, const NNPForce& force) override;
    double execute(OpenMM::ContextImpl& context, bool includeForces, bool includeEnergy) override;
    std::vector<double> getBatchEnergies(OpenMM::ContextImpl& context) override;
    void copyParametersToContext(OpenMM::ContextImpl& context, const NNPForce& force) override;
    /** The current split: device d evaluates batches first[d] .. first[d+1]−1. */
    const std::vector<int>& getSplit() const { return first; }

private:
    class Task;
    CudaCalcNNPForceKernel& device(int d) { return kernels[d].getAs<CudaCalcNNPForceKernel>(); }
    void split(OpenMM::ContextImpl& context);
    OpenMM::CudaPlatform::PlatformData& data;
    std::vector<OpenMM::Kernel> kernels;
    const NNPForce* force = nullptr;
    std::vector<int> first;
    int numBatches = 0, forceGroup = 0;
    bool balanced = false;
};

} // namespace NNPPlugin

#endif
