/* Several devices: a plan's batches split, in order, into parts of near-equal cost. */
#include "internal.h"

#include <math.h>
#include <stdlib.h>

/* The cost of a batch in atom units: its atoms plus NNP_PAIR_COST per pair within the model's
   cutoff. Per atom, ANI runs its networks (hundreds of thousands of multiply-adds per member) and
   TensorNet its per-atom MLPs and 3×3 algebra; per pair, ANI one radial and a share of the angular
   terms, TensorNet a filter row and a scatter: a pair costs a small fraction of an atom. */
#define NNP_PAIR_COST 0.05

/* Greedy split under a bound: the fewest parts with sums ≤ bound (each batch alone must fit). */
static int32_t parts_needed(const double* cost, int32_t n, double bound) {
    int32_t parts = 1, taken = 0;
    double sum = 0;
    for (int32_t b = 0; b < n; b++) {
        if (taken > 0 && sum + cost[b] > bound) parts++, sum = 0, taken = 0;
        sum += cost[b], taken++;
    }
    return parts;
}

nnp_status nnp_partition_batches(int32_t n_batches, const double* cost, int32_t n_parts, int32_t* first) {
    if (n_batches < 0 || n_parts < 1)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_partition_batches: %d batches into %d parts", n_batches, n_parts);
    if (first == NULL || (n_batches > 0 && cost == NULL))
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_partition_batches: NULL argument");
    double total = 0, largest = 0;
    for (int32_t b = 0; b < n_batches; b++) {
        if (!isfinite(cost[b]) || cost[b] < 0)
            return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_partition_batches: batch %d has cost %g (must be finite, "
                            "≥ 0)", b, cost[b]);
        total += cost[b];
        if (cost[b] > largest) largest = cost[b];
    }
    if (!isfinite(total))
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_partition_batches: the total cost is not finite");
    /* The smallest bound that n_parts greedy parts can meet lies in [largest, total]: bisect it. */
    double lo = largest, hi = total;
    if (parts_needed(cost, n_batches, lo) <= n_parts) hi = lo;
    for (int it = 0; it < 200 && hi - lo > 1e-13 * hi; it++) {
        double mid = 0.5 * (lo + hi);
        if (mid <= lo || mid >= hi) break;
        if (parts_needed(cost, n_batches, mid) <= n_parts) hi = mid;
        else lo = mid;
    }
    /* Fill parts up to the bound, each with at least one batch while any remain, and stop early only
       to leave one batch for each later part; parts beyond the batches are empty. */
    int32_t b = 0;
    first[0] = 0;
    for (int32_t p = 0; p < n_parts - 1; p++) {
        double sum = 0;
        for (int32_t taken = 0; b < n_batches; taken++) {
            if (taken > 0 && (sum + cost[b] > hi || n_batches - b <= n_parts - 1 - p)) break;
            sum += cost[b++];
        }
        first[p + 1] = b;
    }
    first[n_parts] = n_batches;
    return NNP_OK;
}

nnp_status nnp_plan_batch_costs(nnp_plan* plan, const double* positions, const double* box, double* costs) {
    if (plan == NULL || costs == NULL || (plan->n_atoms > 0 && positions == NULL))
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_plan_batch_costs: NULL argument");
    const nnp_model* model = plan->model;
    double energy_unit, to_angstrom;
    nnp_plan_units(plan, &energy_unit, &to_angstrom);
    const double to_model = to_angstrom / model->length_to_angstrom; /* plan length unit → model's */
    for (int32_t i = 0; i < 3 * plan->n_atoms; i++)
        if (!isfinite(positions[i]))
            return nnp_fail(NNP_ERR_NONFINITE, "coordinate %c of atom %d is not finite (%g)", "xyz"[i % 3], i / 3,
                            positions[i]);
    double box_m[9];
    if (box != NULL) {
        nnp_status st = nnp_check_box(box, model->family->cutoff(model) * model->length_to_angstrom, to_angstrom);
        if (st != NNP_OK) return st;
        for (int k = 0; k < 9; k++) box_m[k] = box[k] * to_model;
    }
    for (int32_t i = 0; i < 3 * plan->n_atoms; i++) plan->pos[i] = positions[i] * to_model;
    nnp_neighbors nl = {0};
    nnp_status st = nnp_neighbors_build(plan, plan->pos, box ? box_m : NULL, model->family->cutoff(model), &nl);
    if (st != NNP_OK) return st;
    for (int32_t b = 0; b < plan->n_batches; b++) {
        double pairs = 0;
        for (int32_t p = plan->batch_start[b]; p < plan->batch_start[b + 1]; p++) {
            int32_t i = plan->order[p];
            pairs += 0.5 * (nl.start[i + 1] - nl.start[i]);
        }
        costs[b] = (plan->batch_start[b + 1] - plan->batch_start[b]) + NNP_PAIR_COST * pairs;
    }
    nnp_neighbors_free(&nl);
    return NNP_OK;
}
