/*
 * Test systems for TensorNet's evaluations (test_tensornet_cpu.c, test_tensornet_cuda.c): drug-like
 * molecules one batch each, with charges and rarer elements, and a dense grid of atoms; plans over
 * them and the comparisons both tests make. Include after test.h.
 */
#ifndef NNP_TENSORNET_SYSTEMS_H
#define NNP_TENSORNET_SYSTEMS_H

typedef struct system_t {
    const char* name;
    int32_t n, n_batches;
    int32_t *z, *batch, *charge;
    double* pos; /* Å */
    double box[9];
    int periodic;
    double single_forces; /* test_tensornet_cuda: its float32 forces tolerance where SINGLE_FORCES does not apply, or 0 */
} system_t;

static NNP_TEST_UNUSED void free_system(system_t* s) { free(s->z), free(s->batch), free(s->charge), free(s->pos); }

/* `count` drug-like molecules from number `first` on, one batch each, side by side 30 Å apart
   (batches never interact, so their placement only matters for the periodic case), charges
   cycling −1, 0, +1 when `charged`. With `exotic`, some atoms become B, Si, P, Br and I. */
static NNP_TEST_UNUSED system_t make_system(const char* name, int first, int count, int charged, int exotic) {
    system_t s = {name, 0, 0, NULL, NULL, NULL, NULL, {0}, 0, 0};
    for (int k = first; s.n_batches < count && k < first + 4000; k++)
        if (append_druglike(k, s.n_batches, 30.0 * s.n_batches, &s.n, &s.z, &s.batch, &s.pos) > 0) s.n_batches++;
    if (s.n_batches < count) {
        fprintf(stderr, "%s: found %d of %d drug-like molecules from number %d on under %s\n(set NNP_SHARED_DIR to the "
                "directory holding molecules/druglike)\n", name, s.n_batches, count, first, shared_path("molecules/druglike"));
        exit(1);
    }
    s.charge = calloc((size_t)s.n_batches + 1, sizeof(int32_t));
    for (int b = 0; charged && b < s.n_batches; b++) s.charge[b] = b % 3 - 1;
    if (exotic) {
        static const int32_t rare[] = {5, 14, 15, 35, 53};
        for (int32_t i = 0, k = 0; i < s.n; i += 3) s.z[i] = rare[k++ % 5];
    }
    return s;
}

/* One batch of side³ atoms (H, C, N, O in turn) on a cubic grid 1.25 Å apart, each moved up to
   0.2 Å (a fixed pseudo-random sequence): every atom has far more neighbours within the cutoff than
   the CUDA kernels take per chunk of edges (64), so the chunks' seams are crossed. Its float32
   forces are held to 2e-5: each sums 100-250 edges' float32 terms that largely cancel (measured
   on the H200: 1.3e-6 to 6.0e-6 on the test models), while float64 must still agree to 1e-10. */
static NNP_TEST_UNUSED system_t make_dense(const char* name, int side) {
    system_t s = {name, side * side * side, 1, NULL, NULL, NULL, NULL, {0}, 0, 2e-5};
    s.z = malloc(sizeof(int32_t) * s.n), s.batch = calloc((size_t)s.n, sizeof(int32_t));
    s.charge = calloc(1, sizeof(int32_t)), s.pos = malloc(sizeof(double) * 3 * s.n);
    static const int32_t elements[] = {1, 6, 7, 8};
    uint32_t r = 12345;
    for (int i = 0; i < s.n; i++) {
        const int g[3] = {i % side, i / side % side, i / (side * side)};
        s.z[i] = elements[i % 4];
        for (int c = 0; c < 3; c++) {
            r = r * 1664525u + 1013904223u;
            s.pos[3 * i + c] = 1.25 * g[c] + 0.4 * ((double)(r >> 8) / (double)(1u << 24) - 0.5);
        }
    }
    return s;
}

/* Gases of H, C, N, O (in turn) on jittered grids of points in triclinic cells (reduced form), 24-40
   neighbours per atom within 5 Å, for the CUDA neighbour search's cell grids. Periodic: 14 × 14 × 13
   points in a = (33, 0, 0), b = (8, 32, 0), c = (−6, 9, 31) Å (6 cells of 5 Å between faces on each
   axis), two interleaved batches, every third atom in batch 1 (849 atoms), the rest in batch 0
   (1,699), charges +1 and 0; each fourth atom moved by up to three cells' lattice vectors (wrapped by
   the minimum image), and with `far` one atom of batch 0 two million boxes away. Open: 18 × 18 × 15
   points in a = (41, 0, 0), b = (10, 40, 0), c = (−8, 11, 38), every tenth atom in batch 1 (486),
   the rest in batch 0 (4,374). */
