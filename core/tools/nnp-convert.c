/*
 * nnp-convert: converts a model (NeuroChem .info of the ANI model zoo, or an .nnpm file) into the
 * project's single-file format, and checks the result by loading it back and comparing energies.
 *
 *   nnp-convert MODEL OUTPUT.nnpm     convert
 *   nnp-convert --info MODEL          print what a model holds
 * MODEL is a model name or a path; OUTPUT is always a path (a plain "ani1x" is ./ani1x), and an
 * existing OUTPUT must be a regular file: a link, FIFO, device or folder is not replaced.
 */
#define _POSIX_C_SOURCE 200809L /* lstat */
#include "nnp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int usage(void) {
    fprintf(stderr, "usage: nnp-convert MODEL OUTPUT.nnpm\n"
                    "       nnp-convert --info MODEL\n"
                    "MODEL is a NeuroChem <name>.info file (ANI model zoo) or an .nnpm file (any family).\n");
    return 2;
}

static void print_info(const nnp_model* model) {
    const int ani = nnp_model_family(model) == NNP_FAMILY_ANI;
    double energy_kjmol = 0, length_angstrom = 0;
    nnp_model_units(model, &energy_kjmol, &length_angstrom);
    printf("model      %s\n", nnp_model_name(model));
    printf("family     %s\n", nnp_model_family_name(model));
    printf("units      energy %.12g kJ/mol, length %.12g Å\n", energy_kjmol, length_angstrom);
    printf("members    %d\n", nnp_model_num_members(model));
    printf("cutoff     %g Å\n", nnp_model_cutoff(model));
    if (ani) printf("AEV length %d\n", nnp_model_aev_length(model));
    printf("elements  ");
    for (int32_t i = 0; i < nnp_model_num_elements(model); i++) {
        const int32_t z = nnp_model_element(model, i);
        double e = 0;
        if (ani && nnp_model_self_energy(model, z, &e) == NNP_OK) printf(" %s(%.6f Ha)", nnp_element_symbol(z), e);
        else printf(" %s", nnp_element_symbol(z));
    }
    printf("\n");
}

/* Energy of a small test system made of the model's elements (each twice), every member; out holds
   one value per member. */
static int energies(const nnp_model* model, double* out) {
    const int32_t n = nnp_model_num_elements(model), atoms = 2 * n;
    int32_t *z = malloc(sizeof(int32_t) * (size_t)atoms), *batch = malloc(sizeof(int32_t) * (size_t)atoms);
    double* pos = malloc(sizeof(double) * 3 * (size_t)atoms);
    nnp_plan* plan = NULL;
    int ok = z != NULL && batch != NULL && pos != NULL && nnp_plan_create(model, &plan) == NNP_OK;
    for (int32_t i = 0; ok && i < atoms; i++) {
        z[i] = nnp_model_element(model, i % n);
        batch[i] = 0;
        pos[3 * i] = 1.1 * i;
        pos[3 * i + 1] = 0.7 * (i % 3);
        pos[3 * i + 2] = 0.3 * (i % 2);
    }
    ok = ok && nnp_plan_set_atoms(plan, atoms, z, batch) == NNP_OK;
    for (int32_t m = 0; ok && m < nnp_model_num_members(model); m++)
        ok = nnp_plan_set_member(plan, m) == NNP_OK && nnp_evaluate_cpu(plan, pos, NULL, &out[m], NULL, NULL) == NNP_OK;
    nnp_plan_free(plan);
    free(z), free(batch), free(pos);
    return ok;
}

int main(int argc, char** argv) {
    if (argc == 3 && strcmp(argv[1], "--info") == 0) {
        nnp_model* model;
        if (nnp_model_load(argv[2], &model) != NNP_OK) {
            fprintf(stderr, "nnp-convert: %s\n", nnp_last_error());
            return 1;
        }
        print_info(model);
        nnp_model_free(model);
        return 0;
    }
    if (argc != 3 || argv[1][0] == '-') return usage();
    /* The output is a path, never a model name: the file written is the file verified. */
    char out[4200];
    if (snprintf(out, sizeof out, "%s%s", strchr(argv[2], '/') ? "" : "./", argv[2]) >= (int)sizeof out) {
        fprintf(stderr, "nnp-convert: output path too long\n");
        return 1;
    }
    struct stat st;
    if (lstat(out, &st) == 0 && !S_ISREG(st.st_mode)) {
        fprintf(stderr, "nnp-convert: %s exists and is not a regular file (%s): not replaced\n", out,
                S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISDIR(st.st_mode) ? "a folder"
                : S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                : "not a plain file");
        return 1;
    }
    nnp_model* model;
    if (nnp_model_load(argv[1], &model) != NNP_OK) {
        fprintf(stderr, "nnp-convert: %s\n", nnp_last_error());
        return 1;
    }
    if (nnp_model_save(model, out) != NNP_OK) {
        fprintf(stderr, "nnp-convert: %s\n", nnp_last_error());
        nnp_model_free(model);
        return 1;
    }
    nnp_model* back;
    if (nnp_model_load(out, &back) != NNP_OK) {
        fprintf(stderr, "nnp-convert: written file does not load: %s\n", nnp_last_error());
        nnp_model_free(model);
        return 1;
    }
    double e1[64], e2[64]; /* one per member: at most 64 (the format's limit) */
    int same = nnp_model_num_members(model) <= 64 && energies(model, e1) && energies(back, e2);
    for (int32_t m = 0; same && m < nnp_model_num_members(model); m++) same = e1[m] == e2[m];
    print_info(back);
    nnp_model_free(model);
    nnp_model_free(back);
    if (!same) {
        fprintf(stderr, "nnp-convert: energies of the written file differ from the source\n");
        return 1;
    }
    printf("wrote %s (verified: same energies for every member)\n", out);
    return 0;
}
