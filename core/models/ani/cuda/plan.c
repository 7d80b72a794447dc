/* Host-side planning of the CUDA evaluation (see plan.h): pure C, no CUDA, tested without a GPU. */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

void nnp_cuda_tuning_defaults(nnp_cuda_tuning* t) {
    memset(t, 0, sizeof *t);
    t->max_classes = 4;
    t->class_rows = 64.0;
    /* Measured on the H200 (docs/benchmarks.md): 32 for k_gemm (of 128, 64, 32, 16), 256 for the
       few-rows kernels, whose fix-up then reads few partial sums. */
    t->split_k = 32;
    t->split_k_few_rows = 256;
    t->split_max = 64;
    t->split_k_tensor = 256;
    t->middle_tile_rows = 64;
    t->big_tensor_cores = 1;
    t->cluster_split_k = 1;
    t->defer_split_k = 1;
    t->fuse_output = 1;
    t->presplit = 1;
    t->aev_slices = 0;
    t->bwd_slices = 0;
    t->pdl = 1;
}

/* Batch b's element counts and the angular blocks it can fill (pairs[p] = 1). */
static void batch_blocks(const nnp_plan* plan, int b, int* cnt, int* pairs) {
    const nnp_model* m = plan->model;
    const nnp_ani* ani = nnp_ani_of(m);
    const int E = m->n_elements;
    memset(cnt, 0, sizeof(int) * NNP_MAX_ELEMENTS);
    memset(pairs, 0, sizeof(int) * NNP_CUDA_MAX_PAIRS);
    for (int q = plan->batch_start[b]; q < plan->batch_start[b + 1]; q++) cnt[plan->elements[plan->order[q]]]++;
    for (int a = 0; a < E; a++)
        for (int c = 0; c < E; c++)
            if (cnt[a] > 0 && cnt[c] > (a == c)) pairs[ani->pair_index[a][c]] = 1;
}

void nnp_aev_layout_free(nnp_aev_layout* layout) {
    free(layout->live_feature), free(layout->batch_class);
    layout->live_feature = NULL, layout->batch_class = NULL;
}

