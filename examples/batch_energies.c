/*
 * Example: per-molecule energies of several drug-like molecules in one batched evaluation.
 *
 *   batch_energies MODEL XYZ [XYZ ...]
 *
 * MODEL is an ANI model: a name (ani1x, ani1ccx, ani2x; see nnp_model_find) or a path to a
 * NeuroChem .info of the ANI model zoo or an .nnpm file. Every XYZ file
 * becomes one batch. Prints each molecule's energy and the largest force on its atoms.
 */
#define _POSIX_C_SOURCE 200809L
#include "nnp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int fail(const char* what) {
    fprintf(stderr, "batch_energies: %s: %s\n", what, nnp_last_error());
    return 1;
}

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: batch_energies MODEL XYZ [XYZ ...]\n");
        return 2;
    }
    nnp_model* model;
    if (nnp_model_load(argv[1], &model) != NNP_OK) return fail(argv[1]);
    int n_mol = argc - 2;
    int32_t total = 0, *z = NULL, *batch = NULL;
    double* pos = NULL;
    for (int k = 0; k < n_mol; k++) {
        int32_t n, *mz;
        double* mpos;
        if (nnp_xyz_read(argv[k + 2], &n, &mz, &mpos, NULL, NULL) != NNP_OK) return fail(argv[k + 2]);
        z = realloc(z, sizeof *z * (size_t)(total + n));
        batch = realloc(batch, sizeof *batch * (size_t)(total + n));
        pos = realloc(pos, sizeof *pos * 3 * (size_t)(total + n));
        if (!z || !batch || !pos) return fprintf(stderr, "out of memory\n"), 1;
        memcpy(z + total, mz, sizeof *z * (size_t)n);
        memcpy(pos + 3 * total, mpos, sizeof *pos * 3 * (size_t)n);
        for (int32_t i = 0; i < n; i++) batch[total + i] = k;
        total += n;
        nnp_free(mz);
        nnp_free(mpos);
    }
    nnp_plan* plan;
    if (nnp_plan_create(model, &plan) != NNP_OK) return fail("plan");
    if (nnp_plan_set_atoms(plan, total, z, batch) != NNP_OK) return fail("atoms");
    double energy, *batch_e = malloc(sizeof(double) * (size_t)n_mol);
    double* forces = malloc(sizeof(double) * 3 * (size_t)total);
    printf("libnnp %s, model %s (%d members, ensemble mean), %d molecules, %d atoms\n", nnp_version(),
           nnp_model_name(model), nnp_model_num_members(model), n_mol, total);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (nnp_evaluate_cpu(plan, pos, NULL, &energy, batch_e, forces) != NNP_OK) return fail("evaluate");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%-40s %6s %22s %16s\n", "molecule", "atoms", "energy (Hartree)", "max |F| (Ha/Å)");
    int32_t first = 0;
    for (int k = 0; k < n_mol; k++) {
        double fmax = 0;
        int32_t n = 0;
        for (int32_t i = first; i < total && batch[i] == k; i++, n++)
            for (int c = 0; c < 3; c++) fmax = fmax > fabs(forces[3 * i + c]) ? fmax : fabs(forces[3 * i + c]);
        const char* name = strrchr(argv[k + 2], '/');
        printf("%-40s %6d %22.10f %16.6f\n", name ? name + 1 : argv[k + 2], n, batch_e[k], fmax);
        first += n;
    }
    printf("total energy %.10f Ha (%.4f kJ/mol); CPU evaluation with forces took %.3f s\n", energy,
           energy * NNP_HARTREE_TO_KJMOL, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    free(batch_e), free(forces), free(z), free(batch), free(pos);
    nnp_plan_free(plan);
    nnp_model_free(model);
    return 0;
}
