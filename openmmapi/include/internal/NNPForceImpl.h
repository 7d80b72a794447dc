#ifndef OPENMM_NNPFORCEIMPL_H_
#define OPENMM_NNPFORCEIMPL_H_

#include "NNPForce.h"
#include "internal/NNPModel.h"
#include "openmm/Kernel.h"
#include "openmm/internal/ForceImpl.h"

#include <map>
#include <string>
#include <vector>

namespace NNPPlugin {

/** The internal implementation of NNPForce. */
class OPENMM_EXPORT_NNP NNPForceImpl : public OpenMM::ForceImpl {
public:
    NNPForceImpl(const NNPForce& owner);
    void initialize(OpenMM::ContextImpl& context) override;
    const NNPForce& getOwner() const override { return owner; }
    void updateContextState(OpenMM::ContextImpl&, bool&) override {}
    double calcForcesAndEnergy(OpenMM::ContextImpl& context, bool includeForces, bool includeEnergy,
                               int groups) override;
    std::map<std::string, double> getDefaultParameters() override { return {}; }
    std::vector<std::string> getKernelNames() override;
    std::vector<double> getBatchEnergies(OpenMM::ContextImpl& context);
    void updateParametersInContext(OpenMM::ContextImpl& context);
    /** Checks the force's atoms against a System: particle indices in range, no particle twice. */
    static void checkAtoms(const NNPForce& force, const OpenMM::System& system);
    /** Loads the plugin's platform libraries (once) and registers kernels with every platform. */
    static void loadPlatformPlugins();
    static std::vector<std::string>& pluginLoadFailures();
    /** Platform libraries call this when loaded: their registration function, run on every load. */
    static void addKernelRegistrar(void (*registrar)());

private:
    const NNPForce& owner;
    OpenMM::Kernel kernel;
};

/**
 * Gives a libnnp plan the force's atoms (elements, batches, particle indices), ensemble member and
 * batch charges, as every platform's kernel does; returns the particle index of each atom. With
 * endBatch ≥ 0, only the atoms of batches firstBatch .. endBatch−1, renumbered from 0 (one device's
 * share of a Context on several GPUs).
 */
OPENMM_EXPORT_NNP std::vector<int32_t> setPlanAtoms(nnp_plan* plan, const NNPForce& force, int firstBatch = 0,
                                                  int endBatch = -1);

} // namespace NNPPlugin

#endif
