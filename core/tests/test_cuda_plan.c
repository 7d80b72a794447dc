/*
 * The CUDA evaluation's host-side planning (core/models/ani/cuda/plan.c) without a GPU: the stored AEV
 * layout and its classes against a brute-force search, the row order, the neighbour capacity, the
 * split-K and kernel of GEMM launches, and the AEV kernels' shapes for the facts of an H200.
 */
#include "../models/ani/cuda/plan.h"
#include "test.h"

/* Element symbols → ANI-2x atomic numbers. */
static int32_t z_of(char c) {
    switch (c) {
    case 'H': return 1;
    case 'C': return 6;
    case 'N': return 7;
    case 'O': return 8;
    case 'F': return 9;
    case 'S': return 16;
    case 'L': return 17; /* Cl */
    }
    return -1;
}

/* A plan of batches given as strings of element letters ("HHCO" is one batch of four atoms); the
   atoms of batch b are interleaved with the others' (atom order is not batch order). */
static nnp_plan* make_plan(const nnp_model* model, int n_batches, const char* const* batches) {
    int32_t z[4096], b[4096], n = 0;
    for (int k = 0, more = 1; more; k++) {
        more = 0;
        for (int q = 0; q < n_batches; q++)
            if ((int)strlen(batches[q]) > k) z[n] = z_of(batches[q][k]), b[n] = q, n++, more = 1;
    }
    nnp_plan* plan = NULL;
    CHECK_OK(nnp_plan_create(model, &plan));
    CHECK_OK(nnp_plan_set_atoms(plan, n, z, b));
    return plan;
}

/* Whether a batch of the plan can make model feature f non-zero (the definition of a live block). */
static int feature_live(const nnp_plan* plan, int f) {
    const nnp_model* m = plan->model;
    for (int q = 0; q < plan->n_batches; q++) {
        int cnt[NNP_MAX_ELEMENTS] = {0};
        for (int i = 0; i < plan->n_atoms; i++)
            if (plan->batches[i] == q) cnt[plan->elements[i]]++;
        if (f < nnp_ani_of(m)->radial_length) {
            if (cnt[f / nnp_ani_of(m)->radial_sub] > 0) return 1;
            continue;
        }
        const int pair = (f - nnp_ani_of(m)->radial_length) / nnp_ani_of(m)->angular_sub;
        for (int a = 0; a < m->n_elements; a++)
            for (int c = a; c < m->n_elements; c++)
                if (nnp_ani_of(m)->pair_index[a][c] == pair && cnt[a] > 0 && cnt[c] > (a == c)) return 1;
    }
    return 0;
}

/* The stored prefix batch q needs: past its last live angular block (or the radial blocks). */
static int needed_prefix(const nnp_plan* plan, const nnp_aev_layout* L, int q) {
    const nnp_model* m = plan->model;
    int cnt[NNP_MAX_ELEMENTS] = {0}, end = L->angular0;
    for (int i = 0; i < plan->n_atoms; i++)
        if (plan->batches[i] == q) cnt[plan->elements[i]]++;
    for (int a = 0; a < m->n_elements; a++)
        for (int c = a; c < m->n_elements; c++)
            if (cnt[a] > 0 && cnt[c] > (a == c)) {
                const int at = L->angular_at[nnp_ani_of(m)->pair_index[a][c]];
                if (at + nnp_ani_of(m)->angular_sub > end) end = at + nnp_ani_of(m)->angular_sub;
            }
    return end;
}

/* The cost the classes minimise: Σ over classes of length × (its rows + allowance). */
static double class_cost(const nnp_plan* plan, const nnp_aev_layout* L, const int* batch_class, int n_classes, const int* len,
                         double class_rows) {
    double cost = 0;
    for (int c = 0; c < n_classes; c++) {
        double rows = 0;
        for (int q = 0; q < plan->n_batches; q++)
            if (batch_class[q] == c) rows += plan->batch_start[q + 1] - plan->batch_start[q];
        cost += len[c] * (rows + class_rows * plan->model->n_elements);
    }
    (void)L;
    return cost;
}

/* The least cost over every grouping of the distinct needed prefixes into at most K classes (each
   class as long as its longest member): exhaustive over the cut points. */
