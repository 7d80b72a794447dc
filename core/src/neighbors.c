/* Neighbour search shared by the model families: all pairs within a cutoff, in the same batch,
   by minimum image when periodic; and the CPU evaluations' thread pool. */
#include "internal.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* r_j − r_i with minimum image (box in the same unit, reduced form) or none (box == NULL). */
static void displacement(const double* ri, const double* rj, const double* box, double out[3]) {
    double r[3] = {rj[0] - ri[0], rj[1] - ri[1], rj[2] - ri[2]};
    if (box != NULL) {
        double s = round(r[2] / box[8]);
        r[0] -= s * box[6], r[1] -= s * box[7], r[2] -= s * box[8];
        s = round(r[1] / box[4]);
        r[0] -= s * box[3], r[1] -= s * box[4];
        s = round(r[0] / box[0]);
        r[0] -= s * box[0];
    }
    memcpy(out, r, sizeof r);
}

/* ------------------------------------------------------------------ neighbours */

/* Batches of at least this many atoms find their candidate pairs through a cell grid (cells at least
   the cutoff across, each atom against the 27 cells around its own) where the grid has more than 54
   cells; others compare every pair. Both keep the pairs whose displacement() is within the cutoff,
   in the same order: the same list. */
#define NEIGHBOR_CELL_ATOMS 256

/* The pairs (p, q), p < q positions in a batch, in (p, q) order: a growing array. */
typedef struct pair_list {
    int32_t (*pq)[2];
    size_t count, cap;
} pair_list;

static int pair_push(pair_list* l, int32_t p, int32_t q) {
    if (l->count == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 1024;
        void* grown = realloc(l->pq, cap * sizeof *l->pq);
        if (grown == NULL) return 0;
        l->pq = grown, l->cap = cap;
    }
    l->pq[l->count][0] = p, l->pq[l->count][1] = q;
    l->count++;
    return 1;
}

/* Appends (p, q) with q > p when displacement() puts them within the cutoff; *coincident gets the
   first pair (in (p, q) order) at distance 0 (its p stays -1 if none). */
static int test_pair(const double* pos, const int32_t* atoms, const double* box, double rc2, int32_t p, int32_t q, pair_list* l,
                     int32_t coincident[2]) {
    double r[3];
    displacement(&pos[3 * atoms[p]], &pos[3 * atoms[q]], box, r);
    double d2 = r[0] * r[0] + r[1] * r[1] + r[2] * r[2];
    if (d2 > rc2) return 1;
    if (d2 == 0 && (coincident[0] < 0 || p < coincident[0] || (p == coincident[0] && q < coincident[1])))
        coincident[0] = p, coincident[1] = q;
    return pair_push(l, p, q);
}

/* The cell grid of a batch of m atoms (atoms[p]: the atom at position p): per axis, cells whose
   extent (the distance between their faces: along the box's reciprocal axes when periodic, else
   along x, y, z over the batch's bounding box) is at least the cutoff; 0 (every pair compared then)
   if that leaves fewer than 3 cells on a periodic axis, for a coordinate or box that is not finite,
   or for an atom a million boxes away. cell[p] is atom p's cell. */
static int cell_grid(const double* pos, const int32_t* atoms, int32_t m, const double* box, double cutoff, int n[3], int32_t* cell) {
    const double margin = cutoff * (1 + 1e-6); /* cells a little wider than the cutoff: rounding cannot move a pair two cells apart */
    double lo[3] = {0, 0, 0}, ext[3];
    if (box != NULL) {
        /* reduced form: a = (ax, 0, 0), b = (bx, by, 0), c = (cx, cy, cz); the distances between
           opposite faces are V / |b × c|, V / |c × a|, V / |a × b| */
        const double ax = box[0], bx = box[3], by = box[4], cx = box[6], cy = box[7], cz = box[8];
        if (!(ax > 0 && by > 0 && cz > 0 && isfinite(ax * by * cz * bx * cx * cy))) return 0;
        const double V = ax * by * cz;
        const double bc[3] = {by * cz, -bx * cz, bx * cy - by * cx}, ca[3] = {0, cz * ax, -cy * ax};
        ext[0] = V / sqrt(bc[0] * bc[0] + bc[1] * bc[1] + bc[2] * bc[2]);
        ext[1] = V / sqrt(ca[1] * ca[1] + ca[2] * ca[2]);
        ext[2] = cz;
    } else {
        double hi[3];
        for (int k = 0; k < 3; k++) lo[k] = hi[k] = pos[3 * atoms[0] + k];
        for (int32_t p = 1; p < m; p++)
            for (int k = 0; k < 3; k++) {
                const double x = pos[3 * atoms[p] + k];
                if (x < lo[k]) lo[k] = x;
                if (x > hi[k]) hi[k] = x;
            }
        for (int k = 0; k < 3; k++) ext[k] = hi[k] - lo[k];
    }
    for (int k = 0; k < 3; k++)
        if (!isfinite(ext[k])) return 0;
    for (int k = 0; k < 3; k++) {
        const double c = floor(ext[k] / margin);
        n[k] = c < 1 ? 1 : c > 1024 ? 1024 : (int)c;
        if (box != NULL && n[k] < 3) return 0;
    }
    /* at most about 2 cells per atom: fewer, wider cells on the longest axes */
    while ((double)n[0] * n[1] * n[2] > 2.0 * m + 27) {
        int k = n[0] >= n[1] && n[0] >= n[2] ? 0 : n[1] >= n[2] ? 1 : 2;
        if (box != NULL && n[k] <= 3) break;
        n[k]--;
    }
    for (int32_t p = 0; p < m; p++) {
        const double* r = &pos[3 * atoms[p]];
        double s[3];
        if (box != NULL) { /* fractional coordinates, wrapped into [0, 1) */
            s[2] = r[2] / box[8];
            s[1] = (r[1] - s[2] * box[7]) / box[4];
            s[0] = (r[0] - s[1] * box[3] - s[2] * box[6]) / box[0];
            for (int k = 0; k < 3; k++) {
                if (!(fabs(s[k]) < 1e6)) return 0; /* a million boxes away: the wrap would lose the cells' margin */
                s[k] -= floor(s[k]);
            }
        } else {
            for (int k = 0; k < 3; k++) s[k] = ext[k] > 0 ? (r[k] - lo[k]) / ext[k] : 0;
        }
        int c[3];
        for (int k = 0; k < 3; k++) {
            if (!isfinite(s[k])) return 0; /* every pair compared, as the caller's checks expect */
            c[k] = (int)(s[k] * n[k]);
            if (c[k] < 0) c[k] = 0;
            if (c[k] >= n[k]) c[k] = n[k] - 1;
        }
        cell[p] = (c[2] * n[1] + c[1]) * n[0] + c[0];
    }
    return 1;
}

