#include "ReferenceNNPKernelFactory.h"
#include "ReferenceNNPKernels.h"
#include "internal/NNPForceImpl.h"
#include "internal/windowsExportNNP.h"
#include "openmm/OpenMMException.h"
#include "openmm/reference/ReferencePlatform.h"

using namespace NNPPlugin;
using namespace OpenMM;

KernelImpl* ReferenceNNPKernelFactory::createKernelImpl(std::string name, const Platform& platform, ContextImpl&) const {
    if (name == CalcNNPForceKernel::Name()) return new ReferenceCalcNNPForceKernel(name, platform);
    throw OpenMMException("NNPForce: no kernel '" + name + "' on platform " + platform.getName());
}

/* Registers the kernel with every Reference-derived platform (Reference, CPU) that lacks it. */
static void registerReferenceNNPKernels() {
    for (int i = 0; i < Platform::getNumPlatforms(); i++) {
        Platform& platform = Platform::getPlatform(i);
        if (dynamic_cast<ReferencePlatform*>(&platform) != nullptr && !platform.supportsKernels({CalcNNPForceKernel::Name()}))
            platform.registerKernelFactory(CalcNNPForceKernel::Name(), new ReferenceNNPKernelFactory());
    }
}

extern "C" OPENMM_EXPORT_NNP void registerPlatforms() {}

extern "C" OPENMM_EXPORT_NNP void registerKernelFactories() {
    NNPForceImpl::addKernelRegistrar(registerReferenceNNPKernels);
    registerReferenceNNPKernels();
}