static double best_cost(const nnp_plan* plan, const nnp_aev_layout* L, int K, double class_rows) {
    int distinct[64], nd = 0;
    for (int q = 0; q < plan->n_batches; q++) {
        int p = needed_prefix(plan, L, q), k = 0;
        while (k < nd && distinct[k] != p) k++;
        if (k == nd) distinct[nd++] = p;
    }
    for (int i = 1; i < nd; i++)
        for (int j = i; j > 0 && distinct[j] < distinct[j - 1]; j--) {
            int t = distinct[j];
            distinct[j] = distinct[j - 1], distinct[j - 1] = t;
        }
    double best = 1e300;
    for (unsigned mask = 0; mask < (1u << (nd - 1)); mask++) { /* bit i: a class ends after distinct[i] */
        int classes = 1 + __builtin_popcount(mask);
        if (classes > K) continue;
        int len[64], nc = 0;
        for (int i = 0; i < nd; i++)
            if (i == nd - 1 || (mask >> i & 1)) len[nc++] = distinct[i];
        int* cls = malloc(sizeof(int) * plan->n_batches);
        for (int q = 0; q < plan->n_batches; q++) {
            int c = 0;
            while (len[c] < needed_prefix(plan, L, q)) c++;
            cls[q] = c;
        }
        double cost = class_cost(plan, L, cls, nc, len, class_rows);
        if (cost < best) best = cost;
        free(cls);
    }
    return best;
}

static void check_layout(const nnp_plan* plan, const nnp_cuda_tuning* t, const char* what) {
    const nnp_model* m = plan->model;
    nnp_aev_layout L;
    CHECK(nnp_cuda_plan_aev_layout(plan, t, &L) == 0);
    /* The stored columns are exactly the live features, radial ones first in model order. */
    int live = 0;
    for (int f = 0; f < nnp_ani_of(m)->aev_length; f++) live += feature_live(plan, f);
    CHECK(L.length == (live > 0 ? live : nnp_ani_of(m)->radial_sub));
    int seen_angular = 0;
    for (int k = 0; k < L.length; k++) {
        const int f = L.live_feature[k];
        if (live > 0) CHECK(feature_live(plan, f));
        if (f >= nnp_ani_of(m)->radial_length) seen_angular = 1;
        else CHECK(!seen_angular && (k == 0 || L.live_feature[k - 1] < f));
        for (int j = 0; j < k; j++) CHECK(L.live_feature[j] != f);
    }
    CHECK(L.angular0 <= L.length);
    for (int a = 0; a < m->n_elements; a++)
        if (L.radial_at[a] >= 0)
            for (int t2 = 0; t2 < nnp_ani_of(m)->radial_sub; t2++) CHECK(L.live_feature[L.radial_at[a] + t2] == a * nnp_ani_of(m)->radial_sub + t2);
    /* Angular blocks in descending order of the atoms whose batch can fill them. */
    const int n_pairs = (nnp_ani_of(m)->aev_length - nnp_ani_of(m)->radial_length) / nnp_ani_of(m)->angular_sub;
    double previous = 1e300;
    for (int k = L.angular0; k < L.length; k += nnp_ani_of(m)->angular_sub) {
        const int pair = (L.live_feature[k] - nnp_ani_of(m)->radial_length) / nnp_ani_of(m)->angular_sub;
        CHECK(L.angular_at[pair] == k);
        double weight = 0;
        for (int q = 0; q < plan->n_batches; q++) {
            int cnt[NNP_MAX_ELEMENTS] = {0}, fills = 0;
            for (int i = 0; i < plan->n_atoms; i++)
                if (plan->batches[i] == q) cnt[plan->elements[i]]++;
            for (int a = 0; a < m->n_elements; a++)
                for (int c = a; c < m->n_elements; c++)
                    if (nnp_ani_of(m)->pair_index[a][c] == pair && cnt[a] > 0 && cnt[c] > (a == c)) fills = 1;
            if (fills) weight += plan->batch_start[q + 1] - plan->batch_start[q];
        }
        CHECK(weight <= previous);
        previous = weight;
    }
    for (int p = 0; p < n_pairs; p++)
        if (L.angular_at[p] < 0) CHECK(!feature_live(plan, nnp_ani_of(m)->radial_length + p * nnp_ani_of(m)->angular_sub));
    /* Classes: ascending prefixes, the last the whole row, every batch in one that covers it, and
       the least cost of all groupings. */
    CHECK(L.n_classes >= 1 && L.n_classes <= t->max_classes && L.n_classes <= NNP_CUDA_MAX_CLASSES);
    for (int c = 1; c < L.n_classes; c++) CHECK(L.class_len[c] > L.class_len[c - 1]);
    CHECK(L.class_len[L.n_classes - 1] == L.length || plan->n_batches == 0);
    for (int q = 0; q < plan->n_batches; q++) {
        CHECK(L.class_len[L.batch_class[q]] >= needed_prefix(plan, &L, q));
        CHECK(L.batch_class[q] == 0 || L.class_len[L.batch_class[q] - 1] < needed_prefix(plan, &L, q));
    }
    const double cost = class_cost(plan, &L, L.batch_class, L.n_classes, L.class_len, t->class_rows);
    const double best = best_cost(plan, &L, t->max_classes, t->class_rows);
    printf("%s: %d of %d features stored, %d class(es), cost %.0f (best of all groupings %.0f)\n", what, L.length, nnp_ani_of(m)->aev_length,
           L.n_classes, cost, best);
    CHECK(cost <= best * (1 + 1e-12));
    /* Rows: every atom once, by element, then class, then index. */
    int* row_atom = malloc(sizeof(int) * (plan->n_atoms + 1));
    int* seen = calloc(plan->n_atoms + 1, sizeof(int));
    nnp_rows R;
    nnp_cuda_plan_rows(plan, &L, &R, row_atom);
    int rows = 0;
    for (int e = 0; e < m->n_elements; e++) {
        CHECK(R.elem_row0[e] == rows);
        for (int c = 0; c < L.n_classes; c++) {
            CHECK(R.class_row0[e][c] == rows);
            for (int r = 0; r < R.class_rows[e][c]; r++, rows++) {
                const int i = row_atom[rows];
                CHECK(plan->elements[i] == e && L.batch_class[plan->batches[i]] == c);
                CHECK(r == 0 || row_atom[rows - 1] < i);
                seen[i]++;
            }
        }
        CHECK(R.elem_rows[e] == rows - R.elem_row0[e]);
    }
    CHECK(rows == plan->n_atoms);
    for (int i = 0; i < plan->n_atoms; i++) CHECK(seen[i] == 1);
    free(row_atom), free(seen);
    nnp_aev_layout_free(&L);
}