/* The pairs of one batch (atoms[0..m): its atoms in index order) within the cutoff, in (p, q) order. */
static nnp_status batch_pairs(const double* pos, const int32_t* atoms, int32_t m, const double* box, double cutoff, int method,
                              int32_t batch, pair_list* l) {
    const double rc2 = cutoff * cutoff;
    int32_t coincident[2] = {-1, -1};
    int n[3] = {1, 1, 1};
    int32_t *cell = NULL, *head = NULL, *next = NULL;
    int cells = 0;
    if (method != NNP_NEIGHBORS_ALL_PAIRS && m > 1 && (method == NNP_NEIGHBORS_CELLS || m >= NEIGHBOR_CELL_ATOMS)) {
        cell = malloc((size_t)m * sizeof *cell);
        if (cell == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory for the neighbour search");
        if (cell_grid(pos, atoms, m, box, cutoff, n, cell)) cells = n[0] * n[1] * n[2];
        /* where the 27 cells around an atom are most of the grid, every pair is as quick */
        if (method == NNP_NEIGHBORS_AUTO && cells <= 2 * 27) cells = 0;
    }
    if (cells == 0) {
        for (int32_t p = 0; p < m; p++)
            for (int32_t q = p + 1; q < m; q++)
                if (!test_pair(pos, atoms, box, rc2, p, q, l, coincident)) goto memory;
    } else {
        /* each cell's atoms as a list in increasing position, then every atom against the atoms of
           higher position in the 27 cells around its own (distinct cells: at least 3 per periodic
           axis), its partners then sorted */
        head = malloc((size_t)cells * sizeof *head);
        next = malloc((size_t)m * sizeof *next);
        if (head == NULL || next == NULL) goto memory;
        for (int c = 0; c < cells; c++) head[c] = -1;
        for (int32_t p = m - 1; p >= 0; p--) next[p] = head[cell[p]], head[cell[p]] = p;
        for (int32_t p = 0; p < m; p++) {
            const size_t mine = l->count;
            const int c0 = cell[p] % n[0], c1 = cell[p] / n[0] % n[1], c2 = cell[p] / (n[0] * n[1]);
            for (int o2 = -1; o2 <= 1; o2++)
                for (int o1 = -1; o1 <= 1; o1++)
                    for (int o0 = -1; o0 <= 1; o0++) {
                        int k0 = c0 + o0, k1 = c1 + o1, k2 = c2 + o2;
                        if (box != NULL) {
                            k0 = (k0 + n[0]) % n[0], k1 = (k1 + n[1]) % n[1], k2 = (k2 + n[2]) % n[2];
                        } else if (k0 < 0 || k0 >= n[0] || k1 < 0 || k1 >= n[1] || k2 < 0 || k2 >= n[2]) {
                            continue;
                        }
                        for (int32_t q = head[(k2 * n[1] + k1) * n[0] + k0]; q >= 0; q = next[q])
                            if (q > p && !test_pair(pos, atoms, box, rc2, p, q, l, coincident)) goto memory;
                    }
            for (size_t k = mine + 1; k < l->count; k++) { /* p's partners (tens) into increasing q */
                const int32_t q = l->pq[k][1];
                size_t t = k;
                for (; t > mine && l->pq[t - 1][1] > q; t--) l->pq[t][1] = l->pq[t - 1][1];
                l->pq[t][1] = q;
            }
        }
    }
    free(cell), free(head), free(next);
    if (coincident[0] >= 0)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "atoms %d and %d of batch %d are at the same position", atoms[coincident[0]],
                        atoms[coincident[1]], batch);
    return NNP_OK;
memory:
    free(cell), free(head), free(next);
    return nnp_fail(NNP_ERR_MEMORY, "out of memory for the neighbour list");
}