int nnp_cuda_plan_aev_layout(const nnp_plan* plan, const nnp_cuda_tuning* tuning, nnp_aev_layout* L) {
    const nnp_model* m = plan->model;
    const nnp_ani* ani = nnp_ani_of(m);
    const int E = m->n_elements, NB = plan->n_batches;
    const int n_pairs = (ani->aev_length - ani->radial_length) / ani->angular_sub;
    memset(L, 0, sizeof *L);
    L->live_feature = malloc(sizeof(int) * ((size_t)ani->aev_length + 1));
    L->batch_class = malloc(sizeof(int) * ((size_t)NB + 1));
    int* prefix = malloc(sizeof(int) * ((size_t)NB + 1));
    if (L->live_feature == NULL || L->batch_class == NULL || prefix == NULL) {
        free(prefix);
        nnp_aev_layout_free(L);
        return -1;
    }
    int radial_live[NNP_MAX_ELEMENTS] = {0};
    double pair_weight[NNP_CUDA_MAX_PAIRS] = {0}; /* atoms whose batch can fill the pair's block */
    int cnt[NNP_MAX_ELEMENTS], pairs[NNP_CUDA_MAX_PAIRS];
    for (int b = 0; b < NB; b++) { /* (recomputed per batch below rather than stored: batches may be many) */
        batch_blocks(plan, b, cnt, pairs);
        const int atoms = plan->batch_start[b + 1] - plan->batch_start[b];
        for (int a = 0; a < E; a++)
            if (cnt[a] > 0) radial_live[a] = 1;
        for (int p = 0; p < n_pairs; p++)
            if (pairs[p]) pair_weight[p] += atoms;
    }
    int length = 0;
    for (int a = 0; a < NNP_MAX_ELEMENTS; a++) L->radial_at[a] = -1;
    for (int a = 0; a < E; a++) {
        L->radial_at[a] = radial_live[a] ? length : -1;
        for (int t = 0; radial_live[a] && t < ani->radial_sub; t++) L->live_feature[length++] = a * ani->radial_sub + t;
    }
    if (length == 0) { /* no atoms: one block stored, so that no product is empty */
        L->radial_at[0] = 0;
        for (int t = 0; t < ani->radial_sub; t++) L->live_feature[length++] = t;
    }
    L->angular0 = length;
    /* angular blocks by weight (descending), ties in model order; dead ones (weight 0) not stored */
    int order[NNP_CUDA_MAX_PAIRS], n_live = 0;
    for (int p = 0; p < NNP_CUDA_MAX_PAIRS; p++) L->angular_at[p] = -1;
    for (int p = 0; p < n_pairs; p++)
        if (pair_weight[p] > 0) order[n_live++] = p;
    for (int i = 1; i < n_live; i++) /* stable insertion sort */
        for (int j = i; j > 0 && pair_weight[order[j]] > pair_weight[order[j - 1]]; j--) {
            int tmp = order[j];
            order[j] = order[j - 1], order[j - 1] = tmp;
        }
    for (int i = 0; i < n_live; i++) {
        L->angular_at[order[i]] = length;
        for (int t = 0; t < ani->angular_sub; t++) L->live_feature[length++] = ani->radial_length + order[i] * ani->angular_sub + t;
    }
    L->length = length;
    /* each batch's prefix, then the classes (dynamic programming over the distinct prefixes) */
    int distinct[NNP_CUDA_MAX_PAIRS + 2], n_distinct = 0;
    double atoms_at[NNP_CUDA_MAX_PAIRS + 2] = {0};
    for (int b = 0; b < NB; b++) {
        batch_blocks(plan, b, cnt, pairs);
        int end = L->angular0;
        for (int p = 0; p < n_pairs; p++)
            if (pairs[p] && L->angular_at[p] + ani->angular_sub > end) end = L->angular_at[p] + ani->angular_sub;
        prefix[b] = end;
        int k = 0;
        while (k < n_distinct && distinct[k] != end) k++;
        if (k == n_distinct) distinct[n_distinct++] = end;
        atoms_at[k] += plan->batch_start[b + 1] - plan->batch_start[b];
    }
    if (n_distinct == 0) distinct[n_distinct++] = length;
    for (int i = 1; i < n_distinct; i++) /* ascending, with their atom counts */
        for (int j = i; j > 0 && distinct[j] < distinct[j - 1]; j--) {
            int t = distinct[j];
            distinct[j] = distinct[j - 1], distinct[j - 1] = t;
            double w = atoms_at[j];
            atoms_at[j] = atoms_at[j - 1], atoms_at[j - 1] = w;
        }
    const int max_classes = tuning->max_classes;
    int K = max_classes < 1 ? 1 : max_classes > NNP_CUDA_MAX_CLASSES ? NNP_CUDA_MAX_CLASSES : max_classes;
    if (K > n_distinct) K = n_distinct;
    /* cost[i][k]: the first i prefixes in k classes, the last one ending at distinct[i-1] */
    double cost[NNP_CUDA_MAX_PAIRS + 3][NNP_CUDA_MAX_CLASSES + 1];
    int from[NNP_CUDA_MAX_PAIRS + 3][NNP_CUDA_MAX_CLASSES + 1];
    const double allowance = tuning->class_rows * E;
    for (int i = 0; i <= n_distinct; i++)
        for (int k = 0; k <= K; k++) cost[i][k] = i == 0 && k == 0 ? 0 : 1e300;
    for (int i = 1; i <= n_distinct; i++)
        for (int k = 1; k <= K; k++)
            for (int j = i - 1; j >= 0; j--) {
                double rows = 0;
                for (int t = j; t < i; t++) rows += atoms_at[t];
                const double c = cost[j][k - 1] + (double)distinct[i - 1] * (rows + allowance);
                if (c < cost[i][k]) cost[i][k] = c, from[i][k] = j;
            }
    int best_k = 1;
    for (int k = 2; k <= K; k++)
        if (cost[n_distinct][k] < cost[n_distinct][best_k]) best_k = k;
    L->n_classes = best_k;
    for (int i = n_distinct, k = best_k; k > 0; i = from[i][k], k--) L->class_len[k - 1] = distinct[i - 1];
    for (int b = 0; b < NB; b++) {
        int c = 0;
        while (L->class_len[c] < prefix[b]) c++;
        L->batch_class[b] = c;
    }
    free(prefix);
    return 0;
}

