/* The C API of the plugin, from C11, with OpenMM's own C API objects. */
#include "NNPCWrapper.h"
#include "nnp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s (%s)\n", __FILE__, __LINE__, #cond,     \
                    OpenMM_NNP_getLastError());                                              \
            failures++;                                                                      \
        }                                                                                    \
    } while (0)

int main(void) {
    char model[4096];
    const char* root = getenv("NNP_SHARED_DIR");
    snprintf(model, sizeof model, "%s/models/ani-model-zoo/ani-1x_8x.info", root && root[0] ? root : NNP_SHARED_DIR_DEFAULT);
    OpenMM_Platform_loadPluginsFromDirectory(OPENMM_PLUGIN_DIR);

    /* Bad input: clear messages, no crash. */
    CHECK(OpenMM_NNPForce_create("/nonexistent.nnpm") == NULL);
    CHECK(strstr(OpenMM_NNP_getLastError(), "cannot open model file") != NULL);
    CHECK(OpenMM_NNPForce_create(NULL) == NULL);
    CHECK(OpenMM_NNPForce_addAtom(NULL, 0, 6, 0) == -1);
    CHECK(OpenMM_NNPForce_create("ani9z") == NULL);
    CHECK(strstr(OpenMM_NNP_getLastError(), "model 'ani9z' not found") != NULL);
    /* A model by name (the build tree's or the installed models). */
    OpenMM_NNPForce* named = OpenMM_NNPForce_create("ani1x");
    CHECK(named != NULL);
    if (named) OpenMM_NNPForce_destroy(named);

    /* Methane in batch 0 and the same methane shifted, in batch 2 (batch 1 empty). */
    OpenMM_System* system = OpenMM_System_create();
    OpenMM_NNPForce* force = OpenMM_NNPForce_create(model);
    CHECK(force != NULL);
    CHECK(OpenMM_NNPForce_addAtom(force, 0, 16, 0) == -1);
    CHECK(strstr(OpenMM_NNP_getLastError(), "element S") != NULL);
    CHECK(OpenMM_NNPForce_addAtom(force, 0, 6, -1) == -1);
    CHECK(strstr(OpenMM_NNP_getLastError(), "batch index -1") != NULL);
    CHECK(OpenMM_NNPForce_setEnsembleMember(force, 0) == OpenMM_NNP_Ok);
    CHECK(OpenMM_NNPForce_setEnsembleMember(force, 99) == OpenMM_NNP_Error);
    /* ANI takes neutral batches only; a zero charge is accepted */
    CHECK(OpenMM_NNPForce_setBatchCharge(force, 0, 1) == OpenMM_NNP_Error);
    CHECK(strstr(OpenMM_NNP_getLastError(), "neutral molecules only") != NULL);
    CHECK(OpenMM_NNPForce_setBatchCharge(force, 0, 0) == OpenMM_NNP_Ok);
    CHECK(OpenMM_NNPForce_getBatchCharge(force, 0) == 0);
    CHECK(OpenMM_NNPForce_setBatchCharge(NULL, 0, 0) == OpenMM_NNP_Error);
    const double xyz[5][3] = {{0, 0, 0}, {0, 1, 1}, {1, 0, 1}, {1, 1, 0}, {0.5, 0.5, 0.5}};
    const int z[5] = {1, 1, 1, 1, 6};
    OpenMM_Vec3Array* positions = OpenMM_Vec3Array_create(0);
    for (int copy = 0; copy < 2; copy++)
        for (int i = 0; i < 5; i++) {
            int p = OpenMM_System_addParticle(system, 1.0);
            CHECK(OpenMM_NNPForce_addAtom(force, p, z[i], 2 * copy) == p);
            OpenMM_Vec3 v = {0.1 * xyz[i][0] + copy, 0.1 * xyz[i][1], 0.1 * xyz[i][2]};
            OpenMM_Vec3Array_append(positions, v);
        }
    CHECK(OpenMM_NNPForce_getNumAtoms(force) == 10);
    CHECK(OpenMM_NNPForce_getNumBatches(force) == 3);
    int particle, atomicNumber, batch;
    CHECK(OpenMM_NNPForce_getAtomParameters(force, 9, &particle, &atomicNumber, &batch) == OpenMM_NNP_Ok);
    CHECK(particle == 9 && atomicNumber == 6 && batch == 2);
    CHECK(OpenMM_NNPForce_getAtomParameters(force, 10, &particle, &atomicNumber, &batch) == OpenMM_NNP_Error);
    OpenMM_System_addForce(system, OpenMM_NNPForce_asForce(force));

    OpenMM_Integrator* integrator = (OpenMM_Integrator*)OpenMM_VerletIntegrator_create(0.001);
    OpenMM_Platform* platform = OpenMM_Platform_getPlatformByName("Reference");
    OpenMM_Context* context = OpenMM_Context_create_2(system, integrator, platform);
    OpenMM_Context_setPositions(context, positions);
    OpenMM_State* state = OpenMM_Context_getState(context, OpenMM_State_Energy, 0);
    double energy = OpenMM_State_getPotentialEnergy(state);
    OpenMM_State_destroy(state);
    const double methane = -40.277153758433975 * NNP_HARTREE_TO_KJMOL;
    printf("two methanes: %.6f kJ/mol (expected %.6f)\n", energy, 2 * methane);
    CHECK(fabs(energy - 2 * methane) < 1e-6);

    double batches[4] = {0, 0, 0, 0};
    int count = 0;
    CHECK(OpenMM_NNPForce_getBatchEnergies(force, context, batches, 4, &count) == OpenMM_NNP_Ok);
    CHECK(count == 3);
    CHECK(fabs(batches[0] - methane) < 1e-6 && batches[1] == 0.0 && fabs(batches[2] - methane) < 1e-6);

    /* Merge both into batch 0: they are 1 nm apart, beyond the cutoff, so the sum is unchanged. */
    for (int i = 5; i < 10; i++) CHECK(OpenMM_NNPForce_setAtomParameters(force, i, i, z[i - 5], 0) == OpenMM_NNP_Ok);
    CHECK(OpenMM_NNPForce_updateParametersInContext(force, context) == OpenMM_NNP_Ok);
    CHECK(OpenMM_NNPForce_getBatchEnergies(force, context, batches, 4, &count) == OpenMM_NNP_Ok);
    CHECK(count == 1 && fabs(batches[0] - 2 * methane) < 1e-6);

    /* NaN coordinates: an error status and message, not a crash. */
    OpenMM_Vec3 bad = {NAN, 0, 0};
    OpenMM_Vec3Array_set(positions, 3, bad);
    OpenMM_Context_setPositions(context, positions);
    CHECK(OpenMM_NNPForce_getBatchEnergies(force, context, batches, 4, &count) == OpenMM_NNP_Error);
    CHECK(strstr(OpenMM_NNP_getLastError(), "not finite") != NULL);
    printf("NaN coordinates: %s\n", OpenMM_NNP_getLastError());

    /* XML round trip through OpenMM's C API; the force comes back as an NNPForce. */
    char* xml = OpenMM_XmlSerializer_serializeSystem(system);
    OpenMM_System* copy = OpenMM_XmlSerializer_deserializeSystem(xml);
    OpenMM_NNPForce* restored = OpenMM_NNPForce_cast(OpenMM_System_getForce(copy, 0));
    CHECK(restored != NULL && OpenMM_NNPForce_getNumAtoms(restored) == 10 && OpenMM_NNPForce_getEnsembleMember(restored) == 0);
    free(xml);

    OpenMM_Context_destroy(context);
    OpenMM_Integrator_destroy(integrator);

    /* The integrators: bad input, then NNPVerletIntegrator against OpenMM's VerletIntegrator and a
       Langevin run with its settings, on the Reference platform, and an XML round trip. */
    CHECK(OpenMM_NNPLangevinIntegrator_create(-5, 1, 0.001) == NULL);
    CHECK(strstr(OpenMM_NNP_getLastError(), "temperature must be finite and >= 0") != NULL);
    OpenMM_Vec3 good = {0.1, 0, 0};
    OpenMM_Vec3Array_set(positions, 3, good);
    OpenMM_Vec3Array* moved[2];
    for (int which = 0; which < 2; which++) {
        OpenMM_NNPGraphIntegrator* nnp = which == 0 ? OpenMM_NNPVerletIntegrator_create(0.0005) : NULL;
        OpenMM_Integrator* plain = which == 1 ? (OpenMM_Integrator*)OpenMM_VerletIntegrator_create(0.0005) : NULL;
        OpenMM_Context* c = OpenMM_Context_create_2(system, nnp ? OpenMM_NNPGraphIntegrator_asIntegrator(nnp) : plain, platform);
        OpenMM_Context_setPositions(c, positions);
        if (nnp) {
            CHECK(OpenMM_NNPGraphIntegrator_setStepsPerGraph(nnp, 0) == OpenMM_NNP_Error);
            CHECK(strstr(OpenMM_NNP_getLastError(), "at least 1") != NULL);
            CHECK(OpenMM_NNPGraphIntegrator_step(nnp, -1) == OpenMM_NNP_Error);
            CHECK(OpenMM_NNPGraphIntegrator_step(nnp, 7) == OpenMM_NNP_Ok);
            CHECK(OpenMM_NNPGraphIntegrator_isReplayingGraphs(nnp) == OpenMM_False); /* Reference: eager */
            CHECK(strcmp(OpenMM_NNPGraphIntegrator_getFallbackReason(nnp), "") == 0);
            CHECK(OpenMM_NNPLangevinIntegrator_setTemperature(nnp, 300) == OpenMM_NNP_Error);
        } else {
            OpenMM_Integrator_step(plain, 7);
        }
        OpenMM_State* s = OpenMM_Context_getState(c, OpenMM_State_Positions, 0);
        moved[which] = OpenMM_Vec3Array_create(0);
        for (int i = 0; i < 10; i++) OpenMM_Vec3Array_append(moved[which], *OpenMM_Vec3Array_get(OpenMM_State_getPositions(s), i));
        OpenMM_State_destroy(s);
        OpenMM_Context_destroy(c);
        if (nnp) OpenMM_NNPGraphIntegrator_destroy(nnp);
        if (plain) OpenMM_Integrator_destroy(plain);
    }
    double worst = 0;
    for (int i = 0; i < 10; i++) {
        const OpenMM_Vec3* a = OpenMM_Vec3Array_get(moved[0], i);
        const OpenMM_Vec3* b = OpenMM_Vec3Array_get(moved[1], i);
        worst = fmax(worst, fmax(fabs(a->x - b->x), fmax(fabs(a->y - b->y), fabs(a->z - b->z))));
    }
    printf("NNPVerletIntegrator vs VerletIntegrator, 7 steps: largest position difference %g nm\n", worst);
    CHECK(worst == 0.0);
    OpenMM_Vec3Array_destroy(moved[0]);
    OpenMM_Vec3Array_destroy(moved[1]);

    OpenMM_NNPGraphIntegrator* langevin = OpenMM_NNPLangevinIntegrator_create(300, 2, 0.0005);
    CHECK(OpenMM_NNPLangevinIntegrator_setTemperature(langevin, 250) == OpenMM_NNP_Ok);
    CHECK(OpenMM_NNPLangevinIntegrator_setFriction(langevin, 4) == OpenMM_NNP_Ok);
    CHECK(OpenMM_NNPLangevinIntegrator_setRandomNumberSeed(langevin, 42) == OpenMM_NNP_Ok);
    CHECK(OpenMM_NNPGraphIntegrator_setStepsPerGraph(langevin, 8) == OpenMM_NNP_Ok);
    char* ixml = OpenMM_XmlSerializer_serializeIntegrator(OpenMM_NNPGraphIntegrator_asIntegrator(langevin));
    OpenMM_Integrator* icopy = OpenMM_XmlSerializer_deserializeIntegrator(ixml);
    OpenMM_NNPGraphIntegrator* lcopy = OpenMM_NNPGraphIntegrator_cast(icopy);
    double temperature = 0, friction = 0;
    int seed = 0;
    CHECK(lcopy != NULL && OpenMM_NNPLangevinIntegrator_getParameters(lcopy, &temperature, &friction, &seed) == OpenMM_NNP_Ok);
    CHECK(temperature == 250 && friction == 4 && seed == 42 && OpenMM_NNPGraphIntegrator_getStepsPerGraph(lcopy) == 8);
    printf("NNPLangevinIntegrator through XML: %g K, %g /ps, seed %d\n", temperature, friction, seed);
    OpenMM_Context* lc = OpenMM_Context_create_2(system, OpenMM_NNPGraphIntegrator_asIntegrator(lcopy), platform);
    OpenMM_Context_setPositions(lc, positions);
    CHECK(OpenMM_NNPGraphIntegrator_step(lcopy, 5) == OpenMM_NNP_Ok);
    OpenMM_State* ls = OpenMM_Context_getState(lc, OpenMM_State_Energy, 0);
    printf("after 5 Langevin steps: time %g ps, kinetic energy %g kJ/mol\n", OpenMM_State_getTime(ls), OpenMM_State_getKineticEnergy(ls));
    CHECK(fabs(OpenMM_State_getTime(ls) - 0.0025) < 1e-15 && OpenMM_State_getKineticEnergy(ls) > 0);
    OpenMM_State_destroy(ls);
    OpenMM_Context_destroy(lc);
    OpenMM_Integrator_destroy(icopy);
    OpenMM_NNPGraphIntegrator_destroy(langevin);
    free(ixml);
    OpenMM_Integrator* verlet = (OpenMM_Integrator*)OpenMM_VerletIntegrator_create(0.001);
    CHECK(OpenMM_NNPGraphIntegrator_cast(verlet) == NULL);
    OpenMM_Integrator_destroy(verlet);
    OpenMM_System_destroy(system);
    OpenMM_System_destroy(copy);
    OpenMM_Vec3Array_destroy(positions);
    if (failures) {
        fprintf(stderr, "TestNNPCWrapper: %d check(s) failed\n", failures);
        return 1;
    }
    printf("TestNNPCWrapper: all checks passed\n");
    return 0;
}
