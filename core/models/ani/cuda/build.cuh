/*
 * Making the launch plan (outside capture): build_state runs the steps below in order, each named
 * for what it produces, and leaves in nnp_cuda_state everything launch() reads. The decisions
 * (layout, rows, split-K, kernels, AEV shapes) come from plan.c, which is tested without a
 * GPU; the steps here turn them into job tables and device buffers.
 */
#pragma once

#include <stdlib.h>
#include <string.h>

#include "state.cuh"
#include "aev.cuh"
#include "gemm.cuh"
#include "gemm_big.cuh"
#include "gemm_few_rows.cuh"
#include "finish.cuh"
#include "aev_backward.cuh"

/*
 * Loads every kernel now (module loading is not allowed while capturing) and sets each one's
 * shared-memory carveout to what its resident blocks need, leaving the rest of the SM's memory to
 * L1: the context may prefer shared memory (OpenMM's does), which costs the GEMMs about a third of
 * their speed through L1 misses. Kernels with more than 48 KB of shared memory, static and dynamic
 * together, get their dynamic part allowed here (allow_dynamic_smem: the device's most).
 */
template <typename K> static void configure_kernel(K* kernel, int threads, size_t dynamic_smem) {
    cudaFuncAttributes a;
    if (cudaFuncGetAttributes(&a, kernel) != cudaSuccess) return;
    /* Static and dynamic together count against the 48 KB a launch gets without opting in. */
    if (a.sharedSizeBytes + dynamic_smem > 48 * 1024) allow_dynamic_smem(kernel);
    int device = 0, smem_sm = 0, regs_sm = 0, threads_sm = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
    cudaDeviceGetAttribute(&regs_sm, cudaDevAttrMaxRegistersPerMultiprocessor, device);
    cudaDeviceGetAttribute(&threads_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device);
    if (smem_sm <= 0 || regs_sm <= 0 || threads_sm <= 0) return;
    const int warps = (threads + 31) / 32, regs_per_warp = (max(a.numRegs, 1) * 32 + 255) / 256 * 256;
    const int blocks = max(1, min(min(regs_sm / (regs_per_warp * warps), threads_sm / (warps * 32)), 32));
    const size_t need = (size_t)blocks * (a.sharedSizeBytes + dynamic_smem + 1024);
    const int percent = (int)min((size_t)100, (need * 100 + smem_sm - 1) / smem_sm);
    cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent);
}

/* k_gemm_big_h with presplit activations, tiles of 64·MI rows */
template <int MI> static void configure_big_h() {
    configure_kernel(k_gemm_big_h<EPI_BIAS_CELU, false, true, MI>, 256, TP_SMEM_OF(64 * MI));
    configure_kernel(k_gemm_big_h<EPI_DERIV, false, true, MI>, 256, TP_SMEM_OF(64 * MI));
    configure_kernel(k_gemm_big_h<EPI_NONE, false, true, MI>, 256, TP_SMEM_OF(64 * MI));
    configure_kernel(k_gemm_big_h<EPI_OUT, false, true, MI>, 256, TP_SMEM_OF(64 * MI));
    configure_kernel(k_gemm_big_h<EPI_BIAS_CELU, true, true, MI>, 256, TP_SMEM_OF(64 * MI));
    configure_kernel(k_gemm_big_h<EPI_DERIV, true, true, MI>, 256, TP_SMEM_OF(64 * MI));
    configure_kernel(k_gemm_big_h<EPI_NONE, true, true, MI>, 256, TP_SMEM_OF(64 * MI));
}

template <typename real> static void preload(const nnp_cuda_state* s) {
    configure_kernel(k_inverse_order, 256, 0);
    configure_kernel(k_aev<real, false>, s->aevk.aev_threads, s->aevk.aev_shmem);
    configure_kernel(k_aev<real, true>, s->aevk.aev_threads, s->aevk.aev_shmem);
    configure_kernel(k_gemm<real, true, EPI_BIAS_CELU>, 256, 0);
    configure_kernel(k_gemm<real, false, EPI_DERIV>, 256, 0);
    configure_kernel(k_gemm<real, false, EPI_NONE>, 256, 0);
    configure_kernel(k_gemm_big<real, true, EPI_BIAS_CELU>, 256, 0);
    configure_kernel(k_gemm_big<real, false, EPI_DERIV>, 256, 0);
    configure_kernel(k_gemm_big<real, false, EPI_NONE>, 256, 0);
    configure_kernel(k_gemm_reduce<real, EPI_BIAS_CELU>, 256, 0);
    configure_kernel(k_gemm_reduce<real, EPI_DERIV>, 256, 0);
    configure_kernel(k_gemm_reduce<real, EPI_NONE>, 256, 0);
    configure_kernel(k_output<real>, 32 * OUTPUT_WARPS, 0);
    configure_kernel(k_aev_backward<real, false>, BWD_THREADS, s->aevk.bwd_shmem);
    configure_kernel(k_aev_backward<real, true>, AEV_THREADS, s->aevk.bwd_shmem);
    configure_kernel(k_finish, FINISH_THREADS, 0);
    configure_kernel(k_fixed_to_xyz, 128, 0);
    if constexpr (sizeof(real) == 4) { /* the float32-only kernels */
        configure_kernel(k_gemm_mma<true, EPI_BIAS_CELU>, 256, 0);
        configure_kernel(k_gemm_mma<false, EPI_DERIV>, 256, 0);
        configure_kernel(k_gemm_mma<false, EPI_NONE>, 256, 0);
        configure_kernel(k_gemm_mma<true, EPI_OUT>, 256, 0);
        configure_kernel(k_gemm_skinny<true, EPI_BIAS_CELU, SKINNY_M>, 256, 0);
        configure_kernel(k_gemm_skinny<false, EPI_DERIV, SKINNY_M>, 256, 0);
        configure_kernel(k_gemm_skinny<false, EPI_NONE, SKINNY_M>, 256, 0);
        configure_big_h<1>();
        configure_big_h<2>();
        configure_kernel(k_presplit, 256, 0);
        configure_kernel(k_gemm_big_h<EPI_BIAS_CELU, false, false, 2>, 256, TH_SMEM);
        configure_kernel(k_gemm_big_h<EPI_DERIV, false, false, 2>, 256, TH_SMEM);
        configure_kernel(k_gemm_big_h<EPI_NONE, false, false, 2>, 256, TH_SMEM);
        configure_kernel(k_gemm_big_h<EPI_BIAS_CELU, true, false, 2>, 256, TH_SMEM);
        configure_kernel(k_gemm_big_h<EPI_DERIV, true, false, 2>, 256, TH_SMEM);
        configure_kernel(k_gemm_big_h<EPI_NONE, true, false, 2>, 256, TH_SMEM);
        configure_kernel(k_gemm_big_h<EPI_OUT, false, false, 2>, 256, TH_SMEM);
        configure_kernel(k_output_rows, 256, 0);
    }
}

