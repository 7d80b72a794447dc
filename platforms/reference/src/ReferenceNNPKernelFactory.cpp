#include "ReferenceNNPKernelFactory.h"
#include "ReferenceNNPKernels.h"
#include "internal/NNPForceImpl.h"
#include "internal/windowsExportNNP.h"
#include "openmm/OpenMMException.h"
#include "openmm/reference/ReferencePlatform.h"

using namespace NNPPlugin;
using namespace OpenMM;

KernelImpl* ReferenceNNPKernelFactory::createKernelImpl(std::string name, const Platform& platform, ContextImpl& context) const {
    if (name == CalcNNPForceKernel::Name()) return new ReferenceCalcNNPForceKernel(name, platform);
    if (name == IntegrateNNPStepKernel::Name()) return new PlainIntegrateNNPStepKernel(name, platform, context);
    throw OpenMMException("NNPForce: no kernel '" + name + "' on platform " + platform.getName());
}

/* Registers the kernels with every Reference-derived platform (Reference, CPU) that lacks them.
   OpenMM owns a factory per registration and deletes each once, so every name gets its own. */
static void registerReferenceNNPKernels() {
    for (int i = 0; i < Platform::getNumPlatforms(); i++) {
        Platform& platform = Platform::getPlatform(i);
        if (dynamic_cast<ReferencePlatform*>(&platform) == nullptr) continue;
        for (const std::string& name : {CalcNNPForceKernel::Name(), IntegrateNNPStepKernel::Name()})
            if (!platform.supportsKernels({name})) platform.registerKernelFactory(name, new ReferenceNNPKernelFactory());
    }
}

extern "C" OPENMM_EXPORT_NNP void registerPlatforms() {}

extern "C" OPENMM_EXPORT_NNP void registerKernelFactories() {
    NNPForceImpl::addKernelRegistrar(registerReferenceNNPKernels);
    registerReferenceNNPKernels();
}