static NNP_TEST_UNUSED system_t make_gas(const char* name, int periodic, int far) {
    const int na = periodic ? 14 : 18, nb = periodic ? 14 : 18, nc = periodic ? 13 : 15;
    system_t s = {name, na * nb * nc, 2, NULL, NULL, NULL, NULL, {33, 0, 0, 8, 32, 0, -6, 9, 31}, periodic, 0};
    if (!periodic) {
        const double open[9] = {41, 0, 0, 10, 40, 0, -8, 11, 38};
        memcpy(s.box, open, sizeof open);
    }
    s.z = malloc(sizeof(int32_t) * s.n), s.batch = malloc(sizeof(int32_t) * s.n);
    s.charge = calloc(2, sizeof(int32_t)), s.pos = malloc(sizeof(double) * 3 * s.n);
    s.charge[0] = 1;
    static const int32_t elements[] = {1, 6, 7, 8};
    uint32_t r = 2024;
    for (int i = 0; i < s.n; i++) {
        const double f[3] = {(i % na + 0.5) / na, (i / na % nb + 0.5) / nb, (i / (na * nb) + 0.5) / nc};
        s.z[i] = elements[i % 4];
        s.batch[i] = periodic ? i % 3 == 2 : i % 10 == 9;
        for (int c = 0; c < 3; c++) {
            r = r * 1664525u + 1013904223u;
            s.pos[3 * i + c] = f[0] * s.box[c] + f[1] * s.box[3 + c] + f[2] * s.box[6 + c] + 0.4 * ((double)(r >> 8) / (double)(1u << 24) - 0.5);
        }
        if (periodic && i % 4 == 0) {
            const int m[3] = {i % 7 - 3, i % 5 - 2, i % 3 - 1};
            for (int c = 0; c < 3; c++) s.pos[3 * i + c] += m[0] * s.box[c] + m[1] * s.box[3 + c] + m[2] * s.box[6 + c];
        }
    }
    if (periodic && far)
        for (int c = 0; c < 3; c++) s.pos[3 * 4 + c] += 2e6 * s.box[c]; /* atom 4: batch 0 */
    return s;
}

static NNP_TEST_UNUSED nnp_plan* make_plan(nnp_model* model, const system_t* s, int32_t member) {
    nnp_plan* p = NULL;
    CHECK_OK(nnp_plan_create(model, &p));
    CHECK_OK(nnp_plan_set_atoms(p, s->n, s->z, s->batch));
    CHECK_OK(nnp_plan_set_batch_charges(p, s->n_batches, s->charge));
    CHECK_OK(nnp_plan_set_member(p, member));
    return p;
}

static NNP_TEST_UNUSED double rms_relative(const double* ref, const double* x, int n) {
    double num = 0, den = 0;
    for (int k = 0; k < n; k++) num += (x[k] - ref[k]) * (x[k] - ref[k]), den += ref[k] * ref[k];
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Whether the model has every element of the system (the test models' embeddings differ). */
static NNP_TEST_UNUSED int has_elements(nnp_model* model, const system_t* s) {
    nnp_plan* p = NULL;
    CHECK_OK(nnp_plan_create(model, &p));
    const int ok = nnp_plan_set_atoms(p, s->n, s->z, s->batch) == NNP_OK;
    nnp_plan_free(p);
    return ok;
}

/* The systems both tests run: one molecule, 12 molecules with charges −1/0/+1, 4 molecules with
   B/Si/P/Br/I, one molecule in a periodic box, a dense batch. */
enum { N_SYSTEMS = 5 };
static NNP_TEST_UNUSED void make_systems(system_t s[N_SYSTEMS]) {
    s[0] = make_system("one molecule", 3, 1, 0, 0);
    s[1] = make_system("12 molecules, charged", 1, 12, 1, 0);
    s[2] = make_system("4 molecules, B Si P Br I", 20, 4, 1, 1);
    s[3] = make_system("periodic", 3, 1, 1, 0);
    s[3].periodic = 1;
    s[3].box[0] = s[3].box[4] = s[3].box[8] = 2.05 * 5.0 + 1.0; /* wider than twice any fixture's cutoff */
    s[4] = make_dense("dense, 216 atoms in one batch", 6);
}

#endif
