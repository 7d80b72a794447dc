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

/* All pairs within the cutoff in the same batch. Each atom's neighbours are in increasing index order,
   so a batch's result does not depend on the other batches. */
nnp_status nnp_neighbors_build(const nnp_plan* plan, const double* pos, const double* box, double cutoff,
                               nnp_neighbors* out) {
    const double rc2 = cutoff * cutoff;
    int32_t n = plan->n_atoms;
    size_t cap = 1024, count = 0;
    int32_t(*pairs)[2] = malloc(cap * sizeof *pairs);
    int32_t* start = calloc((size_t)n + 1, sizeof *start);
    if (pairs == NULL || start == NULL) {
        free(pairs), free(start);
        return nnp_fail(NNP_ERR_MEMORY, "out of memory for the neighbour list");
    }
    for (int32_t b = 0; b < plan->n_batches; b++) {
        for (int32_t p = plan->batch_start[b]; p < plan->batch_start[b + 1]; p++) {
            int32_t i = plan->order[p];
            for (int32_t q = p + 1; q < plan->batch_start[b + 1]; q++) {
                int32_t j = plan->order[q];
                double r[3];
                displacement(&pos[3 * i], &pos[3 * j], box, r);
                double d2 = r[0] * r[0] + r[1] * r[1] + r[2] * r[2];
                if (d2 > rc2) continue;
                if (d2 == 0) {
                    free(pairs), free(start);
                    return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "atoms %d and %d of batch %d are at the same "
                                    "position", i, j, b);
                }
                if (count == cap) {
                    cap *= 2;
                    void* grown = realloc(pairs, cap * sizeof *pairs);
                    if (grown == NULL) {
                        free(pairs), free(start);
                        return nnp_fail(NNP_ERR_MEMORY, "out of memory for the neighbour list");
                    }
                    pairs = grown;
                }
                pairs[count][0] = i;
                pairs[count][1] = j;
                count++;
                start[i + 1]++;
                start[j + 1]++;
            }
        }
    }
    for (int32_t i = 0; i < n; i++) start[i + 1] += start[i];
    nnp_neighbor* items = malloc((2 * count + 1) * sizeof *items);
    int32_t* fill = malloc(((size_t)n + 1) * sizeof *fill);
    if (items == NULL || fill == NULL) {
        free(pairs), free(start), free(items), free(fill);
        return nnp_fail(NNP_ERR_MEMORY, "out of memory for the neighbour list");
    }
    memcpy(fill, start, (size_t)n * sizeof *fill);
    /* Pairs come ordered by (i, j) with i < j in index order within a batch, so filling in pair
       order lists each atom's neighbours in increasing index order. */
    for (size_t k = 0; k < count; k++) {
        int32_t i = pairs[k][0], j = pairs[k][1];
        nnp_neighbor* a = &items[fill[i]++];
        nnp_neighbor* c = &items[fill[j]++];
        a->j = j;
        displacement(&pos[3 * i], &pos[3 * j], box, a->r);
        a->d = sqrt(a->r[0] * a->r[0] + a->r[1] * a->r[1] + a->r[2] * a->r[2]);
        c->j = i;
        displacement(&pos[3 * j], &pos[3 * i], box, c->r);
        c->d = sqrt(c->r[0] * c->r[0] + c->r[1] * c->r[1] + c->r[2] * c->r[2]);
    }
    free(pairs);
    free(fill);
    out->start = start;
    out->items = items;
    return NNP_OK;
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
