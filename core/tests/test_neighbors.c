/* The neighbour search's cell grid against every pair: the same list, entry for entry and bit for
   bit (neighbour, displacement, distance), on periodic boxes (cubic and triclinic, down to the
   fewest cells the grid takes), open batches of every shape, many batches, and the same error for
   atoms at one position. Built with libnnp's neighbors.c and error.c (internal functions). */
#include "../src/internal.h"
#include "test.h"

#include <time.h>

static unsigned long long rng_state = 88172645463325252ull;
static double uniform(void) { /* xorshift64*, [0, 1) */
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

typedef struct {
    nnp_plan plan;
    double* pos;
} sys_t;

/* n atoms in batches of the given sizes (batch b of atom i: atoms dealt out in turn, so a batch's
   atoms are not consecutive), positions from fill(). */
static sys_t make(int n_batches, const int* sizes) {
    sys_t s;
    memset(&s, 0, sizeof s);
    int n = 0;
    for (int b = 0; b < n_batches; b++) n += sizes[b];
    s.plan.n_atoms = n, s.plan.n_batches = n_batches;
    s.plan.batches = malloc(sizeof(int32_t) * (n + 1));
    s.plan.order = malloc(sizeof(int32_t) * (n + 1));
    s.plan.batch_start = malloc(sizeof(int32_t) * (n_batches + 1));
    s.pos = malloc(sizeof(double) * 3 * (n + 1));
    int* left = malloc(sizeof(int) * n_batches);
    memcpy(left, sizes, sizeof(int) * n_batches);
    for (int i = 0, b = 0; i < n; i++) {
        while (left[b] == 0) b = (b + 1) % n_batches;
        s.plan.batches[i] = b, left[b]--, b = (b + 1) % n_batches;
    }
    s.plan.batch_start[0] = 0;
    for (int b = 0, k = 0; b < n_batches; b++) {
        for (int i = 0; i < n; i++)
            if (s.plan.batches[i] == b) s.plan.order[k++] = i;
        s.plan.batch_start[b + 1] = k;
    }
    free(left);
    return s;
}

static void release(sys_t* s) {
    free(s->plan.batches), free(s->plan.order), free(s->plan.batch_start), free(s->pos);
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* Both ways give the same list; returns its pair count. */
static long compare(const char* what, const sys_t* s, const double* box, double cutoff, int expect_pairs) {
    nnp_neighbors a = {0}, c = {0}, u = {0};
    double t0 = seconds();
    CHECK_OK(nnp_neighbors_build_with(&s->plan, s->pos, box, cutoff, NNP_NEIGHBORS_ALL_PAIRS, &a));
    double t1 = seconds();
    CHECK_OK(nnp_neighbors_build_with(&s->plan, s->pos, box, cutoff, NNP_NEIGHBORS_CELLS, &c));
    double t2 = seconds();
    CHECK_OK(nnp_neighbors_build(&s->plan, s->pos, box, cutoff, &u));
    const int n = s->plan.n_atoms;
    long items = a.start ? a.start[n] : 0;
    CHECK(memcmp(a.start, c.start, sizeof(int32_t) * (n + 1)) == 0);
    CHECK(memcmp(a.start, u.start, sizeof(int32_t) * (n + 1)) == 0);
    if (memcmp(a.start, c.start, sizeof(int32_t) * (n + 1)) == 0 && memcmp(a.start, u.start, sizeof(int32_t) * (n + 1)) == 0) {
        long differ = 0;
        for (long k = 0; k < items; k++) /* field by field (the struct has padding) */
            for (int w = 0; w < 2; w++) {
                const nnp_neighbor *x = &a.items[k], *y = w ? &u.items[k] : &c.items[k];
                differ += x->j != y->j || memcmp(x->r, y->r, sizeof x->r) != 0 || memcmp(&x->d, &y->d, sizeof x->d) != 0;
            }
        CHECK(differ == 0);
    }
    if (expect_pairs) CHECK(items > 0);
    printf("%s: %d atoms in %d batches, %ld neighbour entries, the same from the cell grid (every pair %.1f ms, "
           "cells %.1f ms)\n", what, n, s->plan.n_batches, items, 1e3 * (t1 - t0), 1e3 * (t2 - t1));
    nnp_neighbors_free(&a), nnp_neighbors_free(&c), nnp_neighbors_free(&u);
    return items;
}

/* Uniform positions in the box spanned by the reduced vectors, or with outside: over 1.4 times its
   span, so that some lie in other images. */
static void fill_box(sys_t* s, const double* box, int outside) {
    const double w = outside ? 1.4 : 1.0, o = outside ? 0.2 : 0.0;
    for (int i = 0; i < s->plan.n_atoms; i++) {
        double f[3] = {uniform() * w - o, uniform() * w - o, uniform() * w - o};
        for (int k = 0; k < 3; k++) s->pos[3 * i + k] = f[0] * box[k] + f[1] * box[3 + k] + f[2] * box[6 + k];
    }
}

int main(void) {
    /* a water-like density in a cubic box: 5,184 atoms in 37.25 Å, cutoff 5 Å */
    {
        int sizes[1] = {5184};
        sys_t s = make(1, sizes);
        double box[9] = {37.248, 0, 0, 0, 37.248, 0, 0, 0, 37.248};
        fill_box(&s, box, 0);
        long items = compare("cubic box, water density", &s, box, 5.0, 1);
        CHECK(items > 40L * 5184 && items < 70L * 5184); /* about 52 neighbours per atom */
        release(&s);
    }
    /* triclinic (reduced form, as OpenMM's): a rhombic dodecahedron's vectors, and a skewed box; the
       cutoff at the most cells' limit and around the fewest cells (3 per axis) */
    {
        int sizes[2] = {900, 700};
        sys_t s = make(2, sizes);
        const double L = 30;
        double dodec[9] = {L, 0, 0, 0, L, 0, L / 2, L / 2, L * sqrt(0.5)};
        double skew[9] = {L, 0, 0, 0.4 * L, 0.9 * L, 0, -0.3 * L, 0.45 * L, 0.8 * L};
        for (int k = 0; k < 2; k++) {
            const double* box = k ? skew : dodec;
            fill_box(&s, box, 1);
            const double cz = box[8];
            double cuts[5] = {2.5, 4.0, cz / 3 * 0.999, cz / 3 * 1.001, cz / 2.2};
            for (int c = 0; c < 5; c++) {
                char what[96];
                snprintf(what, sizeof what, "%s box, cutoff %.3f", k ? "skewed" : "rhombic dodecahedron", cuts[c]);
                compare(what, &s, box, cuts[c], 1);
            }
        }
        release(&s);
    }
    /* open batches: 60 of sizes 1 to 600 (dealt out, so interleaved), each a random shape: a ball, a
       flat sheet (all z equal), a line, and two clusters far apart */
    {
        int sizes[60];
        for (int b = 0; b < 60; b++) sizes[b] = b % 4 == 0 ? 1 + b * 10 : b % 4 == 1 ? 2 : 300 + b;
        sys_t s = make(60, sizes);
        for (int i = 0; i < s.plan.n_atoms; i++) {
            const int b = s.plan.batches[i], shape = b % 5;
            double* r = &s.pos[3 * i];
            for (int k = 0; k < 3; k++) r[k] = uniform() * 20;
            if (shape == 1) r[2] = 3.0;
            if (shape == 2) r[1] = r[2] = 1.0, r[0] *= 20;
            if (shape == 3 && uniform() < 0.5) r[0] += 1e5;
            if (shape == 4) for (int k = 0; k < 3; k++) r[k] = r[k] * 0.3 - 1e3;
        }
        compare("open batches", &s, NULL, 5.0, 1);
        compare("open batches, cutoff 0.5", &s, NULL, 0.5, 0);
        release(&s);
    }
    /* a coordinate that is not finite (the evaluations refuse it before the search; the search itself
       then compares every pair, as before the grid) */
    {
        int sizes[1] = {600};
        sys_t s = make(1, sizes);
        double box[9] = {25, 0, 0, 0, 25, 0, 0, 0, 25};
        fill_box(&s, box, 0);
        s.pos[3 * 123 + 1] = NAN;
        compare("a NaN coordinate, periodic", &s, box, 5.0, 1);
        compare("a NaN coordinate, open", &s, NULL, 5.0, 1);
        release(&s);
    }
    /* two atoms of a batch at one position: the same error either way */
    {
        int sizes[2] = {400, 400};
        sys_t s = make(2, sizes);
        double box[9] = {20, 0, 0, 0, 20, 0, 0, 0, 20};
        fill_box(&s, box, 1);
        const int i = s.plan.order[400 + 17], j = s.plan.order[400 + 301];
        memcpy(&s.pos[3 * j], &s.pos[3 * i], sizeof(double) * 3);
        for (int p = 0; p < 2; p++) {
            const double* b = p ? box : NULL;
            char first[512];
            nnp_neighbors nl = {0};
            CHECK_FAILS(nnp_neighbors_build_with(&s.plan, s.pos, b, 5.0, NNP_NEIGHBORS_ALL_PAIRS, &nl), NNP_ERR_INVALID_ARGUMENT,
                        "same position");
            snprintf(first, sizeof first, "%s", nnp_last_error());
            CHECK_FAILS(nnp_neighbors_build_with(&s.plan, s.pos, b, 5.0, NNP_NEIGHBORS_CELLS, &nl), NNP_ERR_INVALID_ARGUMENT,
                        "same position");
            CHECK(strcmp(first, nnp_last_error()) == 0);
            printf("coincident atoms (%s): \"%s\" either way\n", p ? "periodic" : "open", first);
        }
        release(&s);
    }
    return test_finish("test_neighbors");
}