void nnp_cuda_plan_rows(const nnp_plan* plan, const nnp_aev_layout* layout, nnp_rows* R, int* row_atom) {
    const int n = plan->n_atoms, E = plan->model->n_elements;
    memset(R, 0, sizeof *R);
    int rows = 0;
    for (int e = 0; e < E; e++) {
        R->elem_row0[e] = rows;
        for (int c = 0; c < layout->n_classes; c++) {
            R->class_row0[e][c] = rows;
            for (int i = 0; i < n; i++)
                if (plan->elements[i] == e && layout->batch_class[plan->batches[i]] == c) row_atom[rows++] = i;
            R->class_rows[e][c] = rows - R->class_row0[e][c];
        }
        R->elem_rows[e] = rows - R->elem_row0[e];
    }
}

int nnp_cuda_plan_capacity(const nnp_plan* plan) {
    int largest = 0;
    for (int b = 0; b < plan->n_batches; b++)
        if (plan->batch_start[b + 1] - plan->batch_start[b] > largest) largest = plan->batch_start[b + 1] - plan->batch_start[b];
    return largest - 1 < NNP_CUDA_MAX_NEIGHBORS ? (largest > 1 ? largest - 1 : 1) : NNP_CUDA_MAX_NEIGHBORS;
}

static int min_int(int a, int b) { return a < b ? a : b; }
static int max_int(int a, int b) { return a > b ? a : b; }

nnp_gemm_choice nnp_cuda_plan_gemm(const nnp_cuda_tuning* t, const nnp_gemm_shape* g) {
    nnp_gemm_choice c;
    const int few_rows = g->is_float && g->max_m <= NNP_CUDA_FEW_ROWS;
    const int per_part = max_int(NNP_CUDA_GEMM_K, few_rows ? t->split_k_few_rows : t->split_k);
    const int split_max = max_int(1, t->split_max);
    /* the few-rows kernels work in chunks: parts of whole chunks where possible */
    int ksplit = g->max_m <= NNP_CUDA_SPLIT_ROWS
                     ? max_int(1, min_int(split_max, few_rows ? (g->max_k + per_part - 1) / per_part : g->max_k / per_part))
                     : 1;
    /* middle row counts in float32 on the tensor cores (k_gemm_big_h split over k) */
    const int middle_tc = !few_rows && g->max_m <= NNP_CUDA_SPLIT_ROWS && g->is_float && g->aligned && t->big_tensor_cores;
    if (middle_tc) ksplit = max_int(1, min_int(split_max, (g->max_k + max_int(1, t->split_k_tensor) - 1) / max_int(1, t->split_k_tensor)));
    while (ksplit > 1 && (size_t)ksplit * (size_t)g->max_mn * (size_t)g->jobs > ((size_t)1 << 24)) ksplit /= 2;
    c.ksplit = ksplit;
    c.tile_rows = middle_tc && t->middle_tile_rows == 64 ? 64 : 128;
    if (few_rows) c.kernel = g->max_m <= NNP_CUDA_MMA_ROWS ? NNP_GEMM_MMA : NNP_GEMM_FEW_ROWS;
    else if (middle_tc) c.kernel = NNP_GEMM_BIG_H;
    else if (ksplit > 1) c.kernel = NNP_GEMM_SPLIT_K;
    else c.kernel = g->is_float && g->aligned && t->big_tensor_cores ? NNP_GEMM_BIG_H : NNP_GEMM_BIG;
    return c;
}

int nnp_cuda_lanes_over_shfz(int nz, int angular_sub) { return nz >= 3 && nz <= 32 && 32 % nz == 0 && angular_sub % nz == 0; }

int nnp_cuda_aev_atom_threads(int n_atoms, int sms) {
    int warps = NNP_CUDA_AEV_THREADS / 32;
    while (warps > 2 && (long long)n_atoms * warps > 16LL * sms) warps /= 2;
    return 32 * warps;
}

size_t nnp_cuda_aev_smem_base(int capacity, size_t real_size) { return (size_t)capacity * (8 * real_size + 2 * sizeof(int)); }

static size_t align16(size_t bytes) { return (bytes + 15) / 16 * 16; }