static void test_layouts(const nnp_model* ani2x) {
    nnp_cuda_tuning t;
    nnp_cuda_tuning_defaults(&t);
    /* One molecule of H, C, N, O with every pair: 4 radial blocks of 16 and 10 angular blocks of 32. */
    const char* one[] = {"HHHHCCCNNOO"};
    nnp_plan* plan = make_plan(ani2x, 1, one);
    check_layout(plan, &t, "H2 C3 N2 O2 (every H/C/N/O pair)");
    nnp_aev_layout L;
    CHECK(nnp_cuda_plan_aev_layout(plan, &t, &L) == 0);
    CHECK(L.length == 4 * 16 + 10 * 32 && L.n_classes == 1);
    nnp_aev_layout_free(&L);
    nnp_plan_free(plan);
    /* Mixed batches: S, F and Cl in few of them (their blocks last), one N alone (no N-N block). */
    const char* mixed[] = {"HHHCCCNOO", "HHCCOS", "HHHCCF", "CLL", "HHHHCCCCOO", "HHCCCNO", "HC", "HHHHHHCCCCCC"};
    plan = make_plan(ani2x, 8, mixed);
    check_layout(plan, &t, "8 mixed batches, defaults");
    t.class_rows = 0; /* small classes may stand alone */
    check_layout(plan, &t, "8 mixed batches, no class allowance");
    CHECK(nnp_cuda_plan_aev_layout(plan, &t, &L) == 0);
    CHECK(L.n_classes >= 2);
    nnp_aev_layout_free(&L);
    t.max_classes = 1;
    check_layout(plan, &t, "8 mixed batches, one class");
    t.max_classes = 8;
    check_layout(plan, &t, "8 mixed batches, up to 8 classes");
    nnp_plan_free(plan);
    /* Empty batches and a single atom. */
    const char* sparse[] = {"", "O", "", "HHO"};
    plan = make_plan(ani2x, 4, sparse);
    nnp_cuda_tuning_defaults(&t);
    check_layout(plan, &t, "empty batches and a lone O");
    CHECK(nnp_cuda_plan_capacity(plan) == 2);
    nnp_plan_free(plan);
    const char* lone[] = {"C"};
    plan = make_plan(ani2x, 1, lone);
    check_layout(plan, &t, "one atom");
    CHECK(nnp_cuda_plan_capacity(plan) == 1);
    nnp_plan_free(plan);
}

