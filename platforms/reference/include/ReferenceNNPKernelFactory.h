#ifndef OPENMM_REFERENCENNPKERNELFACTORY_H_
#define OPENMM_REFERENCENNPKERNELFACTORY_H_

#include "openmm/KernelFactory.h"

namespace NNPPlugin {

/** Creates the NNPForce kernel of the Reference and CPU platforms. */
class ReferenceNNPKernelFactory : public OpenMM::KernelFactory {
public:
    OpenMM::KernelImpl* createKernelImpl(std::string name, const OpenMM::Platform& platform, OpenMM::ContextImpl& context) const override;
};

} // namespace NNPPlugin

#endif
