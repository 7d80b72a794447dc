/* Batches split across devices: nnp_partition_batches against every contiguous split (brute force),
   its edge cases and errors; nnp_plan_batch_costs against pairs counted here. */
#include "test.h"

/* The largest part of the best contiguous split of cost[0..n) into at most `parts` parts. */
static double best_bottleneck(const double* cost, int n, int parts) {
    if (n == 0) return 0;
    if (parts == 1) {
        double s = 0;
        for (int b = 0; b < n; b++) s += cost[b];
        return s;
    }
    double best = INFINITY, head = 0;
    for (int k = 0; k <= n; k++) { /* the first part holds cost[0..k) */
        double rest = best_bottleneck(cost + k, n - k, parts - 1);
        double m = head > rest ? head : rest;
        if (m < best) best = m;
        if (k < n) head += cost[k];
    }
    return best;
}

/* Checks first[] is a valid split and returns its largest part. */
static double check_split(const double* cost, int n, int parts, const int32_t* first) {
    CHECK(first[0] == 0);
    CHECK(first[parts] == n);
    double worst = 0;
    for (int p = 0; p < parts; p++) {
        CHECK(first[p] <= first[p + 1]);
        if (n >= parts) CHECK(first[p] < first[p + 1]); /* no empty part while batches suffice */
        if (n < parts) CHECK(first[p + 1] - first[p] == (p < n ? 1 : 0));
        double s = 0;
        for (int b = first[p]; b < first[p + 1]; b++) s += cost[b];
        if (s > worst) worst = s;
    }
    return worst;
}

static void test_against_brute_force(void) {
    unsigned seed = 12345;
    int cases = 0;
    for (int n = 0; n <= 11; n++)
        for (int parts = 1; parts <= 5; parts++)
            for (int trial = 0; trial < 40; trial++) {
                double cost[16];
                for (int b = 0; b < n; b++) {
                    seed = seed * 1103515245u + 12345u;
                    /* integers, zeros and spread-out values: ties and empty batches happen */
                    int r = (int)(seed >> 16) % 100;
                    cost[b] = trial % 3 == 0 ? (double)(r % 4) : trial % 3 == 1 ? r * 0.37 + 0.01 : (r < 10 ? 50.0 : 1.0);
                }
                int32_t first[8];
                CHECK_OK(nnp_partition_batches(n, cost, parts, first));
                double got = check_split(cost, n, parts, first), best = best_bottleneck(cost, n, parts);
                if (!(got <= best * (1 + 1e-12) + 1e-300)) {
                    fprintf(stderr, "n %d parts %d trial %d: largest part %.17g, best %.17g\n", n, parts, trial, got, best);
                    test_failures++;
                }
                cases++;
            }
    printf("  ok: %d random splits as good as the best contiguous split\n", cases);
}

static void test_equal_batches(void) {
    /* 837 × 4 equal molecules: the largest part holds ceil(N / parts) of them, the fewest possible. */
    enum { N = 3348 };
    static double cost[N];
    for (int b = 0; b < N; b++) cost[b] = 44.0;
    for (int parts = 1; parts <= 8; parts++) {
        int32_t first[9];
        CHECK_OK(nnp_partition_batches(N, cost, parts, first));
        check_split(cost, N, parts, first);
        int largest = 0;
        for (int p = 0; p < parts; p++)
            if (first[p + 1] - first[p] > largest) largest = first[p + 1] - first[p];
        CHECK(largest == (N + parts - 1) / parts);
    }
    /* One heavy batch: it gets a part of its own. */
    cost[N / 2] = 1e6;
    int32_t first[3];
    CHECK_OK(nnp_partition_batches(N, cost, 2, first));
    CHECK(first[1] == N / 2 || first[1] == N / 2 + 1);
    printf("  ok: equal batches: the largest of 1..8 parts is as small as can be; a heavy batch stands alone\n");
}

static void test_errors(void) {
    double cost[3] = {1, 2, 3};
    int32_t first[4];
    CHECK_FAILS(nnp_partition_batches(3, cost, 0, first), NNP_ERR_INVALID_ARGUMENT, "3 batches into 0 parts");
    CHECK_FAILS(nnp_partition_batches(-1, cost, 2, first), NNP_ERR_INVALID_ARGUMENT, "-1 batches");
    CHECK_FAILS(nnp_partition_batches(3, NULL, 2, first), NNP_ERR_INVALID_ARGUMENT, "NULL");
    CHECK_FAILS(nnp_partition_batches(3, cost, 2, NULL), NNP_ERR_INVALID_ARGUMENT, "NULL");
    cost[1] = -1;
    CHECK_FAILS(nnp_partition_batches(3, cost, 2, first), NNP_ERR_INVALID_ARGUMENT, "batch 1 has cost -1");
    cost[1] = NAN;
    CHECK_FAILS(nnp_partition_batches(3, cost, 2, first), NNP_ERR_INVALID_ARGUMENT, "batch 1 has cost");
    cost[1] = 1e308, cost[2] = 1e308;
    CHECK_FAILS(nnp_partition_batches(3, cost, 2, first), NNP_ERR_INVALID_ARGUMENT, "total");
    CHECK_OK(nnp_partition_batches(0, NULL, 3, first));
    CHECK(first[0] == 0 && first[1] == 0 && first[2] == 0 && first[3] == 0);
}