/* k_aev's pair-parallel angular path: an accumulator row (stride reals) per warp and a row of pair
   factors per thread. */
static size_t pair_parallel_smem(int threads, int stride, size_t real_size, size_t pair_row) {
    return (size_t)(threads / 32) * stride * real_size + (size_t)threads * pair_row;
}

void nnp_cuda_plan_aev_kernels(const nnp_cuda_tuning* t, const nnp_cuda_device* dev, const nnp_aev_kernel_input* in,
                               nnp_aev_kernels* out) {
    /* The pair-parallel angular path where its per-warp accumulators and its table of pair factors
       (one row per thread) fit in shared memory, with 1024 threads per atom when there are fewer
       atoms than SMs, else nnp_cuda_aev_atom_threads. */
    const int n = in->n_atoms, sms = dev->sms;
    const size_t optin = (size_t)dev->smem_optin, rs = in->real_size;
    const size_t base = nnp_cuda_aev_smem_base(in->capacity, rs);
    const int stride = in->stored_length - in->angular0; /* stored angular features */
    const int lanes = nnp_cuda_lanes_over_shfz(in->nShfZ, in->angular_sub);
    out->aev_threads = n < sms ? NNP_CUDA_AEV_MAX_THREADS : nnp_cuda_aev_atom_threads(n, sms);
    const size_t pair_row = (size_t)NNP_CUDA_PAIR_STRIDE(in->pair_factors) * rs;
    size_t acc = pair_parallel_smem(out->aev_threads, stride, rs, pair_row);
    if (base + acc + in->static_smem > optin && out->aev_threads > NNP_CUDA_AEV_THREADS)
        out->aev_threads = NNP_CUDA_AEV_THREADS, acc = pair_parallel_smem(NNP_CUDA_AEV_THREADS, stride, rs, pair_row);
    out->aev_acc_stride = in->angular_sub <= 32 && base + acc + in->static_smem <= optin ? stride : 0;
    out->aev_shmem = base + (out->aev_acc_stride > 0 ? acc : 0);
    /* Few atoms: each atom's AEV over several blocks of NNP_CUDA_AEV_THREADS (k_aev, aev_angular_sliced):
       the largest divisor of the angular terms' outer count (8 for ANI-2x) that keeps the blocks
       within 2 per SM (measured on the H200 for 22 atoms: 2, 4, 6, 8 slices took 62.3, 59.3, 58.8,
       57.7 us per step). */
    out->aev_slices = 1;
    const int nz = in->nShfZ, n_outer = lanes ? in->angular_sub / nz : 0;
    if (n > 0 && n_outer > 0 && stride > 0) {
        int S = 1;
        for (int d = 2; d <= n_outer; d++)
            if (n_outer % d == 0 && (long long)n * d <= 2LL * sms) S = d;
        if (t->aev_slices > 0) S = max_int(1, min_int(n_outer, t->aev_slices));
        const int max_ol = (n_outer + S - 1) / S, rowlen = stride / in->angular_sub * max_ol * nz;
        const size_t rowstride = (size_t)(rowlen + 31) / 32 * 32 + nz;
        const size_t acc_sliced = (size_t)(NNP_CUDA_AEV_THREADS / 32) * (32 / nz) * rowstride * rs;
        if (S >= 2 && base + acc_sliced + in->static_smem <= optin)
            out->aev_slices = S, out->aev_threads = NNP_CUDA_AEV_THREADS, out->aev_acc_stride = rowlen, out->aev_shmem = base + acc_sliced;
    }
    /* Few atoms are spread over several blocks each in the backward pass (about 4 blocks per SM in
       all, at most 16 per atom). */
    out->bwd_slices = lanes && n > 0 ? min_int(16, (4 * sms) / n) : 1;
    if (t->bwd_slices > 0 && lanes) out->bwd_slices = max_int(1, min_int(64, t->bwd_slices));
    if (out->bwd_slices < 2) out->bwd_slices = 1;
    /* + the neighbours' force places, and the dE/dAEV row when split (see aev_atom) */
    out->bwd_shmem = base + align16((size_t)in->capacity * sizeof(int)) + (out->bwd_slices > 1 ? (size_t)in->stored_length * rs : 0);
}