static void test_capacity(const nnp_model* ani2x) {
    static char big[700];
    memset(big, 'H', 699);
    const char* batches[] = {"HHO", big};
    nnp_plan* plan = make_plan(ani2x, 2, batches);
    CHECK(nnp_cuda_plan_capacity(plan) == NNP_CUDA_MAX_NEIGHBORS); /* 699 atoms: capped */
    nnp_plan_free(plan);
    big[300] = '\0';
    plan = make_plan(ani2x, 2, batches);
    CHECK(nnp_cuda_plan_capacity(plan) == 299);
    nnp_plan_free(plan);
}

static nnp_gemm_choice choose(const nnp_cuda_tuning* t, int jobs, int m, int k, int n, int aligned, int is_float) {
    nnp_gemm_shape s = {jobs, m, k, m * n, aligned, is_float};
    return nnp_cuda_plan_gemm(t, &s);
}

static void test_gemm_choice(void) {
    nnp_cuda_tuning t;
    nnp_cuda_tuning_defaults(&t);
    nnp_gemm_choice c;
    /* One molecule, ANI-2x first layer forward: 9 H rows, k = 384, 8 members × 256 columns. */
    c = choose(&t, 4, 9, 384, 2048, 1, 1);
    CHECK(c.kernel == NNP_GEMM_MMA && c.ksplit == 2); /* ceil(384 / 256) */
    c = choose(&t, 4, 16, 2048, 384, 1, 1);
    CHECK(c.kernel == NNP_GEMM_MMA && c.ksplit == 8);
    c = choose(&t, 4, 17, 2048, 384, 1, 1);
    CHECK(c.kernel == NNP_GEMM_FEW_ROWS && c.ksplit == 8);
    c = choose(&t, 4, 32, 2048, 384, 1, 0); /* double: the split-K SIMT kernel, 32 k per part, at most 64 */
    CHECK(c.kernel == NNP_GEMM_SPLIT_K && c.ksplit == 64);
    /* Middle row counts in float32: the tensor-core kernel, 256 k per part */
    c = choose(&t, 4, 100, 1008, 2048, 1, 1);
    CHECK(c.kernel == NNP_GEMM_BIG_H && c.ksplit == 4);
    c = choose(&t, 4, 256, 256, 192, 1, 1);
    CHECK(c.kernel == NNP_GEMM_BIG_H && c.ksplit == 1);
    c = choose(&t, 4, 100, 384, 2048, 0, 1); /* unaligned: the SIMT split-K kernel */
    CHECK(c.kernel == NNP_GEMM_SPLIT_K && c.ksplit == 12);
    t.big_tensor_cores = 0; /* the SIMT kernels */
    c = choose(&t, 4, 100, 384, 2048, 1, 1);
    CHECK(c.kernel == NNP_GEMM_SPLIT_K && c.ksplit == 12);
    nnp_cuda_tuning_defaults(&t);
    c = choose(&t, 4, 100, 20, 2048, 1, 0); /* k below one part: no split, so the many-rows kernel */
    CHECK(c.kernel == NNP_GEMM_BIG && c.ksplit == 1);
    c = choose(&t, 4, 257, 384, 2048, 1, 1);
    CHECK(c.kernel == NNP_GEMM_BIG_H && c.ksplit == 1);
    c = choose(&t, 4, 257, 384, 2048, 0, 1);
    CHECK(c.kernel == NNP_GEMM_BIG && c.ksplit == 1);
    c = choose(&t, 4, 5000, 384, 2048, 1, 0);
    CHECK(c.kernel == NNP_GEMM_BIG && c.ksplit == 1);
    t.big_tensor_cores = 0;
    c = choose(&t, 4, 257, 384, 2048, 1, 1);
    CHECK(c.kernel == NNP_GEMM_BIG);
    /* The workspace bound: ksplit · max(m·n) · jobs <= 2^24, halving the parts. */
    nnp_cuda_tuning_defaults(&t);
    c = choose(&t, 32, 256, 4096, 2048, 1, 1);
    CHECK(c.ksplit >= 1 && (size_t)c.ksplit * 256 * 2048 * 32 <= ((size_t)1 << 24));
    CHECK(c.ksplit == 1 || (size_t)(2 * c.ksplit) * 256 * 2048 * 32 > ((size_t)1 << 24));
    t.split_max = 3;
    c = choose(&t, 1, 100, 384, 64, 0, 1);
    CHECK(c.ksplit == 3);
    t.split_k_tensor = 64;
    c = choose(&t, 1, 100, 384, 64, 1, 1);
    CHECK(c.kernel == NNP_GEMM_BIG_H && c.ksplit == 3 && c.tile_rows == 64);
    c = choose(&t, 1, 257, 384, 64, 1, 1); /* many rows: 128 */
    CHECK(c.kernel == NNP_GEMM_BIG_H && c.tile_rows == 128);
    t.middle_tile_rows = 128;
    c = choose(&t, 1, 100, 384, 64, 1, 1);
    CHECK(c.kernel == NNP_GEMM_BIG_H && c.ksplit == 3 && c.tile_rows == 128);
    t.middle_tile_rows = 64;
    t.split_max = 1000;
    c = choose(&t, 1, 100, 384, 64, 1, 1);
    CHECK(c.kernel == NNP_GEMM_BIG_H && c.ksplit == 6);
    t.split_k = 1; /* below one k-step: parts stay multiples of NNP_CUDA_GEMM_K */
    c = choose(&t, 1, 100, 384, 64, 0, 1);
    CHECK(c.ksplit == 384 / NNP_CUDA_GEMM_K);
}

