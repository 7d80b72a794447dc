/* Analytic forces against central finite differences of the energy. */
#include "test.h"

/* Compares forces with -(E(x+h) - E(x-h)) / 2h for every coordinate (or every `stride`-th).
   Returns the largest absolute error. */
static double check_fd(nnp_plan* plan, int32_t n, const int32_t* z, double* pos, const double* box,
                       int stride, double tol, const char* what) {
    double* f = malloc(sizeof(double) * 3 * (size_t)n);
    single_energy(plan, n, z, pos, box, f);
    const double h = 1e-4; /* Å; the truncation error is O(h²) ~ 1e-8 Hartree/Å here */
    double worst = 0, fmax = 0;
    for (int32_t i = 0; i < 3 * n; i += stride) {
        double x = pos[i], ep, em;
        pos[i] = x + h;
        CHECK_OK(nnp_evaluate_cpu(plan, pos, box, &ep, NULL, NULL));
        pos[i] = x - h;
        CHECK_OK(nnp_evaluate_cpu(plan, pos, box, &em, NULL, NULL));
        pos[i] = x;
        double fd = -(ep - em) / (2 * h);
        double err = fabs(fd - f[i]);
        if (err > worst) worst = err;
        if (fabs(f[i]) > fmax) fmax = fabs(f[i]);
        if (!(err <= tol))
            fprintf(stderr, "%s: coordinate %d: analytic %.10g, finite difference %.10g\n", what, i, f[i], fd);
        CHECK(err <= tol);
    }
    printf("%-40s %3d atoms: max |F| %.4f Ha/Å, max |F - FD| %.2e\n", what, n, fmax, worst);
    CHECK(fmax > 1e-3); /* the molecules are not at a minimum: forces must be non-trivial */
    free(f);
    return worst;
}

int main(void) {
    nnp_model* model = load_model_or_die("models/ani-model-zoo/ani-2x_8x.info");
    nnp_plan* plan;
    CHECK_OK(nnp_plan_create(model, &plan));
    const double tol = 2e-6; /* Ha/Å; forces here are 0.01–1 Ha/Å */

    /* Member 0, every coordinate of three drug-like molecules. */
    CHECK_OK(nnp_plan_set_member(plan, 0));
    const char* files[] = {"molecules/druglike/drugbank-0030.xyz", "molecules/druglike/drugbank-0001.xyz",
                           "molecules/druglike/drugbank-0147.xyz"};
    for (int k = 0; k < 3; k++) {
        molecule m = read_molecule_or_die(files[k]);
        char what[128];
        snprintf(what, sizeof what, "member 0, %s", strrchr(files[k], '/') + 1);
        check_fd(plan, m.n, m.z, m.pos, NULL, 1, tol, what);
        free_molecule(&m);
    }

    /* Ensemble mean, every 5th coordinate. */
    CHECK_OK(nnp_plan_set_member(plan, -1));
    molecule m = read_molecule_or_die("molecules/druglike/drugbank-0030.xyz");
    check_fd(plan, m.n, m.z, m.pos, NULL, 5, tol, "ensemble mean, drugbank-0030.xyz");

    /* Periodic: the molecule straddling a box face, every 3rd coordinate. Minimum image must give
       the same energy as the unwrapped molecule, and forces must match finite differences. */
    const double box[9] = {11.0, 0, 0, 0, 10.5, 0, 0, 0, 12.0};
    double* wrapped = malloc(sizeof(double) * 3 * (size_t)m.n);
    for (int32_t i = 0; i < 3 * m.n; i++) {
        double shift = i % 3 == 0 ? 1.0 : 0.0; /* x straddles the face at 0 */
        double x = m.pos[i] + shift;
        double len = box[4 * (i % 3)];
        wrapped[i] = x - len * floor(x / len);
    }
    double e_open = single_energy(plan, m.n, m.z, m.pos, NULL, NULL);
    double e_box = single_energy(plan, m.n, m.z, wrapped, box, NULL);
    printf("periodic: unwrapped %.12f, wrapped into box %.12f Ha\n", e_open, e_box);
    CHECK_CLOSE(e_box, e_open, 1e-9);
    check_fd(plan, m.n, m.z, wrapped, box, 3, tol, "ensemble mean, wrapped in a periodic box");
    /* A triclinic box in reduced form. */
    const double tri[9] = {11.0, 0, 0, 3.0, 10.5, 0, -2.0, 4.0, 12.0};
    CHECK_CLOSE(single_energy(plan, m.n, m.z, m.pos, tri, NULL), e_open, 1e-9);
    free(wrapped);
    free_molecule(&m);

    /* A dense periodic cell where atoms interact across faces (54 H atoms, 15.7 Å cube). */
    int32_t n;
    int32_t* z;
    double* pos;
    double cell[9];
    int has_box = 0;
    CHECK_OK(nnp_xyz_read(shared_path("molecules/misc/tight_cell.xyz"), &n, &z, &pos, cell, &has_box));
    CHECK(has_box);
    for (int32_t i = 0; i < 3 * n; i++) pos[i] += 0.08 * sin(1.7 * i); /* break the lattice symmetry */
    CHECK_OK(nnp_plan_set_member(plan, 0));
    double e_cell = single_energy(plan, n, z, pos, cell, NULL);
    double e_free = single_energy(plan, n, z, pos, NULL, NULL);
    printf("tight cell: periodic %.10f, isolated %.10f Ha\n", e_cell, e_free);
    CHECK(fabs(e_cell - e_free) > 1e-4); /* atoms really interact across the faces */
    check_fd(plan, n, z, pos, cell, 2, tol, "member 0, tight_cell.xyz (periodic)");
    nnp_free(z);
    nnp_free(pos);

    nnp_plan_free(plan);
    nnp_model_free(model);
    return test_finish("test_forces");
}
