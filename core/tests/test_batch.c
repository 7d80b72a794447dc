/* Batch independence: N molecules as N batches give exactly the N single-molecule results. */
#include "test.h"

#define NMOL 6

int main(void) {
    nnp_model* model = load_model_or_die("models/ani-model-zoo/ani-2x_8x.info");
    nnp_plan* plan;
    CHECK_OK(nnp_plan_create(model, &plan));
    CHECK_OK(nnp_plan_set_member(plan, 3));
    molecule mols[NMOL];
    double single_e[NMOL];
    double* single_f[NMOL];
    int32_t total = 0;
    for (int k = 0; k < NMOL; k++) {
        static const char* const files[NMOL] = {"0001", "0002", "0030", "0147", "0251", "0259"};
        char rel[64];
        snprintf(rel, sizeof rel, "molecules/druglike/drugbank-%s.xyz", files[k]);
        mols[k] = read_molecule_or_die(rel);
        single_f[k] = malloc(sizeof(double) * 3 * (size_t)mols[k].n);
        single_e[k] = single_energy(plan, mols[k].n, mols[k].z, mols[k].pos, NULL, single_f[k]);
        total += mols[k].n;
    }

    /* All molecules at the same place (they overlap in space), interleaved atom by atom so that
       neighbouring indices belong to different batches; batch k+k holds molecule k (odd batches
       are empty). */
    int32_t* z = malloc(sizeof(int32_t) * (size_t)total);
    int32_t* batch = malloc(sizeof(int32_t) * (size_t)total);
    int32_t* mol_of = malloc(sizeof(int32_t) * (size_t)total);
    int32_t* atom_of = malloc(sizeof(int32_t) * (size_t)total);
    double* pos = malloc(sizeof(double) * 3 * (size_t)total);
    double* f = malloc(sizeof(double) * 3 * (size_t)total);
    int32_t next[NMOL] = {0};
    for (int32_t i = 0; i < total;) {
        for (int k = 0; k < NMOL && i < total; k++) {
            if (next[k] == mols[k].n) continue;
            int32_t a = next[k]++;
            z[i] = mols[k].z[a];
            batch[i] = 2 * k;
            mol_of[i] = k;
            atom_of[i] = a;
            memcpy(&pos[3 * i], &mols[k].pos[3 * a], 3 * sizeof(double));
            i++;
        }
    }
    CHECK_OK(nnp_plan_set_atoms(plan, total, z, batch));
    CHECK(nnp_plan_num_batches(plan) == 2 * NMOL - 1);
    double be[2 * NMOL], e;
    CHECK_OK(nnp_evaluate_cpu(plan, pos, NULL, &e, be, f));
    double sum = 0;
    for (int k = 0; k < NMOL; k++) {
        printf("molecule %d (%3d atoms): alone %.12f, batched %.12f Ha\n", k, mols[k].n, single_e[k], be[2 * k]);
        CHECK(be[2 * k] == single_e[k]); /* exactly: same operations in the same order */
        if (2 * k + 1 < 2 * NMOL - 1) CHECK(be[2 * k + 1] == 0.0);
        sum += single_e[k];
    }
    CHECK_CLOSE(e, sum, 1e-9 * fabs(sum));
    int forces_equal = 1;
    for (int32_t i = 0; i < total; i++)
        for (int c = 0; c < 3; c++)
            forces_equal &= f[3 * i + c] == single_f[mol_of[i]][3 * atom_of[i] + c];
    CHECK(forces_equal);

    /* The thread count changes nothing. */
    double* f1 = malloc(sizeof(double) * 3 * (size_t)total);
    double e1, be1[2 * NMOL];
    for (int32_t threads = 1; threads <= 5; threads += 2) {
        CHECK_OK(nnp_plan_set_num_threads(plan, threads));
        CHECK_OK(nnp_evaluate_cpu(plan, pos, NULL, &e1, be1, f1));
        CHECK(e1 == e && memcmp(be1, be, sizeof(double) * (2 * NMOL - 1)) == 0 &&
              memcmp(f1, f, sizeof(double) * 3 * (size_t)total) == 0); /* 2·NMOL−1 batches */
    }
    CHECK_FAILS(nnp_plan_set_num_threads(plan, -1), NNP_ERR_INVALID_ARGUMENT, "thread count -1");
    CHECK_OK(nnp_plan_set_num_threads(plan, 0));
    free(f1);

    /* Move molecule 1 far away, then onto molecule 4: no other batch changes at all. */
    double be2[2 * NMOL];
    for (int pass = 0; pass < 2; pass++) {
        double shift[3] = {pass == 0 ? 1000.0 : 0.25, pass == 0 ? -500.0 : 0.1, 0.0};
        double* moved = malloc(sizeof(double) * 3 * (size_t)total);
        memcpy(moved, pos, sizeof(double) * 3 * (size_t)total);
        for (int32_t i = 0; i < total; i++)
            if (mol_of[i] == 1)
                for (int c = 0; c < 3; c++) moved[3 * i + c] += shift[c];
        CHECK_OK(nnp_evaluate_cpu(plan, moved, NULL, NULL, be2, NULL));
        for (int k = 0; k < NMOL; k++)
            if (k != 1) CHECK(be2[2 * k] == be[2 * k]);
        /* The moved molecule itself only changes by rounding (translation invariance). */
        CHECK_CLOSE(be2[2], be[2], 1e-9);
        free(moved);
    }

    /* Changing the atoms recomputes the cached batch count. */
    int32_t two[2] = {0, 5};
    int32_t hh[2] = {1, 1};
    CHECK_OK(nnp_plan_set_atoms(plan, 2, hh, two));
    CHECK(nnp_plan_num_batches(plan) == 6);
    CHECK_OK(nnp_plan_set_atoms(plan, 0, NULL, NULL));
    CHECK(nnp_plan_num_batches(plan) == 0);
    e = 1;
    CHECK_OK(nnp_evaluate_cpu(plan, NULL, NULL, &e, NULL, NULL));
    CHECK(e == 0.0);

    for (int k = 0; k < NMOL; k++) {
        free_molecule(&mols[k]);
        free(single_f[k]);
    }
    free(z), free(batch), free(mol_of), free(atom_of), free(pos), free(f);
    nnp_plan_free(plan);
    nnp_model_free(model);
    return test_finish("test_batch");
}
