#ifndef OPENMM_NNPKERNELS_H_
#define OPENMM_NNPKERNELS_H_

#include "NNPForce.h"
#include "openmm/KernelImpl.h"
#include "openmm/Platform.h"
#include "openmm/System.h"

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

} // namespace NNPPlugin

#endif
