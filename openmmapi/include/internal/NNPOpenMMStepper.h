#ifndef OPENMM_NNPOPENMMSTEPPER_H_
#define OPENMM_NNPOPENMMSTEPPER_H_

#include "NNPKernels.h"
#include "openmm/Kernel.h"
#include "openmm/LangevinMiddleIntegrator.h"
#include "openmm/VerletIntegrator.h"

#include <memory>

namespace NNPPlugin {

/**
 * One whole step exactly as OpenMM's VerletIntegrator or LangevinMiddleIntegrator takes it
 * (updateContextState, forces of the integration force groups, OpenMM's own integration kernel of
 * the Context's platform), driven by an NNPGraphIntegrator's current settings.
 */
class OPENMM_EXPORT_NNP NNPOpenMMStepper {
public:
    /** Creates OpenMM's kernel on the Context's platform. */
    void initialize(OpenMM::ContextImpl& context, const NNPGraphIntegrator& integrator);
    /** One step: forces, then OpenMM's integration kernel. */
    void step(OpenMM::ContextImpl& context, const NNPGraphIntegrator& integrator);
    /** Only the integration kernel (forces must be in the force buffer). */
    void integrate(OpenMM::ContextImpl& context, const NNPGraphIntegrator& integrator);
    double computeKineticEnergy(OpenMM::ContextImpl& context, const NNPGraphIntegrator& integrator);

private:
    void sync(const NNPGraphIntegrator& integrator);
    OpenMM::Kernel kernel;
    std::unique_ptr<OpenMM::VerletIntegrator> verlet;
    std::unique_ptr<OpenMM::LangevinMiddleIntegrator> langevin;
};

} // namespace NNPPlugin

#endif
