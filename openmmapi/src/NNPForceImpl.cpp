#include "internal/NNPForceImpl.h"
#include "NNPKernels.h"
#include "openmm/OpenMMException.h"
#include "openmm/Platform.h"
#include "openmm/internal/ContextImpl.h"

#include <cstdlib>
#include <dlfcn.h>
#include <mutex>
#include <set>
#include <sys/stat.h>

using namespace NNPPlugin;
using namespace OpenMM;
using std::string;
using std::vector;

NNPForceImpl::NNPForceImpl(const NNPForce& owner) : owner(owner) {}

void NNPForceImpl::checkAtoms(const NNPForce& force, const System& system) {
    std::set<int> seen;
    for (int i = 0; i < force.getNumAtoms(); i++) {
        int particle, z, batch;
        force.getAtomParameters(i, particle, z, batch);
        if (particle < 0 || particle >= system.getNumParticles())
            throw OpenMMException("NNPForce: atom " + std::to_string(i) + " refers to particle " + std::to_string(particle) +
                                  ", but the System has " + std::to_string(system.getNumParticles()) + " particles");
        if (!seen.insert(particle).second)
            throw OpenMMException("NNPForce: particle " + std::to_string(particle) + " is added twice (atom " + std::to_string(i) + ")");
    }
}

void NNPForceImpl::initialize(ContextImpl& context) {
    checkAtoms(owner, context.getSystem());
    kernel = context.getPlatform().createKernel(CalcNNPForceKernel::Name(), context);
    kernel.getAs<CalcNNPForceKernel>().initialize(context.getSystem(), owner);
}

double NNPForceImpl::calcForcesAndEnergy(ContextImpl& context, bool includeForces, bool includeEnergy, int groups) {
    if ((groups & (1 << owner.getForceGroup())) != 0)
        return kernel.getAs<CalcNNPForceKernel>().execute(context, includeForces, includeEnergy);
    return 0.0;
}

vector<string> NNPForceImpl::getKernelNames() { return {CalcNNPForceKernel::Name()}; }

vector<double> NNPForceImpl::getBatchEnergies(ContextImpl& context) {
    return kernel.getAs<CalcNNPForceKernel>().getBatchEnergies(context);
}

void NNPForceImpl::updateParametersInContext(ContextImpl& context) {
    checkAtoms(owner, context.getSystem());
    kernel.getAs<CalcNNPForceKernel>().copyParametersToContext(context, owner);
    context.systemChanged();
}

/* ------------------------------------------------------------------ platform plugins */

static std::mutex& registryMutex() {
    static std::mutex mutex;
    return mutex;
}

static vector<void (*)()>& registrars() {
    static vector<void (*)()> list;
    return list;
}

vector<string>& NNPForceImpl::pluginLoadFailures() {
    static vector<string> failures;
    return failures;
}

void NNPForceImpl::addKernelRegistrar(void (*registrar)()) {
    std::lock_guard<std::mutex> lock(registryMutex());
    for (auto r : registrars())
        if (r == registrar) return;
    registrars().push_back(registrar);
}

void NNPForceImpl::loadPlatformPlugins() {
    static std::once_flag once;
    std::call_once(once, [] {
        // The platform libraries live beside this library (build tree) or in plugins/ beside it (an
        // install, and the wheels, where OpenMM itself loads them from its plugin folder at start-up):
        // find this library and load what is not loaded yet, so that nothing needs LD_LIBRARY_PATH
        // or OPENMM_PLUGIN_DIR.
        Dl_info info;
        if (dladdr(reinterpret_cast<void*>(&NNPForceImpl::loadPlatformPlugins), &info) == 0 || info.dli_fname == nullptr) {
            pluginLoadFailures().push_back("NNPForce: cannot locate libOpenMMNNP to find its platform libraries");
            return;
        }
        // The canonical path: the library may have been found through a RUNPATH such as plugins/..
        // and OpenMM reports the failures of its own plugin loading under canonical paths.
        char* resolved = realpath(info.dli_fname, nullptr);
        string self = resolved != nullptr ? resolved : info.dli_fname;
        free(resolved);
        string dir = self.substr(0, self.find_last_of('/') + 1);
        const vector<string> openmmFailures = Platform::getPluginLoadFailures();
        for (const char* name : {"libOpenMMNNPReference.so", "libOpenMMNNPCUDA.so", "plugins/libOpenMMNNPReference.so",
                                 "plugins/libOpenMMNNPCUDA.so"}) {
            string path = dir + name;
            struct stat st;
            if (stat(path.c_str(), &st) != 0) continue; // not built or not installed
            if (void* loaded = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
                dlclose(loaded); // OpenMM loaded it already; the registrars below cover new platforms
                continue;
            }
            bool triedByOpenMM = false; // and failed: its failure is reported already, once is enough
            for (const string& failure : openmmFailures)
                triedByOpenMM = triedByOpenMM || failure.find(path + ":") != string::npos;
            if (triedByOpenMM) continue;
            try {
                Platform::loadPluginLibrary(path);
            } catch (const std::exception& e) {
                pluginLoadFailures().push_back(e.what());
            }
        }
    });
    // Register with platforms loaded since (registration skips platforms that already have the kernel).
    vector<void (*)()> list;
    {
        std::lock_guard<std::mutex> lock(registryMutex());
        list = registrars();
    }
    for (auto registrar : list) registrar();
}

std::vector<int32_t> NNPPlugin::setPlanAtoms(nnp_plan* plan, const NNPForce& force, int firstBatch, int endBatch) {
    // The atoms of batches firstBatch .. endBatch-1 (all when endBatch < 0), their batches renumbered from 0.
    bool all = endBatch < 0;
    std::vector<int32_t> z, batch, particles;
    z.reserve(force.getNumAtoms()), batch.reserve(force.getNumAtoms()), particles.reserve(force.getNumAtoms());
    for (int i = 0; i < force.getNumAtoms(); i++) {
        int p, atomicNumber, b;
        force.getAtomParameters(i, p, atomicNumber, b);
        if (!all && (b < firstBatch || b >= endBatch)) continue;
        particles.push_back(p);
        z.push_back(atomicNumber);
        batch.push_back(all ? b : b - firstBatch);
    }
    checkNNP(nnp_plan_set_atoms(plan, (int32_t)z.size(), z.data(), batch.data()), "invalid atoms");
    checkNNP(nnp_plan_set_particles(plan, particles.data()), "invalid particles");
    checkNNP(nnp_plan_set_member(plan, force.getEnsembleMember()), "invalid ensemble member");
    int nBatches = nnp_plan_num_batches(plan), offset = all ? 0 : firstBatch;
    std::vector<int32_t> charges(nBatches, 0);
    for (const auto& entry : force.getBatchCharges())
        if (entry.first - offset >= 0 && entry.first - offset < nBatches) charges[entry.first - offset] = entry.second;
    checkNNP(nnp_plan_set_batch_charges(plan, nBatches, charges.data()), "invalid batch charges");
    return particles;
}
