#include "NNPCWrapper.h"
#include "NNPForce.h"
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
