#ifndef OPENMM_NNPKERNELS_H_
#define OPENMM_NNPKERNELS_H_

#include "NNPForce.h"
#include "NNPIntegrators.h"
#include "openmm/State.h"
#include "openmm/KernelImpl.h"
#include "openmm/Platform.h"
#include "openmm/System.h"

#include <iosfwd>
#include <string>
#include <vector>

namespace NNPPlugin {

/** The kernel that evaluates an NNPForce; each platform implements it. */
class CalcNNPForceKernel : public OpenMM::KernelImpl {
public:
    static std::string Name() { return "CalcNNPForce"; }
    CalcNNPForceKernel(const std::string& name, const OpenMM::Platform& platform) : KernelImpl(name, platform) {}
    /** Sets up the kernel for a force of a System. */
    virtual void initialize(const OpenMM::System& system, const NNPForce& force) = 0;
    /** Adds the forces (if includeForces) and returns the energy in kJ/mol. */
    virtual double execute(OpenMM::ContextImpl& context, bool includeForces, bool includeEnergy) = 0;
    /** Energies of every batch at the current positions, kJ/mol. */
    virtual std::vector<double> getBatchEnergies(OpenMM::ContextImpl& context) = 0;
    /** Copies changed atoms, member and periodicity into the kernel. */
    virtual void copyParametersToContext(OpenMM::ContextImpl& context, const NNPForce& force) = 0;
};

/** The kernel behind NNPVerletIntegrator and NNPLangevinIntegrator; each platform implements it. */
class IntegrateNNPStepKernel : public OpenMM::KernelImpl {
public:
    static std::string Name() { return "IntegrateNNPStep"; }
    IntegrateNNPStepKernel(const std::string& name, const OpenMM::Platform& platform) : KernelImpl(name, platform) {}
    virtual void initialize(const OpenMM::System& system, const NNPGraphIntegrator& integrator) = 0;
    /** Runs `steps` whole steps (forces of the integration force groups + integration). */
    virtual void execute(OpenMM::ContextImpl& context, const NNPGraphIntegrator& integrator, int steps) = 0;
    virtual double computeKineticEnergy(OpenMM::ContextImpl& context, const NNPGraphIntegrator& integrator) = 0;
    /** Told by the Context what the user changed (positions, parameters, ...). */
    virtual void stateChanged(OpenMM::State::DataType changed) { (void)changed; }
    virtual bool isReplayingGraphs() const { return false; }
    virtual std::string getFallbackReason() const { return ""; }
    virtual int getNumGraphRecordings() const { return 0; }
    virtual void createCheckpoint(std::ostream& stream) const { (void)stream; }
    virtual void loadCheckpoint(std::istream& stream) { (void)stream; }
};

} // namespace NNPPlugin

#endif
