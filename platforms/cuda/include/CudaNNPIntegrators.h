#ifndef OPENMM_CUDANNPINTEGRATORS_H_
#define OPENMM_CUDANNPINTEGRATORS_H_

#include "NNPKernels.h"
#include "internal/NNPOpenMMStepper.h"
#include "openmm/common/ComputeArray.h"
#include "openmm/common/ComputeKernel.h"
#include "openmm/cuda/CudaContext.h"

#include <cuda.h>
#include <map>
#include <memory>
#include <string>

namespace NNPPlugin {

/**
 * NNPVerletIntegrator and NNPLangevinIntegrator on CUDA: whole steps recorded into CUDA graphs on a
 * stream of the plugin (installed as OpenMM's current queue while the steps run) and replayed.
 * Verlet runs OpenMM's own CUDA Verlet kernel; Langevin runs the LFMiddle scheme with device-side
 * random numbers (nnpLangevin.cu.in). See docs/integrators.md for what makes a graph re-record.
 */
class CudaIntegrateNNPStepKernel : public IntegrateNNPStepKernel {
public:
    CudaIntegrateNNPStepKernel(const std::string& name, const OpenMM::Platform& platform, OpenMM::CudaContext& cu,
                               OpenMM::ContextImpl& context);
    ~CudaIntegrateNNPStepKernel();
    void initialize(const OpenMM::System& system, const NNPGraphIntegrator& integrator) override;
    void execute(OpenMM::ContextImpl& context, const NNPGraphIntegrator& integrator, int steps) override;
    double computeKineticEnergy(OpenMM::ContextImpl& context, const NNPGraphIntegrator& integrator) override;
    void stateChanged(OpenMM::State::DataType changed) override;
    bool isReplayingGraphs() const override { return replaying; }
    std::string getFallbackReason() const override { return fallback; }
    int getNumGraphRecordings() const override { return recordings; }
    void createCheckpoint(std::ostream& stream) const override;
    void loadCheckpoint(std::istream& stream) override;

private:
    /* One whole step with the current settings (eagerly, or into a capture). */
    void oneStep(const NNPGraphIntegrator& integrator);
    void langevinIntegrate(const NNPGraphIntegrator& integrator);
    /* Uploads changed step size / Langevin parameters (outside any capture). */
    void uploadParameters(const NNPGraphIntegrator& integrator);
    void eagerSteps(const NNPGraphIntegrator& integrator, int steps);
    /* Records `steps` steps; returns nullptr (and sets `fallback`) when the step cannot be recorded. */
    CUgraphExec record(const NNPGraphIntegrator& integrator, int steps);
    void dropGraphs();
    void setFallback(const NNPGraphIntegrator& integrator, const std::string& reason);
    std::string findUncapturable(const OpenMM::System& system) const;

    OpenMM::CudaContext& cu;
    OpenMM::ContextImpl& context;
    bool stochastic = false;
    NNPOpenMMStepper verlet; // OpenMM's CUDA Verlet kernel
    OpenMM::ComputeKernel part1, part2, part3;
    OpenMM::ComputeArray params, oldDelta, stepCounter;
    unsigned int seed = 0;
    double prevTemperature = -1, prevFriction = -1, prevStepSize = -1;

    CUstream stream = nullptr;
    CUevent ordered = nullptr;
    std::map<int, CUgraphExec> graphs; // steps → instantiated graph
    int recordings = 0;
    bool replaying = false, needEager = true, staticChecked = false, invalidated = false;
    std::string fallback;
    /* What the graphs baked in. */
    double recordedTolerance = -1;
    int recordedGroups = 0, recordedStepsPerGraph = 0;
    OpenMM::Vec3 recordedBox[3];
};

} // namespace NNPPlugin

#endif