/* Pairs of batch b within rc (Å), counted directly, with minimum image in a cubic box of width L (0: none). */
static int count_pairs(const double* pos, const int32_t* batch, int n, int b, double rc, double L) {
    int pairs = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            if (batch[i] != b || batch[j] != b) continue;
            double d2 = 0;
            for (int k = 0; k < 3; k++) {
                double d = pos[3 * j + k] - pos[3 * i + k];
                if (L > 0) d -= L * round(d / L);
                d2 += d * d;
            }
            if (d2 <= rc * rc) pairs++;
        }
    return pairs;
}

static void test_costs(void) {
    nnp_model* model = load_model_or_die("models/ani-model-zoo/ani-1x_8x.info");
    molecule m = read_molecule_or_die("molecules/druglike/drugbank-0030.xyz");
    /* batch 0: the molecule; batch 1: empty; batch 2: the molecule stretched ×1.6 (fewer pairs);
       batch 3: two atoms out of range of each other. */
    int n = 2 * m.n + 2;
    int32_t* z = malloc(sizeof(int32_t) * n);
    int32_t* batch = malloc(sizeof(int32_t) * n);
    double* pos = malloc(sizeof(double) * 3 * n);
    for (int i = 0; i < m.n; i++) {
        z[i] = z[m.n + i] = m.z[i];
        batch[i] = 0, batch[m.n + i] = 2;
        for (int k = 0; k < 3; k++) pos[3 * i + k] = m.pos[3 * i + k], pos[3 * (m.n + i) + k] = 1.6 * m.pos[3 * i + k] + 40;
    }
    z[n - 2] = z[n - 1] = 1, batch[n - 2] = batch[n - 1] = 3;
    double far[6] = {-30, 0, 0, -20, 0, 0};
    memcpy(&pos[3 * (n - 2)], far, sizeof far);
    nnp_plan* plan;
    CHECK_OK(nnp_plan_create(model, &plan));
    CHECK_OK(nnp_plan_set_atoms(plan, n, z, batch));
    double cost[4], rc = nnp_model_cutoff(model);
    CHECK_OK(nnp_plan_batch_costs(plan, pos, NULL, cost));
    int p0 = count_pairs(pos, batch, n, 0, rc, 0), p2 = count_pairs(pos, batch, n, 2, rc, 0);
    CHECK(p0 > p2 && p2 > 0);
    CHECK(cost[1] == 0);
    CHECK(cost[3] == 2);
    /* cost = atoms + w·pairs with one w > 0 for every batch */
    double w0 = (cost[0] - m.n) / p0, w2 = (cost[2] - m.n) / p2;
    CHECK(w0 > 0 && w0 < 1);
    CHECK_CLOSE(w0, w2, 1e-12 * w0);
    /* the same in nm (OpenMM's units) */
    double* nm = malloc(sizeof(double) * 3 * n);
    for (int i = 0; i < 3 * n; i++) nm[i] = pos[i] / 10;
    double cost_nm[4];
    CHECK_OK(nnp_plan_set_units(plan, NNP_UNITS_NM_KJMOL));
    CHECK_OK(nnp_plan_batch_costs(plan, nm, NULL, cost_nm));
    for (int b = 0; b < 4; b++) CHECK_CLOSE(cost_nm[b], cost[b], 1e-12 * cost[b]);
    /* periodic: batch 3's atoms 1 Å apart through the boundary of a 12 nm box */
    double box[9] = {12, 0, 0, 0, 12, 0, 0, 0, 12};
    nm[3 * (n - 2)] = 0.05, nm[3 * (n - 1)] = 11.95;
    for (int i = 0; i < 2 * m.n; i++) nm[3 * i + 1] += 6, nm[3 * i + 2] += 6; /* well inside */
    CHECK_OK(nnp_plan_batch_costs(plan, nm, box, cost_nm));
    CHECK_CLOSE(cost_nm[3], 2 + w0, 1e-12);
    nm[0] = NAN;
    CHECK_FAILS(nnp_plan_batch_costs(plan, nm, box, cost_nm), NNP_ERR_NONFINITE, "atom 0");
    nm[0] = 0;
    box[0] = 0.5;
    CHECK_FAILS(nnp_plan_batch_costs(plan, nm, box, cost_nm), NNP_ERR_BOX, "");
    CHECK_FAILS(nnp_plan_batch_costs(NULL, nm, NULL, cost_nm), NNP_ERR_INVALID_ARGUMENT, "NULL");
    /* the costs feed the split: batch 0 (most pairs) never shares a part with batch 2 in two parts */
    int32_t first[3];
    CHECK_OK(nnp_partition_batches(4, cost, 2, first));
    CHECK(first[1] == 1 || first[1] == 2);
    printf("  ok: batch costs are atoms + %.3g × pairs (%d and %d pairs), in Å and nm, periodic\n", w0, p0, p2);
    nnp_plan_free(plan);
    nnp_model_free(model);
    free(nm), free(z), free(batch), free(pos);
    free_molecule(&m);
}

int main(void) {
    test_against_brute_force();
    test_equal_batches();
    test_errors();
    test_costs();
    return test_finish("test_partition");
}