template <typename real>
static AevParams<real> aev_params(const nnp_model* m, const nnp_aev_layout& L) {
    const nnp_ani* ani = nnp_ani_of(m);
    AevParams<real> P;
    memset(&P, 0, sizeof P);
    const nnp_aev_params* p = &ani->aev;
    P.Rcr = (real)p->Rcr, P.Rca = (real)p->Rca;
    P.nEtaR = p->nEtaR, P.nShfR = p->nShfR, P.nEtaA = p->nEtaA, P.nZeta = p->nZeta, P.nShfA = p->nShfA, P.nShfZ = p->nShfZ;
    for (int k = 0; k < p->nEtaR; k++) P.EtaR[k] = (real)p->EtaR[k];
    for (int k = 0; k < p->nShfR; k++) P.ShfR[k] = (real)p->ShfR[k];
    for (int k = 0; k < p->nEtaA; k++) P.EtaA[k] = (real)p->EtaA[k];
    for (int k = 0; k < p->nZeta; k++) P.Zeta[k] = (real)p->Zeta[k];
    for (int k = 0; k < p->nShfA; k++) P.ShfA[k] = (real)p->ShfA[k];
    for (int k = 0; k < p->nShfZ; k++) P.cosShfZ[k] = (real)cos(p->ShfZ[k]), P.sinShfZ[k] = (real)sin(p->ShfZ[k]);
    P.radial_sub = ani->radial_sub, P.angular_sub = ani->angular_sub;
    P.radial_length = ani->radial_length, P.aev_length = ani->aev_length;
    for (int a = 0; a < m->n_elements; a++)
        for (int b = 0; b < m->n_elements; b++) P.pair_index[a * NNP_MAX_ELEMENTS + b] = ani->pair_index[a][b];
    P.angular0 = L.angular0;
    for (int a = 0; a < NNP_MAX_ELEMENTS; a++) P.radial_at[a] = a < m->n_elements ? L.radial_at[a] : -1;
    for (int p = 0; p < NNP_MAX_PAIRS; p++) P.angular_at[p] = p < (ani->aev_length - ani->radial_length) / ani->angular_sub ? L.angular_at[p] : -1;
    return P;
}

/* What the steps of build_state share: the host copies made on the way (freed by its end). */
template <typename real> struct Build {
    nnp_plan* plan;
    const nnp_model* m;
    const nnp_ani* ani; /* m's parameters */
    nnp_cuda_state* s;
    int E, M, m0; /* elements, members evaluated, first member */
    nnp_aev_layout layout;
    int* row_atom;
    /* the weights in `real` (pack_weights): offsets per element, layer and member */
    real* w;
    size_t w_total;
    size_t w_offset[NNP_MAX_ELEMENTS][NNP_MAX_LAYERS + 1], b_offset[NNP_MAX_ELEMENTS][NNP_MAX_LAYERS + 1];
    size_t wh_offset[NNP_MAX_ELEMENTS][NNP_MAX_LAYERS][NNP_MAX_MEMBERS], bh_offset[NNP_MAX_ELEMENTS][NNP_MAX_LAYERS][NNP_MAX_MEMBERS];
    /* the activations: element block of hidden layer h (reals), and each layer's size */
    size_t y_offset[NNP_MAX_LAYERS][NNP_MAX_ELEMENTS], ysize[NNP_MAX_LAYERS];
    GemmJob<real>* jobs; /* forward launches, then backward */
    size_t nj;
    size_t* partial_at;  /* each job's split-K workspace offset, or (size_t)-1 */
    int4* defer_rows;
    uint4* w16;
    size_t w16_count;
    OutputJob<real> ojobs[NNP_MAX_ELEMENTS];
    AevParams<real> P;
};

