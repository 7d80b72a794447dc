#include "CudaNNPIntegrators.h"
#include "CudaNNPKernels.h"
#include "internal/NNPForceImpl.h"
#include "internal/windowsExportNNP.h"
#include "openmm/KernelFactory.h"
#include "openmm/OpenMMException.h"
#include "openmm/cuda/CudaPlatform.h"
#include "openmm/internal/ContextImpl.h"

using namespace NNPPlugin;
using namespace OpenMM;

/** Creates the NNPForce kernel of the CUDA platform. */
class CudaNNPKernelFactory : public KernelFactory {
public:
    KernelImpl* createKernelImpl(std::string name, const Platform& platform, ContextImpl& context) const override {
        CudaPlatform::PlatformData& data = *static_cast<CudaPlatform::PlatformData*>(context.getPlatformData());
        if (name == CalcNNPForceKernel::Name()) {
            if (data.contexts.size() > 1) return new CudaParallelCalcNNPForceKernel(name, platform, data);
            return new CudaCalcNNPForceKernel(name, platform, *data.contexts[0]);
        }
        if (name == IntegrateNNPStepKernel::Name()) {
            if (data.contexts.size() != 1)
                throw OpenMMException("NNP integrators: CUDA graphs need a Context on one GPU (DeviceIndex names " +
                                      std::to_string(data.contexts.size()) + " devices); on several GPUs, use OpenMM's "
                                      "VerletIntegrator or LangevinMiddleIntegrator");
            return new CudaIntegrateNNPStepKernel(name, platform, *data.contexts[0], context);
        }
        throw OpenMMException("NNPForce: no kernel '" + name + "' on platform " + platform.getName());
    }
};

static void registerCudaNNPKernels() {
    for (int i = 0; i < Platform::getNumPlatforms(); i++) {
        Platform& platform = Platform::getPlatform(i);
        if (platform.getName() != "CUDA") continue;
        for (const std::string& name : {CalcNNPForceKernel::Name(), IntegrateNNPStepKernel::Name()})
            if (!platform.supportsKernels({name})) platform.registerKernelFactory(name, new CudaNNPKernelFactory());
    }
}

extern "C" OPENMM_EXPORT_NNP void registerPlatforms() {}

extern "C" OPENMM_EXPORT_NNP void registerKernelFactories() {
    NNPForceImpl::addKernelRegistrar(registerCudaNNPKernels);
    registerCudaNNPKernels();
}
