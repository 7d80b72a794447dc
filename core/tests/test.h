/* Minimal test harness for libnnp's C tests: each test program exits non-zero on any failure. */
#ifndef NNP_TEST_H
#define NNP_TEST_H

#include "nnp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#define NNP_TEST_UNUSED __attribute__((unused))
#else
#define NNP_TEST_UNUSED
#endif

static int test_failures = 0;

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);             \
            test_failures++;                                                                     \
        }                                                                                        \
    } while (0)

/* Checks a status; on failure prints the library's message. */
#define CHECK_OK(call)                                                                           \
    do {                                                                                         \
        nnp_status st_ = (call);                                                                 \
        if (st_ != NNP_OK) {                                                                     \
            fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #call,            \
                    nnp_status_name(st_), nnp_last_error());                                     \
            test_failures++;                                                                     \
        }                                                                                        \
    } while (0)

/* Checks that a call fails with the expected status and a message containing `needle`. */
#define CHECK_FAILS(call, expected, needle)                                                      \
    do {                                                                                         \
        nnp_status st_ = (call);                                                                 \
        if (st_ != (expected)) {                                                                 \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s (%s)\n", __FILE__, __LINE__,     \
                    #call, nnp_status_name(st_), nnp_status_name(expected), nnp_last_error());   \
            test_failures++;                                                                     \
        } else if (strstr(nnp_last_error(), (needle)) == NULL) {                                 \
            fprintf(stderr, "%s:%d: message of %s lacks '%s': '%s'\n", __FILE__, __LINE__,       \
                    #call, (needle), nnp_last_error());                                          \
            test_failures++;                                                                     \
        } else {                                                                                 \
            printf("  ok: %s -> %s: %s\n", #call, nnp_status_name(st_), nnp_last_error());       \
        }                                                                                        \
    } while (0)

#define CHECK_CLOSE(a, b, tol)                                                                   \
    do {                                                                                         \
        double a_ = (a), b_ = (b);                                                               \
        if (!(fabs(a_ - b_) <= (tol))) {                                                         \
            fprintf(stderr, "%s:%d: %s = %.15g, %s = %.15g, differ by %.3g > %.3g\n", __FILE__,  \
                    __LINE__, #a, a_, #b, b_, fabs(a_ - b_), (double)(tol));                     \
            test_failures++;                                                                     \
        }                                                                                        \
    } while (0)

static NNP_TEST_UNUSED int test_finish(const char* name) {
    if (test_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, test_failures);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

/* Path under the shared directory (models/, molecules/): $NNP_SHARED_DIR or the configured one. */
static NNP_TEST_UNUSED const char* shared_path(const char* rel) {
    static char buf[8][4096];
    static int next = 0;
    const char* root = getenv("NNP_SHARED_DIR");
    if (root == NULL || root[0] == '\0') root = NNP_SHARED_DIR_DEFAULT;
    char* out = buf[next++ % 8];
    snprintf(out, sizeof buf[0], "%s/%s", root, rel);
    return out;
}

static NNP_TEST_UNUSED nnp_model* load_model_or_die(const char* rel) {
    nnp_model* model = NULL;
    const char* path = shared_path(rel);
    if (nnp_model_load(path, &model) != NNP_OK) {
        fprintf(stderr, "cannot load model %s: %s\n(set NNP_SHARED_DIR to the directory holding "
                "models/ani-model-zoo)\n", path, nnp_last_error());
        exit(1);
    }
    return model;
}

/* A model file by its path (a test's argument), or exit 1 saying why. */
static NNP_TEST_UNUSED nnp_model* load_model_file_or_die(const char* path) {
    nnp_model* model = NULL;
    if (nnp_model_load(path, &model) != NNP_OK) {
        fprintf(stderr, "cannot load %s: %s\n", path, nnp_last_error());
        exit(1);
    }
    return model;
}

typedef struct molecule {
    int32_t n;
    int32_t* z;
    double* pos; /* Å */
} molecule;

static NNP_TEST_UNUSED molecule read_molecule_or_die(const char* rel) {
    molecule m = {0, NULL, NULL};
    const char* path = shared_path(rel);
    if (nnp_xyz_read(path, &m.n, &m.z, &m.pos, NULL, NULL) != NNP_OK) {
        fprintf(stderr, "cannot read %s: %s\n", path, nnp_last_error());
        exit(1);
    }
    return m;
}

static NNP_TEST_UNUSED void free_molecule(molecule* m) {
    nnp_free(m->z);
    nnp_free(m->pos);
}

/* Appends drug-like molecule number k (molecules/druglike/drugbank-NNNN.xyz) to z, batch and pos
   (reallocated; *n atoms so far), its atoms in batch b and moved by dx along x; returns its atom
   count, or 0 where the set has no molecule of that number. */
static NNP_TEST_UNUSED int32_t append_druglike(int k, int32_t b, double dx, int32_t* n, int32_t** z, int32_t** batch, double** pos) {
    char rel[64];
    snprintf(rel, sizeof rel, "molecules/druglike/drugbank-%04d.xyz", k);
    FILE* f = fopen(shared_path(rel), "r");
    if (f == NULL) return 0;
    fclose(f);
    molecule m = read_molecule_or_die(rel);
    const size_t total = (size_t)*n + (size_t)m.n;
    *z = realloc(*z, sizeof(int32_t) * total), *batch = realloc(*batch, sizeof(int32_t) * total);
    *pos = realloc(*pos, sizeof(double) * 3 * total);
    for (int32_t a = 0; a < m.n; a++) {
        (*z)[*n + a] = m.z[a], (*batch)[*n + a] = b;
        for (int c = 0; c < 3; c++) (*pos)[3 * (*n + a) + c] = c == 0 && dx != 0 ? m.pos[3 * a + c] + dx : m.pos[3 * a + c];
    }
    *n += m.n;
    const int32_t added = m.n;
    free_molecule(&m);
    return added;
}

/* One batch holding the given atoms; returns the energy (plan's units); forces may be NULL. */
static NNP_TEST_UNUSED double single_energy(nnp_plan* plan, int32_t n, const int32_t* z, const double* pos,
                            const double* box, double* forces) {
    int32_t* batch = calloc((size_t)n + 1, sizeof *batch);
    double e = NAN;
    CHECK_OK(nnp_plan_set_atoms(plan, n, z, batch));
    CHECK_OK(nnp_evaluate_cpu(plan, pos, box, &e, NULL, forces));
    free(batch);
    return e;
}

#endif