static nnp_status device_alloc(void** ptr, size_t bytes, const char* what) {
    if (cudaMalloc(ptr, bytes > 0 ? bytes : 16) != cudaSuccess)
        return nnp_fail(NNP_ERR_MEMORY, "cannot allocate %zu bytes of GPU memory (%s)", bytes, what);
    return NNP_OK;
}
#define ALLOC(ptr, bytes)                                                       \
    do {                                                                        \
        nnp_status st_ = device_alloc((void**)&(ptr), (bytes), #ptr);           \
        if (st_ != NNP_OK) return st_;                                          \
    } while (0)

/* The network shapes the kernels support: the same layer count everywhere (>= 2), the same widths
   for all members of an element. */
template <typename real> static nnp_status check_networks(Build<real>& b) {
    const nnp_model* m = b.m;
    const nnp_ani* ani = nnp_ani_of(m);
    nnp_cuda_state* s = b.s;
    if (ani->aev.nEtaR > 8 || ani->aev.nEtaA > 8 || ani->aev.nZeta > 8)
        return nnp_fail(NNP_ERR_UNSUPPORTED, "CUDA evaluation supports at most 8 EtaR, EtaA and Zeta values");
    s->n_hidden = ani->networks[0].n_layers - 1;
    for (int i = 0; i < m->n_members * b.E; i++)
        if (ani->networks[i].n_layers != s->n_hidden + 1 || s->n_hidden < 1)
            return nnp_fail(NNP_ERR_UNSUPPORTED, "CUDA evaluation needs the same number (>= 2) of layers in every network");
    for (int e = 0; e < b.E; e++)
        for (int h = 0; h <= s->n_hidden; h++) {
            s->width[e][h] = ani->networks[e].layers[h].n_out;
            for (int mm = 0; mm < m->n_members; mm++)
                if (ani->networks[mm * b.E + e].layers[h].n_out != s->width[e][h])
                    return nnp_fail(NNP_ERR_UNSUPPORTED, "CUDA evaluation needs equal layer widths in every member");
        }
    return NNP_OK;
}

/* The stored AEV layout, the classes of prefixes, the rows and the neighbour capacity (plan.c). */
template <typename real> static nnp_status plan_rows(Build<real>& b) {
    nnp_cuda_state* s = b.s;
    if (nnp_cuda_plan_aev_layout(b.plan, &s->tuning, &b.layout) != 0) return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    s->aev_live = b.layout.length, s->aev_angular0 = b.layout.angular0, s->n_classes = b.layout.n_classes;
    s->aev_ld = (s->aev_live + PRE_CHUNK - 1) / PRE_CHUNK * PRE_CHUNK;
    b.row_atom = (int*)malloc(sizeof(int) * ((size_t)s->n_atoms + 1));
    if (b.row_atom == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    nnp_cuda_plan_rows(b.plan, &b.layout, &s->rows, b.row_atom);
    s->capacity = nnp_cuda_plan_capacity(b.plan);
    return NNP_OK;
}

/* Weights in `real`: per element, the first layer of all members stacked ([M·W0 × A] and [M·W0],
   the stored columns only); deeper hidden layers per member; the output layer stacked ([M × W_last], [M]). */
template <typename real> static nnp_status pack_weights(Build<real>& b) {
    nnp_cuda_state* s = b.s;
    const int M = b.M, L = s->n_hidden;
    size_t total = 0;
    for (int e = 0; e < b.E; e++) {
        b.w_offset[e][0] = total, total += (size_t)M * s->width[e][0] * s->aev_live;
        b.b_offset[e][0] = total, total += (size_t)M * s->width[e][0];
        for (int h = 1; h < L; h++)
            for (int mm = 0; mm < M; mm++) {
                b.wh_offset[e][h][mm] = total, total += (size_t)s->width[e][h] * s->width[e][h - 1];
                b.bh_offset[e][h][mm] = total, total += s->width[e][h];
            }
        b.w_offset[e][L] = total, total += (size_t)M * s->width[e][L - 1];
        b.b_offset[e][L] = total, total += M;
    }
    b.w_total = total;
    real* w = b.w = (real*)malloc(sizeof(real) * (total + 1));
    if (w == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    for (int e = 0; e < b.E; e++)
        for (int mm = 0; mm < M; mm++) {
            const nnp_network* net = &b.ani->networks[(b.m0 + mm) * b.E + e];
            size_t W0 = s->width[e][0], A = s->aev_live, A_model = b.ani->aev_length;
            for (size_t o = 0; o < W0; o++)
                for (size_t k = 0; k < A; k++)
                    w[b.w_offset[e][0] + mm * W0 * A + o * A + k] = (real)net->layers[0].weights[o * A_model + b.layout.live_feature[k]];
            for (size_t k = 0; k < W0; k++) w[b.b_offset[e][0] + mm * W0 + k] = (real)net->layers[0].biases[k];
            for (int h = 1; h < L; h++) {
                size_t nw = (size_t)s->width[e][h] * s->width[e][h - 1];
                for (size_t k = 0; k < nw; k++) w[b.wh_offset[e][h][mm] + k] = (real)net->layers[h].weights[k];
                for (int k = 0; k < s->width[e][h]; k++) w[b.bh_offset[e][h][mm] + k] = (real)net->layers[h].biases[k];
            }
            int WL = s->width[e][L - 1];
            for (int k = 0; k < WL; k++) w[b.w_offset[e][L] + mm * WL + k] = (real)net->layers[L].weights[k];
            w[b.b_offset[e][L] + mm] = (real)net->layers[L].biases[0];
        }
    /* Activations: per hidden layer, element blocks of rows × M·width. */
    for (int h = 0; h < L; h++) {
        b.ysize[h] = 0;
        for (int e = 0; e < b.E; e++) {
            b.y_offset[h][e] = b.ysize[h];
            b.ysize[h] += (size_t)s->rows.elem_rows[e] * M * s->width[e][h];
        }
    }
    return NNP_OK;
}

/* The device buffers whose sizes the atoms and the layout fix. */
template <typename real> static nnp_status allocate_buffers(Build<real>& b) {
    nnp_cuda_state* s = b.s;
    const size_t n = s->n_atoms, A = s->aev_live, rs = sizeof(real), cap = s->capacity;
    ALLOC(s->row_info, sizeof(int4) * n);
    ALLOC(s->batch_entry, sizeof(int4) * n);
    ALLOC(s->identity, sizeof(int) * n);
    ALLOC(s->batch_start, sizeof(int) * (s->n_batches + 1));
    ALLOC(s->batch_atoms, sizeof(int) * n);
    ALLOC(s->row_atom, sizeof(int) * n);
    ALLOC(s->index_of, sizeof(int) * (s->base.n_particles > 0 ? s->base.n_particles : 1));
    ALLOC(s->force_index, sizeof(int) * n);
    ALLOC(s->count, sizeof(int2) * n);
    ALLOC(s->nbr_info, sizeof(int2) * n * cap);
    ALLOC(s->nbr_ang, sizeof(int) * n * cap);
    ALLOC(s->nbr_cut, 4 * rs * n * cap);
    ALLOC(s->flags, sizeof(FLAG_CLEAR));
    ALLOC(s->nbr_vec, 4 * rs * n * cap);
    ALLOC(s->aev, rs * n * s->aev_ld);
    if (cudaMemset(s->aev, 0, rs * n * s->aev_ld) != cudaSuccess) return nnp_fail(NNP_ERR_CUDA, "clearing GPU memory failed");
    ALLOC(s->daev, rs * n * A);
    ALLOC(s->weights, rs * b.w_total);
    for (int h = 0; h < s->n_hidden; h++) {
        ALLOC(s->Y[h], rs * b.ysize[h]);
        ALLOC(s->D[h], rs * b.ysize[h]);
    }
    ALLOC(s->atom_energy, sizeof(double) * n);
    ALLOC(s->self_energy, sizeof(double) * n);
    ALLOC(s->base.batch_energy, sizeof(double) * (s->n_batches + 1));
    ALLOC(s->total, sizeof(double));
    ALLOC(s->fixed, sizeof(unsigned long long) * 3 * n);
    if (cudaHostAlloc((void**)&s->host_flags, sizeof(FLAG_CLEAR), cudaHostAllocMapped) != cudaSuccess ||
        cudaHostGetDevicePointer((void**)&s->host_flags_dev, s->host_flags, 0) != cudaSuccess)
        return nnp_fail(NNP_ERR_MEMORY, "cannot allocate mapped pinned host memory");
    return NNP_OK;
}

/* GEMM job tables: forward h (h = 0: per element and class, all members stacked; h >= 1: per element
   and member) and backward h (h >= 1: D[h-1] = (D[h] · W_h) ⊙ celu'(Y[h-1]); h = 0: dE/dAEV per
   element and class). Grids in 64-wide tiles, z = the launch's job count (before split-K). */
template <typename real> static nnp_status make_gemm_jobs(Build<real>& b) {
    nnp_cuda_state* s = b.s;
    const nnp_rows& R = s->rows;
    const int M = b.M;
    const size_t A = s->aev_live;
    GemmJob<real>* jobs = b.jobs =
        (GemmJob<real>*)calloc((size_t)2 * NNP_MAX_LAYERS * b.E * M + (size_t)2 * b.E * NNP_CUDA_MAX_CLASSES + 1, sizeof(GemmJob<real>));
    if (jobs == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    size_t nj = 0;
    real* W = (real*)s->weights;
    for (int h = 0; h < s->n_hidden; h++) {
        s->fwd[h].job0 = nj;
        int gx = 0, gy = 0, group = -1; /* group: the element's output job (elements present, in order) */
        for (int e = 0; e < b.E; e++) {
            int r = R.elem_rows[e];
            if (r == 0) continue;
            group++;
            int W1 = s->width[e][h];
            real* Yh = (real*)s->Y[h] + b.y_offset[h][e];
            if (h == 0) { /* one job per class: its rows' prefix of the stored AEV */
                for (int c = 0; c < s->n_classes; c++) {
                    const int rc = R.class_rows[e][c], off = R.class_row0[e][c] - R.elem_row0[e];
                    if (rc == 0) continue;
                    GemmJob<real> j = {(real*)s->aev + (size_t)R.class_row0[e][c] * s->aev_ld, W + b.w_offset[e][0], Yh + (size_t)off * M * W1,
                                       W + b.b_offset[e][0], NULL, rc, M * W1, b.layout.class_len[c], s->aev_ld, (int)A, M * W1, 0};
                    jobs[nj++] = j;
                }
                gx = max(gx, (M * W1 + GEMM_TILE - 1) / GEMM_TILE);
            } else {
                int W0 = s->width[e][h - 1];
                real* Yp = (real*)s->Y[h - 1] + b.y_offset[h - 1][e];
                for (int mm = 0; mm < M; mm++) {
                    GemmJob<real> j = {Yp + mm * W0, W + b.wh_offset[e][h][mm], Yh + mm * W1, W + b.bh_offset[e][h][mm],
                                       NULL, r, W1, W0, M * W0, W0, M * W1, 0};
                    j.group = group, j.member = mm; /* used by the fused output layer (last layer) */
                    jobs[nj++] = j;
                }
                gx = max(gx, (W1 + GEMM_TILE - 1) / GEMM_TILE);
            }
            gy = max(gy, (r + GEMM_TILE - 1) / GEMM_TILE);
        }
        s->fwd[h].jobs = (int)(nj - s->fwd[h].job0);
        s->fwd[h].grid = dim3(gx, gy, s->fwd[h].jobs);
    }
    for (int h = s->n_hidden - 1; h >= 0; h--) {
        s->bwd[h].job0 = nj;
        int gx = 0, gy = 0;
        for (int e = 0; e < b.E; e++) {
            int r = R.elem_rows[e];
            if (r == 0) continue;
            int W1 = s->width[e][h];
            real* Dh = (real*)s->D[h] + b.y_offset[h][e];
            if (h == 0) { /* one job per class: dE/dAEV over its rows' prefix */
                for (int c = 0; c < s->n_classes; c++) {
                    const int rc = R.class_rows[e][c], off = R.class_row0[e][c] - R.elem_row0[e];
                    if (rc == 0) continue;
                    GemmJob<real> j = {Dh + (size_t)off * M * W1, W + b.w_offset[e][0], (real*)s->daev + (size_t)R.class_row0[e][c] * A,
                                       NULL, NULL, rc, b.layout.class_len[c], M * W1, M * W1, (int)A, (int)A, 0};
                    jobs[nj++] = j;
                    gx = max(gx, (b.layout.class_len[c] + GEMM_TILE - 1) / GEMM_TILE);
                }
            } else {
                int W0 = s->width[e][h - 1];
                real* Dp = (real*)s->D[h - 1] + b.y_offset[h - 1][e];
                real* Yp = (real*)s->Y[h - 1] + b.y_offset[h - 1][e];
                for (int mm = 0; mm < M; mm++) {
                    GemmJob<real> j = {Dh + mm * W1, W + b.wh_offset[e][h][mm], Dp + mm * W0, NULL, Yp + mm * W0,
                                       r, W0, W1, M * W1, W0, M * W0, M * W0};
                    jobs[nj++] = j;
                }
                gx = max(gx, (W0 + GEMM_TILE - 1) / GEMM_TILE);
            }
            gy = max(gy, (r + GEMM_TILE - 1) / GEMM_TILE);
        }
        s->bwd[h].jobs = (int)(nj - s->bwd[h].job0);
        s->bwd[h].grid = dim3(gx, gy, s->bwd[h].jobs);
    }
    b.nj = nj;
    return NNP_OK;
}

/* Each launch's split-K and kernel (nnp_cuda_plan_gemm), the split-K workspace and tile counters,
   and the thread-block clusters of k_gemm_mma's parts where the GPU launches clusters. */
template <typename real> static nnp_status plan_gemm_launches(Build<real>& b, const nnp_cuda_device& dev) {
    nnp_cuda_state* s = b.s;
    size_t partial_size = 0, n_counters = 1;
    b.partial_at = (size_t*)malloc(sizeof(size_t) * (b.nj + 1));
    if (b.partial_at == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    for (size_t j = 0; j < b.nj; j++) b.partial_at[j] = (size_t)-1;
    const int cluster = dev.clusters && s->tuning.cluster_split_k;
    for (int pass = 0; pass < 2; pass++)
        for (int h = 0; h < s->n_hidden; h++) {
            GemmLaunch& g = (pass ? s->bwd : s->fwd)[h];
            nnp_gemm_shape shape = {g.jobs, 0, 0, 0, 1, sizeof(real) == 4};
            for (int j = 0; j < g.jobs; j++) {
                const GemmJob<real>& job = b.jobs[g.job0 + j];
                shape.aligned &= (size_t)job.A % 16 == 0 && (size_t)job.B % 16 == 0 && job.lda % 4 == 0 && job.ldb % 4 == 0 &&
                                 job.k % 4 == 0 && job.n % 4 == 0 && (size_t)job.C % 8 == 0 && job.ldc % 2 == 0 &&
                                 (job.aux == NULL || ((size_t)job.aux % 8 == 0 && job.ldaux % 2 == 0)) &&
                                 (job.bias == NULL || (size_t)job.bias % 8 == 0);
                shape.max_m = max(shape.max_m, job.m);
                shape.max_k = max(shape.max_k, job.k);
                shape.max_mn = max(shape.max_mn, job.m * job.n);
            }
            const nnp_gemm_choice c = nnp_cuda_plan_gemm(&s->tuning, &shape);
            g.kernel = c.kernel, g.ksplit = c.ksplit, g.tile_rows = c.tile_rows, g.max_mn = shape.max_mn;
            size_t offset = 0;
            for (int j = 0; g.ksplit > 1 && j < g.jobs; j++) {
                b.partial_at[g.job0 + j] = offset;
                offset += (size_t)g.ksplit * b.jobs[g.job0 + j].m * b.jobs[g.job0 + j].n;
            }
            partial_size = max(partial_size, offset);
            g.grid.z = g.jobs * g.ksplit;
            n_counters = max(n_counters, (size_t)g.jobs * g.grid.x * g.grid.y);
            g.cluster_z = g.kernel == NNP_GEMM_MMA && cluster && g.ksplit > 1 && g.ksplit <= 8 ? g.ksplit : 1;
        }
    ALLOC(s->partial, sizeof(real) * partial_size);
    ALLOC(s->counters, sizeof(int) * n_counters);
    if (cudaMemset(s->counters, 0, sizeof(int) * n_counters) != cudaSuccess) return nnp_fail(NNP_ERR_CUDA, "clearing GPU memory failed");
    for (int pass = 0; pass < 2; pass++)
        for (int h = 0; h < s->n_hidden; h++) (pass ? s->bwd : s->fwd)[h].counters = s->counters;
    for (size_t j = 0; j < b.nj; j++)
        if (b.partial_at[j] != (size_t)-1) b.jobs[j].partial = (real*)s->partial + b.partial_at[j];
    return NNP_OK;
}

/* Presplit activations (tuning presplit; see k_presplit): each launch on k_gemm_big_h (split over k
   or not: a part's k begins at a multiple of 32, a chunk) whose jobs read A in whole chunks of 32 (row stride and first column multiples of 32; k a
   multiple of 32, or A the AEV, whose columns past a class's prefix and past aev_live are zero) reads
   it from one of two buffers of FP16 pairs taken in turn. The launch that produces A writes it there
   itself where it is k_gemm_big_h without split-K with whole chunks of C (ldc, first column and n
   multiples of 32): the forward's hidden layers (EPI_BIAS_CELU), the fused output layer's delta and
   the backward's EPI_DERIV (only presplit: C = NULL); else k_presplit splits A's buffer just before
   the launch. (The forward's hidden outputs stay float32 too: the backward's celu' reads them.) */
template <typename real> static nnp_status plan_presplit(Build<real>& b) {
    nnp_cuda_state* s = b.s;
    const int L = s->n_hidden;
    int turn = 0, buffer[2][NNP_MAX_LAYERS]; /* which of the two buffers each launch reads */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < L; i++) {
            const int h = pass ? L - 1 - i : i; /* in launch order */
            GemmLaunch& g = (pass ? s->bwd : s->fwd)[h];
            g.presplit = 0, g.split_by_producer = 0;
            if (sizeof(real) != 4 || !s->tuning.presplit || g.kernel != NNP_GEMM_BIG_H) continue;
            const real* X = pass ? (const real*)s->D[h] : h == 0 ? (const real*)s->aev : (const real*)s->Y[h - 1];
            const size_t size = pass ? b.ysize[h] : h == 0 ? (size_t)s->n_atoms * s->aev_ld : b.ysize[h - 1];
            bool ok = size % PRE_CHUNK == 0 && size / PRE_CHUNK < (size_t)INT_MAX;
            for (int j = 0; ok && j < g.jobs; j++) {
                const GemmJob<real>& x = b.jobs[g.job0 + j];
                ok = x.lda % PRE_CHUNK == 0 && (size_t)(x.A - X) % PRE_CHUNK == 0 && (x.k % PRE_CHUNK == 0 || X == (const real*)s->aev);
            }
            if (!ok) continue;
            g.presplit = 1, g.split_src = (const float*)X, g.split_chunks = (int)(size / PRE_CHUNK);
            buffer[pass][h] = turn;
            turn ^= 1;
        }
    /* the producers: forward h - 1 for forward h; the fused output for the last backward; backward
       h + 1 for backward h */
    auto whole_chunks = [&](const GemmLaunch& p, const real* X) {
        bool ok = p.kernel == NNP_GEMM_BIG_H && p.ksplit == 1;
        for (int j = 0; ok && j < p.jobs; j++) {
            const GemmJob<real>& x = b.jobs[p.job0 + j];
            ok = x.ldc % PRE_CHUNK == 0 && x.n % PRE_CHUNK == 0 && (size_t)(x.C - X) % PRE_CHUNK == 0;
        }
        return ok;
    };
    for (int pass = 0; pass < 2; pass++)
        for (int h = 0; h < L; h++) {
            GemmLaunch& g = (pass ? s->bwd : s->fwd)[h];
            if (!g.presplit || (!pass && h == 0)) continue;
            const real* X = (const real*)g.split_src;
            if (pass && h == L - 1) { /* delta of the output layer inside the last forward */
                if (!s->fuse_output || s->fwd[L - 1].kernel != NNP_GEMM_BIG_H) continue;
                bool ok = true;
                for (int e = 0; e < s->n_out_jobs; e++) {
                    const OutputJob<real>& o = b.ojobs[e];
                    ok &= o.ldy % PRE_CHUNK == 0 && o.width % PRE_CHUNK == 0 && (size_t)(o.delta - X) % PRE_CHUNK == 0;
                }
                g.split_by_producer = ok;
                continue;
            }
            g.split_by_producer = whole_chunks(pass ? s->bwd[h + 1] : s->fwd[h - 1], X);
        }
    size_t most = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int h = 0; h < L; h++) {
            const GemmLaunch& g = (pass ? s->bwd : s->fwd)[h];
            if (g.presplit) most = max(most, (size_t)g.split_chunks);
        }
    for (int k = 0; k < 2 && most > 0; k++) {
        ALLOC(s->split_p[k], sizeof(uint4) * 8 * most);
        ALLOC(s->split_inv[k], sizeof(float) * most);
    }
    for (int pass = 0; pass < 2; pass++)
        for (int h = 0; h < L; h++) {
            GemmLaunch& g = (pass ? s->bwd : s->fwd)[h];
            if (!g.presplit) continue;
            g.split_p = s->split_p[buffer[pass][h]], g.split_inv = s->split_inv[buffer[pass][h]];
            const real* X = (const real*)g.split_src;
            for (int j = 0; j < g.jobs; j++) {
                GemmJob<real>& x = b.jobs[g.job0 + j];
                const size_t c = (size_t)(x.A - X) / PRE_CHUNK;
                x.Ap = g.split_p + 8 * c, x.As = g.split_inv + c, x.ldp = x.lda / 4, x.lds = x.lda / PRE_CHUNK;
            }
            if (!g.split_by_producer) continue;
            if (pass && h == L - 1) {
                for (int e = 0; e < s->n_out_jobs; e++) {
                    OutputJob<real>& o = b.ojobs[e];
                    const size_t c = (size_t)(o.delta - X) / PRE_CHUNK;
                    o.delta_p = g.split_p + 8 * c, o.delta_s = g.split_inv + c, o.ldp = o.ldy / 4, o.lds = o.ldy / PRE_CHUNK;
                }
                continue;
            }
            const GemmLaunch& p = pass ? s->bwd[h + 1] : s->fwd[h - 1];
            for (int j = 0; j < p.jobs; j++) {
                GemmJob<real>& x = b.jobs[p.job0 + j];
                const size_t c = (size_t)(x.C - X) / PRE_CHUNK;
                x.Cp = g.split_p + 8 * c, x.Cs = g.split_inv + c, x.ldcp = x.ldc / 4, x.ldcs = x.ldc / PRE_CHUNK;
                if (pass) x.C = NULL; /* EPI_DERIV: the pairs only */
            }
        }
    return NNP_OK;
}

/* The AEV kernels' shapes (nnp_cuda_plan_aev_kernels) and whether launches are programmatic. */
template <typename real> static void plan_aev_kernels(Build<real>& b, const nnp_cuda_device& dev) {
    nnp_cuda_state* s = b.s;
    const nnp_aev_params& a = b.ani->aev;
    nnp_aev_kernel_input in = {s->n_atoms, s->capacity, s->aev_live, s->aev_angular0, b.ani->angular_sub, a.nShfZ, sizeof(real),
                               sizeof(AevParams<real>) + 1024, a.nZeta * a.nShfZ + a.nEtaA * a.nShfA};
    nnp_cuda_plan_aev_kernels(&s->tuning, &dev, &in, &s->aevk);
    s->pdl = dev.major >= 9 && s->tuning.pdl;
}

/* The last backward GEMM's split-K parts added by the split AEV backward itself (DeferredSum) where
   that GEMM runs on the few-rows kernels: its launch gets no tile counters, and each row of dE/dAEV
   the place of its parts. */
template <typename real> static nnp_status plan_deferred_sum(Build<real>& b) {
    nnp_cuda_state* s = b.s;
    const GemmLaunch& g = s->bwd[0];
    s->bwd_defer = s->tuning.defer_split_k && s->aevk.bwd_slices > 1 && g.ksplit > 1 &&
                   (g.kernel == NNP_GEMM_MMA || g.kernel == NNP_GEMM_FEW_ROWS);
    if (s->bwd_defer) {
        s->bwd[0].counters = NULL;
        b.defer_rows = (int4*)calloc((size_t)s->n_atoms + 1, sizeof(int4));
        if (b.defer_rows == NULL) return nnp_fail(NNP_ERR_MEMORY, "cannot allocate the deferred split-K table");
        for (int j = 0; j < g.jobs; j++) {
            const GemmJob<real>& job = b.jobs[g.job0 + j];
            const size_t row0 = (size_t)(job.C - (real*)s->daev) / s->aev_live;
            for (int r = 0; r < job.m; r++) b.defer_rows[row0 + r] = make_int4((int)b.partial_at[g.job0 + j], job.m * job.n, job.n, r);
        }
    }
    ALLOC(s->defer_rows, sizeof(int4) * (s->bwd_defer ? s->n_atoms : 1));
    return NNP_OK;
}

/* The weights of every launch that runs on k_gemm_mma or k_gemm_big_h split once into FP16 pairs
   for the mma's operand order: per weight matrix, column n and 4 k from 4q, one uint4 (high parts of
   k 4q, 4q+1 | of 4q+2, 4q+3 | the low parts likewise), scaled by the power of two that brings its
   largest magnitude below 2^14 (fp16_scale); the kernels multiply their sums by wscale, the inverse.
   Jobs that use the same matrix (the first layer's classes of prefixes use its first k columns)
   share one split, of their largest k: columns past a job's k meet zeros of its activations. Columns
   past the largest k are zero. */
template <typename real> static nnp_status split_fp16_weights(Build<real>& b) {
    nnp_cuda_state* s = b.s;
    size_t* w16_at = (size_t*)calloc(b.nj + 1, sizeof(size_t)); /* 1 + the offset of a matrix's split; 0: none */
    int* owner = (int*)calloc(b.nj + 1, sizeof(int));           /* the first job of the same matrix, or -1 */
    int* kmax = (int*)calloc(b.nj + 1, sizeof(int));
    if (w16_at == NULL || owner == NULL || kmax == NULL) {
        free(w16_at), free(owner), free(kmax);
        return nnp_fail(NNP_ERR_MEMORY, "cannot allocate the FP16 weight table");
    }
    const size_t fwd_end = s->bwd[s->n_hidden - 1].job0; /* forward jobs come first: B is [n × k] */
    for (size_t j = 0; j < b.nj; j++) owner[j] = -1;
    for (int pass = 0; pass < 2; pass++)
        for (int h = 0; h < s->n_hidden; h++) {
            const GemmLaunch& g = (pass ? s->bwd : s->fwd)[h];
            if (g.kernel != NNP_GEMM_MMA && g.kernel != NNP_GEMM_BIG_H) continue;
            for (int j = (int)g.job0; j < (int)g.job0 + g.jobs; j++) {
                const GemmJob<real>& x = b.jobs[j];
                owner[j] = j;
                for (int i = 0; i < j; i++) /* a few hundred jobs at most */
                    if (owner[i] == i && b.jobs[i].B == x.B && b.jobs[i].ldb == x.ldb && b.jobs[i].n == x.n &&
                        ((size_t)i < fwd_end) == ((size_t)j < fwd_end)) {
                        owner[j] = i;
                        break;
                    }
                kmax[owner[j]] = max(kmax[owner[j]], x.k);
            }
        }
    size_t count = 0;
    for (size_t j = 0; j < b.nj; j++)
        if (owner[j] == (int)j) {
            w16_at[j] = count + 1;
            count += (size_t)b.jobs[j].n * ((kmax[j] + 15) / 16 * 4);
        }
    b.w16_count = count;
    nnp_status st = device_alloc(&s->w16, sizeof(uint4) * (count + 1), "s->w16");
    if (st == NNP_OK && count > 0 && (b.w16 = (uint4*)malloc(sizeof(uint4) * count)) == NULL)
        st = nnp_fail(NNP_ERR_MEMORY, "cannot allocate the FP16 weights");
    const real* W = (const real*)s->weights;
    for (size_t j = 0; st == NNP_OK && b.w16 != NULL && j < b.nj; j++) {
        if (owner[j] != (int)j) continue;
        GemmJob<real>& g = b.jobs[j];
        const bool trans = j < fwd_end;
        const real* hb = b.w + (g.B - W);
        const int k = kmax[j], ldq = (k + 15) / 16 * 4;
        auto at = [&](int col, int kk) { return kk < k ? (float)(trans ? hb[(size_t)col * g.ldb + kk] : hb[(size_t)kk * g.ldb + col]) : 0.f; };
        float mx = 0.f;
        for (int col = 0; col < g.n; col++)
            for (int kk = 0; kk < k; kk++) mx = fmaxf(mx, fabsf(at(col, kk)));
        const float sc = fp16_scale(mx);
        uint4* dst = b.w16 + (w16_at[j] - 1);
        for (int col = 0; col < g.n; col++)
            for (int q = 0; q < ldq; q++) {
                uint4 v;
                fp16_split(at(col, 4 * q) * sc, at(col, 4 * q + 1) * sc, v.x, v.z);
                fp16_split(at(col, 4 * q + 2) * sc, at(col, 4 * q + 3) * sc, v.y, v.w);
                dst[(size_t)col * ldq + q] = v;
            }
        g.wscale = fp16_inverse_scale(sc);
    }
    for (size_t j = 0; st == NNP_OK && j < b.nj; j++) {
        if (owner[j] < 0) continue;
        const int o = owner[j];
        GemmJob<real>& g = b.jobs[j];
        g.B16 = (const uint4*)s->w16 + (w16_at[o] - 1);
        g.ldq = (kmax[o] + 15) / 16 * 4;
        g.wscale = b.jobs[o].wscale;
    }
    free(w16_at), free(owner), free(kmax);
    return st;
}

/* Output layer jobs, one per element present, and whether the output layer runs inside the last
   hidden layer's forward (where that runs without split-K on k_gemm_mma, one molecule, or on
   k_gemm_big_h, many rows; tuning fuse_output). */
template <typename real> static nnp_status make_output_jobs(Build<real>& b) {
    nnp_cuda_state* s = b.s;
    const int L = s->n_hidden - 1;
    real* W = (real*)s->weights;
    s->n_out_jobs = 0;
    for (int e = 0; e < b.E; e++) {
        int r = s->rows.elem_rows[e];
        if (r == 0) continue;
        int WL = s->width[e][L];
        OutputJob<real> o = {(real*)s->Y[L] + b.y_offset[L][e], W + b.w_offset[e][s->n_hidden], W + b.b_offset[e][s->n_hidden],
                             (real*)s->D[L] + b.y_offset[L][e], 0, b.M * WL, WL, r, 0};
        o.row0 = s->rows.elem_row0[e];
        b.ojobs[s->n_out_jobs++] = o;
    }
    ALLOC(s->out_jobs, sizeof(OutputJob<real>) * (s->n_out_jobs + 1));
    const GemmLaunch& g = s->fwd[L];
    s->fuse_output = s->tuning.fuse_output && L >= 1 && g.ksplit == 1 && (g.kernel == NNP_GEMM_MMA || g.kernel == NNP_GEMM_BIG_H);
    s->out_rows = 16; /* k_gemm_mma's tile; k_gemm_big_h: the most rows of an element */
    for (int e = 0; s->fuse_output && g.kernel == NNP_GEMM_BIG_H && e < b.E; e++) s->out_rows = max(s->out_rows, s->rows.elem_rows[e]);
    const size_t fused = s->fuse_output ? (size_t)g.jobs * g.grid.x * s->out_rows : 1;
    ALLOC(s->out_partial, sizeof(float) * fused);
    return NNP_OK;
}

/* Copies the plan's tables, the weights and the job tables to the GPU. */
template <typename real> static nnp_status upload(Build<real>& b) {
    nnp_cuda_state* s = b.s;
    nnp_plan* plan = b.plan;
    const int n = s->n_atoms;
    cudaError_t err = cudaSuccess;
    int4* row_info = (int4*)malloc(sizeof(int4) * (n + 1));
    int4* batch_entry = (int4*)malloc(sizeof(int4) * (n + 1));
    int* identity = (int*)malloc(sizeof(int) * (n + 1));
    double* self = (double*)malloc(sizeof(double) * (n + 1));
    if (row_info == NULL || batch_entry == NULL || identity == NULL || self == NULL) err = cudaErrorMemoryAllocation;
    /* k_aev's search tables (FrontIn): per row (atom, its particle, its batch's range in batch order),
       per batch entry (atom, particle, element) */
    for (int r = 0; err == cudaSuccess && r < n; r++) {
        const int i = b.row_atom[r], bi = plan->batches[i];
        row_info[r] = make_int4(i, plan->particles ? plan->particles[i] : i, plan->batch_start[bi], plan->batch_start[bi + 1]);
    }
    for (int q = 0; err == cudaSuccess && q < n; q++) {
        const int j = plan->order[q];
        batch_entry[q] = make_int4(j, plan->particles ? plan->particles[j] : j, plan->elements[j], 0);
    }
    for (int i = 0; err == cudaSuccess && i < n; i++) identity[i] = i, self[i] = b.ani->self_energies[plan->elements[i]];
#define UPLOAD(dst, src, bytes) if (err == cudaSuccess && (bytes) > 0) err = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice)
    UPLOAD(s->row_info, row_info, sizeof(int4) * n);
    if (b.defer_rows != NULL) UPLOAD(s->defer_rows, b.defer_rows, sizeof(int4) * n);
    UPLOAD(s->batch_entry, batch_entry, sizeof(int4) * n);
    UPLOAD(s->identity, identity, sizeof(int) * n);
    UPLOAD(s->batch_start, plan->batch_start, sizeof(int) * (plan->n_batches + 1));
    UPLOAD(s->batch_atoms, plan->order, sizeof(int) * n);
    UPLOAD(s->row_atom, b.row_atom, sizeof(int) * n);
    UPLOAD(s->self_energy, self, sizeof(double) * n);
    UPLOAD(s->weights, b.w, sizeof(real) * b.w_total);
    UPLOAD(s->jobs, b.jobs, sizeof(GemmJob<real>) * b.nj);
    if (b.w16 != NULL) UPLOAD(s->w16, b.w16, sizeof(uint4) * b.w16_count);
    UPLOAD(s->flags, FLAG_CLEAR, sizeof(FLAG_CLEAR));
    UPLOAD(s->aev_params, &b.P, sizeof(b.P));
    UPLOAD(s->out_jobs, b.ojobs, sizeof(OutputJob<real>) * s->n_out_jobs);
#undef UPLOAD
    if (err == cudaSuccess) err = cudaMemset(s->base.batch_energy, 0, sizeof(double) * (plan->n_batches + 1));
    free(row_info), free(batch_entry), free(identity), free(self);
    if (err != cudaSuccess) return nnp_fail(NNP_ERR_CUDA, "uploading the plan to the GPU failed: %s", cudaGetErrorString(err));
    memcpy(s->host_flags, FLAG_CLEAR, sizeof(FLAG_CLEAR));
    return NNP_OK;
}

static nnp_cuda_device device_facts(void) {
    nnp_cuda_device d = {1, 48 * 1024, 0, 0};
    int device = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device);
    cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, device);
    if (cudaDeviceGetAttribute(&d.clusters, cudaDevAttrClusterLaunch, device) != cudaSuccess) d.clusters = 0;
    return d;
}

template <typename real> static nnp_status build_steps(Build<real>& b) {
    const nnp_cuda_device dev = device_facts();
    nnp_status st;
    if ((st = check_networks(b)) != NNP_OK || (st = plan_rows(b)) != NNP_OK || (st = pack_weights(b)) != NNP_OK ||
        (st = allocate_buffers(b)) != NNP_OK || (st = make_gemm_jobs(b)) != NNP_OK || (st = plan_gemm_launches(b, dev)) != NNP_OK)
        return st;
    plan_aev_kernels(b, dev);
    if ((st = plan_deferred_sum(b)) != NNP_OK || (st = split_fp16_weights(b)) != NNP_OK) return st;
    ALLOC(b.s->jobs, sizeof(GemmJob<real>) * (b.nj + 1));
    ALLOC(b.s->aev_params, sizeof(AevParams<real>));
    b.P = aev_params<real>(b.m, b.layout);
    if ((st = make_output_jobs(b)) != NNP_OK || (st = plan_presplit(b)) != NNP_OK || (st = upload(b)) != NNP_OK) return st;
    preload<real>(b.s);
    return NNP_OK;
}
#undef ALLOC

/* Builds every buffer for the plan's current atoms, member, units, precision and tuning (outside capture). */
template <typename real> static nnp_status build_state(nnp_plan* plan, nnp_cuda_state* s, int n_particles) {
    Build<real>* b = (Build<real>*)calloc(1, sizeof(Build<real>));
    if (b == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    b->plan = plan, b->m = plan->model, b->ani = nnp_ani_of(plan->model), b->s = s;
    b->E = plan->model->n_elements;
    b->M = plan->member < 0 ? plan->model->n_members : 1;
    b->m0 = plan->member < 0 ? 0 : plan->member;
    s->precision = plan->cuda_precision;
    s->n_atoms = plan->n_atoms, s->n_batches = plan->n_batches, s->base.n_particles = n_particles;
    s->units = plan->units;
    s->members = b->M;
    s->tuning = plan->cuda_tuning;
    const nnp_status st = build_steps(*b);
    nnp_aev_layout_free(&b->layout);
    free(b->row_atom), free(b->w), free(b->jobs), free(b->partial_at), free(b->defer_rows), free(b->w16);
    free(b);
    return st;
}
