/* Example (C): a TensorNet model on a charged molecule (methylammonium, +1) through OpenMM's C API and
   the NNP plugin's C wrapper: the energy with its charge and, for comparison, as if it were neutral.
   tensornet_ions_c MODEL   (a converted TensorNet model: .nnpm path or name) */
#include "NNPCWrapper.h"

#include <stdio.h>

static const int z[8] = {6, 7, 1, 1, 1, 1, 1, 1};
static const double xyz[8][3] = {{0, 0, 0},         {1.49, 0, 0},       {-0.37, 1.03, 0},  {-0.37, -0.51, 0.89},
                                 {-0.37, -0.51, -0.89}, {1.85, -0.95, 0}, {1.85, 0.47, 0.83}, {1.85, 0.47, -0.83}}; /* Å */

/* The energy of the molecule with the given total charge, in kJ/mol; returns 0 on success. */
static int energy_with_charge(const char* model, int charge, double* energy) {
    OpenMM_NNPForce* force = OpenMM_NNPForce_create(model);
    if (force == NULL) return 1;
    OpenMM_System* system = OpenMM_System_create();
    OpenMM_Vec3Array* positions = OpenMM_Vec3Array_create(0);
    int status = 0;
    for (int i = 0; i < 8 && status == 0; i++) {
        const int particle = OpenMM_System_addParticle(system, z[i] == 1 ? 1.008 : z[i] == 6 ? 12.011 : 14.007);
        if (OpenMM_NNPForce_addAtom(force, particle, z[i], 0) < 0) status = 1;
        const OpenMM_Vec3 p = {0.1 * xyz[i][0], 0.1 * xyz[i][1], 0.1 * xyz[i][2]}; /* nm */
        OpenMM_Vec3Array_append(positions, p);
    }
    if (status == 0 && OpenMM_NNPForce_setBatchCharge(force, 0, charge) != OpenMM_NNP_Ok) status = 1;
    OpenMM_System_addForce(system, OpenMM_NNPForce_asForce(force)); /* the System owns the force now */
    OpenMM_VerletIntegrator* integrator = OpenMM_VerletIntegrator_create(0.0005);
    OpenMM_Context* context = NULL;
    if (status == 0) {
        context = OpenMM_Context_create_2(system, (OpenMM_Integrator*)integrator, OpenMM_Platform_getPlatformByName("CPU"));
        OpenMM_Context_setPositions(context, positions);
        int count;
        if (OpenMM_NNPForce_getBatchEnergies(force, context, energy, 1, &count) != OpenMM_NNP_Ok) status = 1;
        OpenMM_Context_destroy(context);
    }
    OpenMM_VerletIntegrator_destroy(integrator);
    OpenMM_System_destroy(system);
    OpenMM_Vec3Array_destroy(positions);
    return status;
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: tensornet_ions_c MODEL\n");
        return 2;
    }
    OpenMM_Platform_loadPluginsFromDirectory(OpenMM_Platform_getDefaultPluginsDirectory());
    double charged, neutral;
    if (energy_with_charge(argv[1], +1, &charged) || energy_with_charge(argv[1], 0, &neutral)) {
        fprintf(stderr, "error: %s\n", OpenMM_NNP_getLastError());
        return 1;
    }
    printf("methylammonium: %.6f kJ/mol with charge +1, %.6f kJ/mol as if neutral\n", charged, neutral);
    return 0;
}
