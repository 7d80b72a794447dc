/*
 * C API of the NNP plugin, in the style of OpenMM's C wrapper (OpenMMCWrapper.h) and usable with
 * its objects (OpenMM_System, OpenMM_Context, ...). No C++ exception crosses into C: functions
 * return NULL, -1 or OpenMM_NNP_Error on failure, and OpenMM_NNP_getLastError() gives the message
 * (per thread).
 */
#ifndef OPENMM_NNP_CWRAPPER_H_
#define OPENMM_NNP_CWRAPPER_H_

#include "OpenMMCWrapper.h"
#include "internal/windowsExportNNP.h"

#if defined(__cplusplus)
extern "C" {
#endif

typedef struct OpenMM_NNPForce_struct OpenMM_NNPForce;

typedef struct OpenMM_NNPGraphIntegrator_struct OpenMM_NNPGraphIntegrator;

typedef enum { OpenMM_NNP_Ok = 0, OpenMM_NNP_Error = 1 } OpenMM_NNP_Status;

/** Message of the last failed call on this thread ("" if none). */
extern OPENMM_EXPORT_NNP const char* OpenMM_NNP_getLastError(void);

/** Creates a force from a model name ("ani2x", "ani1x", "ani1ccx": see NNPForce::findModel) or a
 *  model file (.info or .nnpm); NULL on failure (the message says where a name was looked for). */
extern OPENMM_EXPORT_NNP OpenMM_NNPForce* OpenMM_NNPForce_create(const char* modelPath);
/** Destroys a force that was not added to a System (a System owns and destroys its forces). */
extern OPENMM_EXPORT_NNP void OpenMM_NNPForce_destroy(OpenMM_NNPForce* target);
/** The force as an OpenMM_Force, e.g. for OpenMM_System_addForce(). */
extern OPENMM_EXPORT_NNP OpenMM_Force* OpenMM_NNPForce_asForce(OpenMM_NNPForce* target);
/** An OpenMM_Force as an NNPForce (e.g. from a deserialized System), or NULL if it is not one. */
extern OPENMM_EXPORT_NNP OpenMM_NNPForce* OpenMM_NNPForce_cast(OpenMM_Force* force);

/** Adds an atom (particle index, atomic number, batch ≥ 0); returns its index, or -1 on failure. */
extern OPENMM_EXPORT_NNP int OpenMM_NNPForce_addAtom(OpenMM_NNPForce* target, int particle, int atomicNumber, int batch);
extern OPENMM_EXPORT_NNP int OpenMM_NNPForce_getNumAtoms(const OpenMM_NNPForce* target);
extern OPENMM_EXPORT_NNP OpenMM_NNP_Status OpenMM_NNPForce_getAtomParameters(const OpenMM_NNPForce* target, int index,
                                                                            int* particle, int* atomicNumber, int* batch);
extern OPENMM_EXPORT_NNP OpenMM_NNP_Status OpenMM_NNPForce_setAtomParameters(OpenMM_NNPForce* target, int index,
                                                                            int particle, int atomicNumber, int batch);
/** Number of batches (largest batch index + 1), or -1 on failure. */
extern OPENMM_EXPORT_NNP int OpenMM_NNPForce_getNumBatches(const OpenMM_NNPForce* target);
/** -1 for the ensemble mean, else 0 .. members-1. */
extern OPENMM_EXPORT_NNP OpenMM_NNP_Status OpenMM_NNPForce_setEnsembleMember(OpenMM_NNPForce* target, int member);
extern OPENMM_EXPORT_NNP int OpenMM_NNPForce_getEnsembleMember(const OpenMM_NNPForce* target);
/* Total charge of a batch (default 0; ANI models refuse a non-zero one). */
extern OPENMM_EXPORT_NNP OpenMM_NNP_Status OpenMM_NNPForce_setBatchCharge(OpenMM_NNPForce* target, int batch, int charge);
extern OPENMM_EXPORT_NNP int OpenMM_NNPForce_getBatchCharge(const OpenMM_NNPForce* target, int batch);
extern OPENMM_EXPORT_NNP OpenMM_NNP_Status OpenMM_NNPForce_setUsesPeriodicBoundaryConditions(OpenMM_NNPForce* target,
                                                                                            OpenMM_Boolean periodic);
extern OPENMM_EXPORT_NNP OpenMM_Boolean OpenMM_NNPForce_usesPeriodicBoundaryConditions(const OpenMM_NNPForce* target);
/**
 * Energies of every batch at the Context's positions, in kJ/mol. Writes min(count, capacity) values
 * and sets *count to the number of batches.
 */
extern OPENMM_EXPORT_NNP OpenMM_NNP_Status OpenMM_NNPForce_getBatchEnergies(const OpenMM_NNPForce* target,
                                                                           OpenMM_Context* context, double* energies,
                                                                           int capacity, int* count);
extern OPENMM_EXPORT_NNP OpenMM_NNP_Status OpenMM_NNPForce_updateParametersInContext(OpenMM_NNPForce* target,
                                                                                    OpenMM_Context* context);

/*
 * NNPVerletIntegrator and NNPLangevinIntegrator (whole steps replayed from CUDA graphs on the CUDA
 * platform; see NNPIntegrators.h). Both are OpenMM_NNPGraphIntegrator handles; pass
 * OpenMM_NNPGraphIntegrator_asIntegrator(handle) to OpenMM_Context_create() and destroy the handle
 * after the Context. Units: ps, K, 1/ps.
 */
/** A Verlet integrator (NULL on failure). */
extern OPENMM_EXPORT_NNP OpenMM_NNPGraphIntegrator* OpenMM_NNPVerletIntegrator_create(double stepSize);
/** A Langevin (LFMiddle) integrator (NULL on failure, e.g. a negative temperature). */
extern OPENMM_EXPORT_NNP OpenMM_NNPGraphIntegrator* OpenMM_NNPLangevinIntegrator_create(double temperature, double friction,
                                                                                       double stepSize);
extern OPENMM_EXPORT_NNP void OpenMM_NNPGraphIntegrator_destroy(OpenMM_NNPGraphIntegrator* target);
/** The integrator as an OpenMM_Integrator, e.g. for OpenMM_Context_create(). */
extern OPENMM_EXPORT_NNP OpenMM_Integrator* OpenMM_NNPGraphIntegrator_asIntegrator(OpenMM_NNPGraphIntegrator* target);
/** An OpenMM_Integrator as an NNP integrator (e.g. from XML), or NULL if it is not one. */
extern OPENMM_EXPORT_NNP OpenMM_NNPGraphIntegrator* OpenMM_NNPGraphIntegrator_cast(OpenMM_Integrator* integrator);
/** Advances the bound Context by `steps` steps. */
extern OPENMM_EXPORT_NNP OpenMM_NNP_Status OpenMM_NNPGraphIntegrator_step(OpenMM_NNPGraphIntegrator* target, int steps);
extern OPENMM_EXPORT_NNP OpenMM_NNP_Status OpenMM_NNPGraphIntegrator_setStepsPerGraph(OpenMM_NNPGraphIntegrator* target,
                                                                                     int steps);
extern OPENMM_EXPORT_NNP int OpenMM_NNPGraphIntegrator_getStepsPerGraph(const OpenMM_NNPGraphIntegrator* target);
extern OPENMM_EXPORT_NNP OpenMM_NNP_Status OpenMM_NNPGraphIntegrator_setUseGraphs(OpenMM_NNPGraphIntegrator* target,
                                                                                  OpenMM_Boolean use);
extern OPENMM_EXPORT_NNP OpenMM_Boolean OpenMM_NNPGraphIntegrator_isReplayingGraphs(const OpenMM_NNPGraphIntegrator* target);
extern OPENMM_EXPORT_NNP int OpenMM_NNPGraphIntegrator_getNumGraphRecordings(const OpenMM_NNPGraphIntegrator* target);
/** Why steps run eagerly ("" if they do not); valid until the next call on this thread. */
extern OPENMM_EXPORT_NNP const char* OpenMM_NNPGraphIntegrator_getFallbackReason(const OpenMM_NNPGraphIntegrator* target);
/** Langevin only (an error for a Verlet integrator). */
extern OPENMM_EXPORT_NNP OpenMM_NNP_Status OpenMM_NNPLangevinIntegrator_setTemperature(OpenMM_NNPGraphIntegrator* target,
                                                                                      double temperature);
extern OPENMM_EXPORT_NNP OpenMM_NNP_Status OpenMM_NNPLangevinIntegrator_setFriction(OpenMM_NNPGraphIntegrator* target,
                                                                                   double friction);
extern OPENMM_EXPORT_NNP OpenMM_NNP_Status OpenMM_NNPLangevinIntegrator_setRandomNumberSeed(OpenMM_NNPGraphIntegrator* target,
                                                                                           int seed);
/** Temperature (K), friction (1/ps) and seed; OpenMM_NNP_Error for a Verlet integrator. */
extern OPENMM_EXPORT_NNP OpenMM_NNP_Status OpenMM_NNPLangevinIntegrator_getParameters(const OpenMM_NNPGraphIntegrator* target,
                                                                                     double* temperature, double* friction,
                                                                                     int* seed);

#if defined(__cplusplus)
}
#endif

#endif