static void test_aev_kernels(void) {
    const nnp_cuda_device h200 = {132, 232448, 9, 1};
    nnp_cuda_tuning t;
    nnp_cuda_tuning_defaults(&t);
    nnp_aev_kernels k;
    /* One ANI-2x molecule of 22 atoms (384 stored features, 64 radial; 32 angular terms, nShfZ 4,
       so 8 outer terms; 4 powers and 8 exponentials per pair). */
    nnp_aev_kernel_input in = {22, 21, 384, 64, 32, 4, 4, 4096, 12};
    nnp_cuda_plan_aev_kernels(&t, &h200, &in, &k);
    printf("22 atoms: k_aev %d threads × %d slices (%zu B), backward %d slices (%zu B)\n", k.aev_threads, k.aev_slices, k.aev_shmem,
           k.bwd_slices, k.bwd_shmem);
    CHECK(k.aev_slices == 8 && k.aev_threads == NNP_CUDA_AEV_THREADS); /* 22 · 8 <= 2 · 132 */
    CHECK(k.bwd_slices == 16); /* min(16, 4 · 132 / 22) */
    CHECK(k.aev_shmem + in.static_smem <= (size_t)h200.smem_optin && k.bwd_shmem + in.static_smem <= (size_t)h200.smem_optin);
    CHECK(k.bwd_shmem >= nnp_cuda_aev_smem_base(21, 4) + 21 * sizeof(int) + 384 * 4);
    /* 100 atoms: 100 · 2 <= 264 < 100 · 4, so 2 slices; backward 4 · 132 / 100 = 5. */
    in.n_atoms = 100;
    nnp_cuda_plan_aev_kernels(&t, &h200, &in, &k);
    CHECK(k.aev_slices == 2 && k.bwd_slices == 5);
    /* Many atoms: one block of 64 per atom (2 warps: 37,105 · 2 > 16 · 132), the pair-parallel path;
       fewer atoms, more warps each: 8 up to 16 · 132 / 8 = 264 atoms, 4 up to 528. */
    CHECK(nnp_cuda_aev_atom_threads(220, 132) == 256 && nnp_cuda_aev_atom_threads(264, 132) == 256);
    CHECK(nnp_cuda_aev_atom_threads(265, 132) == 128 && nnp_cuda_aev_atom_threads(528, 132) == 128);
    CHECK(nnp_cuda_aev_atom_threads(529, 132) == 64 && nnp_cuda_aev_atom_threads(37105, 132) == 64);
    in.n_atoms = 37105;
    nnp_cuda_plan_aev_kernels(&t, &h200, &in, &k);
    CHECK(k.aev_threads == 64 && k.aev_slices == 1 && k.bwd_slices == 1 && k.aev_acc_stride == 384 - 64);
    /* its shared memory: the neighbour tables, an accumulator row per warp and a row of pair factors (15 floats) per thread */
    CHECK(NNP_CUDA_PAIR_STRIDE(12) == 15 && NNP_CUDA_PAIR_STRIDE(11) == 13);
    CHECK(k.aev_shmem == nnp_cuda_aev_smem_base(21, 4) + 2 * (384 - 64) * 4 + 64 * 15 * 4);
    /* Few atoms, but more than the SMs would share: 1,024 threads, no slices when the terms do not
       allow lanes over ShfZ (nShfZ 5). */
    nnp_aev_kernel_input odd = {22, 21, 384, 64, 40, 5, 4, 4096, 13};
    nnp_cuda_plan_aev_kernels(&t, &h200, &odd, &k);
    CHECK(k.aev_threads == NNP_CUDA_AEV_MAX_THREADS && k.aev_slices == 1 && k.bwd_slices == 1);
    CHECK(!nnp_cuda_lanes_over_shfz(5, 40) && nnp_cuda_lanes_over_shfz(8, 32) && nnp_cuda_lanes_over_shfz(4, 32) && !nnp_cuda_lanes_over_shfz(2, 32));
    /* Shared memory too small for the accumulators (capacity 512 in double, 48 KB): the general path. */
    const nnp_cuda_device small = {132, 48 * 1024, 8, 0};
    nnp_aev_kernel_input wide = {600, 512, 1008, 112, 32, 8, 8, 4096, 12};
    nnp_cuda_plan_aev_kernels(&t, &small, &wide, &k);
    CHECK(k.aev_acc_stride == 0 && k.aev_shmem == nnp_cuda_aev_smem_base(512, 8));
    /* Forced slices (tuning). */
    in.n_atoms = 22;
    t.aev_slices = 1, t.bwd_slices = 3;
    nnp_cuda_plan_aev_kernels(&t, &h200, &in, &k);
    CHECK(k.aev_slices == 1 && k.aev_threads == NNP_CUDA_AEV_MAX_THREADS && k.bwd_slices == 3);
    t.aev_slices = 99, t.bwd_slices = 99; /* clamped to the outer count and 64 */
    nnp_cuda_plan_aev_kernels(&t, &h200, &in, &k);
    CHECK(k.aev_slices == 8 && k.bwd_slices == 64);
}

