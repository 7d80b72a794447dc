#include "NNPCWrapper.h"
#include "NNPForce.h"
#include "NNPIntegrators.h"
#include "openmm/OpenMMException.h"
#include "openmm/Context.h"

#include <exception>
#include <string>
#include <vector>

using NNPPlugin::NNPForce;

static thread_local std::string lastError;

static OpenMM_NNP_Status fail(const std::string& message) {
    lastError = message;
    return OpenMM_NNP_Error;
}

static NNPForce* force(OpenMM_NNPForce* f) { return reinterpret_cast<NNPForce*>(f); }
static const NNPForce* force(const OpenMM_NNPForce* f) { return reinterpret_cast<const NNPForce*>(f); }

/* Runs body; turns every exception into a status and a message. */
template <class Body>
static OpenMM_NNP_Status guarded(const char* function, const void* target, Body body) {
    if (target == nullptr) return fail(std::string(function) + ": NULL argument");
    try {
        body();
        return OpenMM_NNP_Ok;
    } catch (const std::exception& e) {
        return fail(e.what());
    } catch (...) {
        return fail(std::string(function) + ": unknown error");
    }
}

extern "C" {

const char* OpenMM_NNP_getLastError(void) { return lastError.c_str(); }

OpenMM_NNPForce* OpenMM_NNPForce_create(const char* modelPath) {
    NNPForce* result = nullptr;
    guarded("OpenMM_NNPForce_create", modelPath, [&] { result = new NNPForce(modelPath); });
    return reinterpret_cast<OpenMM_NNPForce*>(result);
}

void OpenMM_NNPForce_destroy(OpenMM_NNPForce* target) { delete force(target); }

OpenMM_Force* OpenMM_NNPForce_asForce(OpenMM_NNPForce* target) {
    return reinterpret_cast<OpenMM_Force*>(static_cast<OpenMM::Force*>(force(target)));
}

OpenMM_NNPForce* OpenMM_NNPForce_cast(OpenMM_Force* f) {
    NNPForce* result = dynamic_cast<NNPForce*>(reinterpret_cast<OpenMM::Force*>(f));
    if (result == nullptr) fail("OpenMM_NNPForce_cast: not an NNPForce");
    return reinterpret_cast<OpenMM_NNPForce*>(result);
}

int OpenMM_NNPForce_addAtom(OpenMM_NNPForce* target, int particle, int atomicNumber, int batch) {
    int index = -1;
    guarded("OpenMM_NNPForce_addAtom", target, [&] { index = force(target)->addAtom(particle, atomicNumber, batch); });
    return index;
}

int OpenMM_NNPForce_getNumAtoms(const OpenMM_NNPForce* target) {
    if (target == nullptr) return fail("OpenMM_NNPForce_getNumAtoms: NULL argument"), -1;
    return force(target)->getNumAtoms();
}

OpenMM_NNP_Status OpenMM_NNPForce_getAtomParameters(const OpenMM_NNPForce* target, int index, int* particle,
                                                    int* atomicNumber, int* batch) {
    if (particle == nullptr || atomicNumber == nullptr || batch == nullptr)
        return fail("OpenMM_NNPForce_getAtomParameters: NULL argument");
    return guarded("OpenMM_NNPForce_getAtomParameters", target,
                   [&] { force(target)->getAtomParameters(index, *particle, *atomicNumber, *batch); });
}

OpenMM_NNP_Status OpenMM_NNPForce_setAtomParameters(OpenMM_NNPForce* target, int index, int particle, int atomicNumber,
                                                    int batch) {
    return guarded("OpenMM_NNPForce_setAtomParameters", target,
                   [&] { force(target)->setAtomParameters(index, particle, atomicNumber, batch); });
}

int OpenMM_NNPForce_getNumBatches(const OpenMM_NNPForce* target) {
    if (target == nullptr) return fail("OpenMM_NNPForce_getNumBatches: NULL argument"), -1;
    return force(target)->getNumBatches();
}

OpenMM_NNP_Status OpenMM_NNPForce_setEnsembleMember(OpenMM_NNPForce* target, int member) {
    return guarded("OpenMM_NNPForce_setEnsembleMember", target, [&] { force(target)->setEnsembleMember(member); });
}

OpenMM_NNP_Status OpenMM_NNPForce_setBatchCharge(OpenMM_NNPForce* target, int batch, int charge) {
    return guarded("OpenMM_NNPForce_setBatchCharge", target, [&] { force(target)->setBatchCharge(batch, charge); });
}

int OpenMM_NNPForce_getBatchCharge(const OpenMM_NNPForce* target, int batch) {
    if (target == nullptr) return fail("OpenMM_NNPForce_getBatchCharge: NULL argument"), 0;
    return force(target)->getBatchCharge(batch);
}

int OpenMM_NNPForce_getEnsembleMember(const OpenMM_NNPForce* target) {
    if (target == nullptr) return fail("OpenMM_NNPForce_getEnsembleMember: NULL argument"), -2;
    return force(target)->getEnsembleMember();
}

OpenMM_NNP_Status OpenMM_NNPForce_setUsesPeriodicBoundaryConditions(OpenMM_NNPForce* target, OpenMM_Boolean periodic) {
    return guarded("OpenMM_NNPForce_setUsesPeriodicBoundaryConditions", target,
                   [&] { force(target)->setUsesPeriodicBoundaryConditions(periodic == OpenMM_True); });
}

OpenMM_Boolean OpenMM_NNPForce_usesPeriodicBoundaryConditions(const OpenMM_NNPForce* target) {
    return target != nullptr && force(target)->usesPeriodicBoundaryConditions() ? OpenMM_True : OpenMM_False;
}

OpenMM_NNP_Status OpenMM_NNPForce_getBatchEnergies(const OpenMM_NNPForce* target, OpenMM_Context* context,
                                                   double* energies, int capacity, int* count) {
    if (context == nullptr || count == nullptr || (energies == nullptr && capacity > 0))
        return fail("OpenMM_NNPForce_getBatchEnergies: NULL argument");
    return guarded("OpenMM_NNPForce_getBatchEnergies", target, [&] {
        std::vector<double> e = force(target)->getBatchEnergies(*reinterpret_cast<OpenMM::Context*>(context));
        for (int i = 0; i < (int)e.size() && i < capacity; i++) energies[i] = e[i];
        *count = e.size();
    });
}

OpenMM_NNP_Status OpenMM_NNPForce_updateParametersInContext(OpenMM_NNPForce* target, OpenMM_Context* context) {
    if (context == nullptr) return fail("OpenMM_NNPForce_updateParametersInContext: NULL argument");
    return guarded("OpenMM_NNPForce_updateParametersInContext", target,
                   [&] { force(target)->updateParametersInContext(*reinterpret_cast<OpenMM::Context*>(context)); });
}

} // extern "C"

