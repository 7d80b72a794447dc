/* Example (C): methane with ANI-1x through OpenMM's C API and the NNP plugin's C wrapper.
   methane [MODEL]   (a model name such as ani1x, the default, or a .info / .nnpm path) */
#include "NNPCWrapper.h"

#include <stdio.h>

int main(int argc, char** argv) {
    if (argc > 2) {
        fprintf(stderr, "usage: methane [MODEL]\n");
        return 2;
    }
    const char* model = argc == 2 ? argv[1] : "ani1x";
    OpenMM_Platform_loadPluginsFromDirectory(OpenMM_Platform_getDefaultPluginsDirectory());
    OpenMM_NNPForce* force = OpenMM_NNPForce_create(model);
    if (force == NULL) {
        fprintf(stderr, "error: %s\n", OpenMM_NNP_getLastError());
        return 1;
    }
    OpenMM_System* system = OpenMM_System_create();
    OpenMM_Vec3Array* positions = OpenMM_Vec3Array_create(0);
    const int z[5] = {1, 1, 1, 1, 6};
    const double xyz[5][3] = {{0, 0, 0}, {0, 1, 1}, {1, 0, 1}, {1, 1, 0}, {0.5, 0.5, 0.5}}; /* Å */
    for (int i = 0; i < 5; i++) {
        int particle = OpenMM_System_addParticle(system, z[i] == 1 ? 1.008 : 12.011);
        if (OpenMM_NNPForce_addAtom(force, particle, z[i], 0) < 0) {
            fprintf(stderr, "error: %s\n", OpenMM_NNP_getLastError());
            return 1;
        }
        OpenMM_Vec3 p = {0.1 * xyz[i][0], 0.1 * xyz[i][1], 0.1 * xyz[i][2]}; /* nm */
        OpenMM_Vec3Array_append(positions, p);
    }
    OpenMM_System_addForce(system, OpenMM_NNPForce_asForce(force)); /* the System owns the force now */
    OpenMM_VerletIntegrator* integrator = OpenMM_VerletIntegrator_create(0.0005);
    OpenMM_Context* context = OpenMM_Context_create_2(system, (OpenMM_Integrator*)integrator,
                                                      OpenMM_Platform_getPlatformByName("Reference"));
    OpenMM_Context_setPositions(context, positions);
    double energy;
    int count;
    if (OpenMM_NNPForce_getBatchEnergies(force, context, &energy, 1, &count) != OpenMM_NNP_Ok) {
        fprintf(stderr, "error: %s\n", OpenMM_NNP_getLastError());
        return 1;
    }
    printf("methane: %.6f kJ/mol (%d batch)\n", energy, count);
    OpenMM_Context_destroy(context);
    OpenMM_VerletIntegrator_destroy(integrator);
    OpenMM_System_destroy(system);
    OpenMM_Vec3Array_destroy(positions);
    return 0;
}