nnp_status nnp_neighbors_build_with(const nnp_plan* plan, const double* pos, const double* box, double cutoff, int method,
                                    nnp_neighbors* out) {
    int32_t n = plan->n_atoms;
    pair_list l = {0};
    int32_t* start = calloc((size_t)n + 1, sizeof *start);
    if (start == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory for the neighbour list");
    for (int32_t b = 0; b < plan->n_batches; b++) {
        const int32_t* atoms = plan->order + plan->batch_start[b];
        const size_t first = l.count;
        nnp_status st = batch_pairs(pos, atoms, plan->batch_start[b + 1] - plan->batch_start[b], box, cutoff, method, b, &l);
        if (st != NNP_OK) {
            free(l.pq), free(start);
            return st;
        }
        for (size_t k = first; k < l.count; k++) { /* positions to atoms */
            l.pq[k][0] = atoms[l.pq[k][0]], l.pq[k][1] = atoms[l.pq[k][1]];
            start[l.pq[k][0] + 1]++;
            start[l.pq[k][1] + 1]++;
        }
    }
    for (int32_t i = 0; i < n; i++) start[i + 1] += start[i];
    nnp_neighbor* items = malloc((2 * l.count + 1) * sizeof *items);
    int32_t* fill = malloc(((size_t)n + 1) * sizeof *fill);
    if (items == NULL || fill == NULL) {
        free(l.pq), free(start), free(items), free(fill);
        return nnp_fail(NNP_ERR_MEMORY, "out of memory for the neighbour list");
    }
    memcpy(fill, start, (size_t)n * sizeof *fill);
    /* Pairs come ordered by (i, j) with i < j in index order within a batch, so filling in pair
       order lists each atom's neighbours in increasing index order. */
    for (size_t k = 0; k < l.count; k++) {
        int32_t i = l.pq[k][0], j = l.pq[k][1];
        nnp_neighbor* a = &items[fill[i]++];
        nnp_neighbor* c = &items[fill[j]++];
        a->j = j;
        displacement(&pos[3 * i], &pos[3 * j], box, a->r);
        a->d = sqrt(a->r[0] * a->r[0] + a->r[1] * a->r[1] + a->r[2] * a->r[2]);
        c->j = i;
        displacement(&pos[3 * j], &pos[3 * i], box, c->r);
        c->d = sqrt(c->r[0] * c->r[0] + c->r[1] * c->r[1] + c->r[2] * c->r[2]);
    }
    free(l.pq);
    free(fill);
    out->start = start;
    out->items = items;
    return NNP_OK;
}

/* All pairs within the cutoff in the same batch. Each atom's neighbours are in increasing index order,
   so a batch's result does not depend on the other batches. */
nnp_status nnp_neighbors_build(const nnp_plan* plan, const double* pos, const double* box, double cutoff,
                               nnp_neighbors* out) {
    return nnp_neighbors_build_with(plan, pos, box, cutoff, NNP_NEIGHBORS_AUTO, out);
}

void nnp_neighbors_free(nnp_neighbors* nl) {
    free(nl->start);
    free(nl->items);
    nl->start = NULL;
    nl->items = NULL;
}

/* ------------------------------------------------------------------ threads */

typedef struct pool_job {
    void (*fn)(void* ctx, int32_t item, int32_t thread);
    void* ctx;
    int32_t n_items;
    atomic_int next;
} pool_job;

typedef struct pool_arg {
    pool_job* job;
    int32_t thread;
} pool_arg;

static void pool_run(pool_job* job, int32_t thread) {
    for (;;) {
        int32_t item = atomic_fetch_add(&job->next, 1);
        if (item >= job->n_items) break;
        job->fn(job->ctx, item, thread);
    }
}

static void* pool_main(void* arg) {
    pool_arg* a = arg;
    pool_run(a->job, a->thread);
    return NULL;
}

void nnp_parallel_for(int32_t n_threads, int32_t n_items, void (*fn)(void* ctx, int32_t item, int32_t thread),
                      void* ctx) {
    pool_job job = {.fn = fn, .ctx = ctx, .n_items = n_items};
    atomic_init(&job.next, 0);
    if (n_threads > n_items) n_threads = n_items;
    if (n_threads > NNP_MAX_THREADS) n_threads = NNP_MAX_THREADS;
    pthread_t threads[NNP_MAX_THREADS];
    pool_arg args[NNP_MAX_THREADS];
    int32_t started = 0;
    for (int32_t t = 1; t < n_threads; t++) {
        args[t] = (pool_arg){&job, t};
        if (pthread_create(&threads[t], NULL, pool_main, &args[t]) != 0) break; /* the others take over */
        started = t;
    }
    pool_run(&job, 0);
    for (int32_t t = 1; t <= started; t++) pthread_join(threads[t], NULL);
}