static void test_tuning_api(const nnp_model* ani2x) {
    nnp_plan* plan;
    CHECK_OK(nnp_plan_create(ani2x, &plan));
    nnp_cuda_tuning t, d;
    nnp_cuda_tuning_defaults(&d);
    CHECK_OK(nnp_plan_get_cuda_tuning_internal(plan, &t));
    CHECK(memcmp(&t, &d, sizeof t) == 0);
    t.fuse_output = 0;
    CHECK_OK(nnp_plan_set_cuda_tuning_internal(plan, &t));
    CHECK_OK(nnp_plan_get_cuda_tuning_internal(plan, &t));
    CHECK(t.fuse_output == 0);
    CHECK_OK(nnp_plan_set_cuda_tuning_internal(plan, NULL));
    CHECK_OK(nnp_plan_get_cuda_tuning_internal(plan, &t));
    CHECK(memcmp(&t, &d, sizeof t) == 0);
    CHECK_FAILS(nnp_plan_set_cuda_tuning_internal(NULL, &t), NNP_ERR_INVALID_ARGUMENT, "plan is NULL");
    CHECK_OK(nnp_plan_set_cuda_profiling(plan, 1));
    CHECK_FAILS(nnp_plan_set_cuda_profiling(NULL, 1), NNP_ERR_INVALID_ARGUMENT, "plan is NULL");
    nnp_plan_free(plan);
}

int main(void) {
    nnp_model* ani2x = load_model_or_die("models/ani-model-zoo/ani-2x_8x.info");
    test_layouts(ani2x);
    test_capacity(ani2x);
    test_gemm_choice();
    test_aev_kernels();
    test_tuning_api(ani2x);
    nnp_model_free(ani2x);
    return test_finish("test_cuda_plan");
}
