#ifndef OPENMM_REFERENCENNPKERNELS_H_
#define OPENMM_REFERENCENNPKERNELS_H_

#include "NNPKernels.h"
#include "internal/NNPModel.h"
#include "internal/NNPOpenMMStepper.h"

#include <memory>
#include <vector>

namespace NNPPlugin {

/**
 * NNPForce on the Reference and CPU platforms: libnnp's double-precision CPU evaluation, with
 * OpenMM's positions, box and forces in nm, kJ/mol and kJ/mol/nm.
 */
class ReferenceCalcNNPForceKernel : public CalcNNPForceKernel {
public:
    ReferenceCalcNNPForceKernel(const std::string& name, const OpenMM::Platform& platform);
    ~ReferenceCalcNNPForceKernel();
    void initialize(const OpenMM::System& system, const NNPForce& force) override;
    double execute(OpenMM::ContextImpl& context, bool includeForces, bool includeEnergy) override;
    std::vector<double> getBatchEnergies(OpenMM::ContextImpl& context) override;
    void copyParametersToContext(OpenMM::ContextImpl& context, const NNPForce& force) override;

private:
    /* Evaluates at the current positions; fills batchEnergies and, if wanted, forces (per atom). */
    double evaluate(OpenMM::ContextImpl& context, bool withForces);
    void setAtoms(const NNPForce& force);
    std::shared_ptr<const NNPModel> model;
    nnp_plan* plan;
    bool periodic;
    bool threadsSet = false; // the CPU platform's Threads property, applied at the first evaluation
    std::vector<int32_t> particles;
    std::vector<double> positions, forces, batchEnergies;
};

/** The integrators' kernel where no graphs are used (Reference, CPU): OpenMM's kernels, eagerly. */
class PlainIntegrateNNPStepKernel : public IntegrateNNPStepKernel {
public:
    PlainIntegrateNNPStepKernel(const std::string& name, const OpenMM::Platform& platform, OpenMM::ContextImpl& context)
        : IntegrateNNPStepKernel(name, platform), context(context) {}
    void initialize(const OpenMM::System& system, const NNPGraphIntegrator& integrator) override;
    void execute(OpenMM::ContextImpl& context, const NNPGraphIntegrator& integrator, int steps) override;
    double computeKineticEnergy(OpenMM::ContextImpl& context, const NNPGraphIntegrator& integrator) override;

private:
    OpenMM::ContextImpl& context;
    NNPOpenMMStepper stepper;
};

} // namespace NNPPlugin

#endif