/* ------------------------------------------------------------------ integrators */

using NNPPlugin::NNPGraphIntegrator;
using NNPPlugin::NNPLangevinIntegrator;

static NNPGraphIntegrator* integ(OpenMM_NNPGraphIntegrator* i) { return reinterpret_cast<NNPGraphIntegrator*>(i); }
static const NNPGraphIntegrator* integ(const OpenMM_NNPGraphIntegrator* i) {
    return reinterpret_cast<const NNPGraphIntegrator*>(i);
}
static NNPLangevinIntegrator* langevin(const NNPGraphIntegrator* i) {
    const NNPLangevinIntegrator* l = dynamic_cast<const NNPLangevinIntegrator*>(i);
    if (l == nullptr) throw OpenMM::OpenMMException("not an NNPLangevinIntegrator");
    return const_cast<NNPLangevinIntegrator*>(l);
}

extern "C" {

OpenMM_NNPGraphIntegrator* OpenMM_NNPVerletIntegrator_create(double stepSize) {
    NNPGraphIntegrator* result = nullptr;
    guarded("OpenMM_NNPVerletIntegrator_create", "", [&] { result = new NNPPlugin::NNPVerletIntegrator(stepSize); });
    return reinterpret_cast<OpenMM_NNPGraphIntegrator*>(result);
}

OpenMM_NNPGraphIntegrator* OpenMM_NNPLangevinIntegrator_create(double temperature, double friction, double stepSize) {
    NNPGraphIntegrator* result = nullptr;
    guarded("OpenMM_NNPLangevinIntegrator_create", "",
            [&] { result = new NNPLangevinIntegrator(temperature, friction, stepSize); });
    return reinterpret_cast<OpenMM_NNPGraphIntegrator*>(result);
}

void OpenMM_NNPGraphIntegrator_destroy(OpenMM_NNPGraphIntegrator* target) { delete integ(target); }

OpenMM_Integrator* OpenMM_NNPGraphIntegrator_asIntegrator(OpenMM_NNPGraphIntegrator* target) {
    return reinterpret_cast<OpenMM_Integrator*>(static_cast<OpenMM::Integrator*>(integ(target)));
}

OpenMM_NNPGraphIntegrator* OpenMM_NNPGraphIntegrator_cast(OpenMM_Integrator* integrator) {
    NNPGraphIntegrator* result = dynamic_cast<NNPGraphIntegrator*>(reinterpret_cast<OpenMM::Integrator*>(integrator));
    if (result == nullptr) fail("OpenMM_NNPGraphIntegrator_cast: not an NNP integrator");
    return reinterpret_cast<OpenMM_NNPGraphIntegrator*>(result);
}

OpenMM_NNP_Status OpenMM_NNPGraphIntegrator_step(OpenMM_NNPGraphIntegrator* target, int steps) {
    return guarded("OpenMM_NNPGraphIntegrator_step", target, [&] { integ(target)->step(steps); });
}

OpenMM_NNP_Status OpenMM_NNPGraphIntegrator_setStepsPerGraph(OpenMM_NNPGraphIntegrator* target, int steps) {
    return guarded("OpenMM_NNPGraphIntegrator_setStepsPerGraph", target, [&] { integ(target)->setStepsPerGraph(steps); });
}

int OpenMM_NNPGraphIntegrator_getStepsPerGraph(const OpenMM_NNPGraphIntegrator* target) {
    int result = -1;
    guarded("OpenMM_NNPGraphIntegrator_getStepsPerGraph", target, [&] { result = integ(target)->getStepsPerGraph(); });
    return result;
}

OpenMM_NNP_Status OpenMM_NNPGraphIntegrator_setUseGraphs(OpenMM_NNPGraphIntegrator* target, OpenMM_Boolean use) {
    return guarded("OpenMM_NNPGraphIntegrator_setUseGraphs", target, [&] { integ(target)->setUseGraphs(use != OpenMM_False); });
}

OpenMM_Boolean OpenMM_NNPGraphIntegrator_isReplayingGraphs(const OpenMM_NNPGraphIntegrator* target) {
    bool result = false;
    guarded("OpenMM_NNPGraphIntegrator_isReplayingGraphs", target, [&] { result = integ(target)->isReplayingGraphs(); });
    return result ? OpenMM_True : OpenMM_False;
}

int OpenMM_NNPGraphIntegrator_getNumGraphRecordings(const OpenMM_NNPGraphIntegrator* target) {
    int result = -1;
    guarded("OpenMM_NNPGraphIntegrator_getNumGraphRecordings", target,
            [&] { result = integ(target)->getNumGraphRecordings(); });
    return result;
}

const char* OpenMM_NNPGraphIntegrator_getFallbackReason(const OpenMM_NNPGraphIntegrator* target) {
    static thread_local std::string reason;
    reason.clear();
    guarded("OpenMM_NNPGraphIntegrator_getFallbackReason", target, [&] { reason = integ(target)->getFallbackReason(); });
    return reason.c_str();
}

OpenMM_NNP_Status OpenMM_NNPLangevinIntegrator_setTemperature(OpenMM_NNPGraphIntegrator* target, double temperature) {
    return guarded("OpenMM_NNPLangevinIntegrator_setTemperature", target,
                   [&] { langevin(integ(target))->setTemperature(temperature); });
}

OpenMM_NNP_Status OpenMM_NNPLangevinIntegrator_setFriction(OpenMM_NNPGraphIntegrator* target, double friction) {
    return guarded("OpenMM_NNPLangevinIntegrator_setFriction", target, [&] { langevin(integ(target))->setFriction(friction); });
}

OpenMM_NNP_Status OpenMM_NNPLangevinIntegrator_setRandomNumberSeed(OpenMM_NNPGraphIntegrator* target, int seed) {
    return guarded("OpenMM_NNPLangevinIntegrator_setRandomNumberSeed", target,
                   [&] { langevin(integ(target))->setRandomNumberSeed(seed); });
}

OpenMM_NNP_Status OpenMM_NNPLangevinIntegrator_getParameters(const OpenMM_NNPGraphIntegrator* target, double* temperature,
                                                            double* friction, int* seed) {
    return guarded("OpenMM_NNPLangevinIntegrator_getParameters", target, [&] {
        NNPLangevinIntegrator* l = langevin(integ(target));
        if (temperature) *temperature = l->getTemperature();
        if (friction) *friction = l->getFriction();
        if (seed) *seed = l->getRandomNumberSeed();
    });
}

} // extern "C"
