/*
 * One evaluation: the plan's kernels launched in order on the caller's stream. Everything here is
 * read from the launch plan (nnp_cuda_state, made by build_state); nothing is decided, allocated,
 * copied or synchronised, so that the whole sequence can be captured into a CUDA graph.
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

/* A launch on k_gemm_big_h: with presplit activations, k_presplit first, and 64-row tiles where the
   plan chose them (middle row counts: twice the blocks, each with half the rows). */
template <int EPI, int MI> static void big_h_pre(const GemmJob<float>* jobs, const GemmLaunch& g, cudaStream_t stream, bool pdl, const OutFuse& fuse) {
    const dim3 grid(g.grid.x, MI == 1 ? g.grid.y : (g.grid.y + 1) / 2, g.grid.z);
    if (g.ksplit > 1)
        launch_k(pdl, k_gemm_big_h<EPI, true, true, MI>, grid, dim3(256), TP_SMEM_OF(64 * MI), stream, jobs, g.ksplit, g.counters, fuse);
    else
        launch_k(pdl, k_gemm_big_h<EPI, false, true, MI>, grid, dim3(256), TP_SMEM_OF(64 * MI), stream, jobs, 1, g.counters, fuse);
}
template <int EPI> static void big_h(const GemmJob<float>* jobs, const GemmLaunch& g, cudaStream_t stream, bool pdl, const OutFuse& fuse) {
    const dim3 grid(g.grid.x, (g.grid.y + 1) / 2, g.grid.z);
    if (g.presplit) {
        if (!g.split_by_producer)
            launch_k(pdl, k_presplit, dim3((g.split_chunks + 31) / 32), dim3(256), 0, stream, g.split_src, g.split_chunks, g.split_p, g.split_inv);
        if (g.tile_rows == 64) big_h_pre<EPI, 1>(jobs, g, stream, pdl, fuse);
        else big_h_pre<EPI, 2>(jobs, g, stream, pdl, fuse);
    } else if (g.ksplit > 1)
        launch_k(pdl, k_gemm_big_h<EPI, true, false, 2>, grid, dim3(256), TH_SMEM, stream, jobs, g.ksplit, g.counters, fuse);
    else
        launch_k(pdl, k_gemm_big_h<EPI, false, false, 2>, grid, dim3(256), TH_SMEM, stream, jobs, g.ksplit, g.counters, fuse);
}

/* One GEMM launch on the kernel the plan chose for it (the float32-only kernels are never chosen
   in double precision). */
template <typename real, bool TRANS_B, int EPI>
static void gemm(const GemmJob<real>* all_jobs, const GemmLaunch& g, cudaStream_t stream, bool pdl) {
    const GemmJob<real>* jobs = all_jobs + g.job0;
    if constexpr (sizeof(real) == 4) {
        const dim3 few(g.grid.x, 1, g.grid.z);
        if (g.kernel == NNP_GEMM_MMA) {
            launch_kc(pdl, g.cluster_z, k_gemm_mma<TRANS_B, EPI>, few, dim3(256), 0, stream, jobs, g.ksplit, g.counters, OutFuse());
            return;
        }
        if (g.kernel == NNP_GEMM_FEW_ROWS) {
            launch_k(pdl, k_gemm_skinny<TRANS_B, EPI, SKINNY_M>, few, dim3(256), 0, stream, jobs, g.ksplit, g.counters);
            return;
        }
    }
    const dim3 big((g.grid.x + 1) / 2, (g.grid.y + 1) / 2, g.grid.z); /* 128×128 tiles */
    if constexpr (sizeof(real) == 4)
        if (g.kernel == NNP_GEMM_BIG_H) {
            big_h<EPI>(jobs, g, stream, pdl, OutFuse());
            return;
        }
    if (g.kernel == NNP_GEMM_SPLIT_K) {
        launch_k(pdl, k_gemm<real, TRANS_B, EPI>, g.grid, dim3(256), 0, stream, jobs, g.ksplit);
        launch_k(pdl, k_gemm_reduce<real, EPI>, dim3(min(1024, (g.max_mn + 255) / 256), g.grid.z / g.ksplit), dim3(256), 0, stream,
                 jobs, g.ksplit);
        return;
    }
    launch_k(pdl, k_gemm_big<real, TRANS_B, EPI>, big, dim3(256), 0, stream, jobs);
}

template <typename real>
static nnp_status launch(nnp_plan* plan, nnp_cuda_state* s, const nnp_cuda_io* io, cudaStream_t stream, const Box<real>& box,
                         int profile) {
    typedef typename real4_of<real>::type real4;
    const nnp_model* m = plan->model;
    int n = s->n_atoms, M = s->members;
    const double to_angstrom = s->units == NNP_UNITS_NM_KJMOL ? 10.0 : 1.0;
    const double eunit = s->units == NNP_UNITS_NM_KJMOL ? NNP_HARTREE_TO_KJMOL : 1.0;
    const int with_forces = io->forces_format != NNP_FORCES_NONE;
    const AevParams<real>* P = (const AevParams<real>*)s->aev_params;
    const nnp_aev_kernels& K = s->aevk;
    size_t A = s->aev_live;
    int stage = 0;
#define MARK() \
    if (profile) cudaEventRecord(s->events[stage++], stream)
    MARK();
    /* Every kernel but the first may be a programmatic dependent launch (pdl_wait; not while the
       stages are timed); the plain force buffer is cleared before the first. */
    const bool pdl = s->pdl && !profile;
    Finish fin;
    fin.atom_energy = s->atom_energy, fin.self_energy = s->self_energy;
    fin.batch_start = s->batch_start, fin.batch_atoms = s->batch_atoms, fin.batch_energy = s->base.batch_energy;
    fin.energy = io->energy, fin.total = s->total, fin.flags = s->flags, fin.host_flags = s->host_flags_dev;
    fin.unit = eunit, fin.n_atoms = n, fin.n_batches = s->n_batches, fin.energy_is_double = io->energy_is_double;
    fin.out_jobs = (const OutputJob<float>*)s->out_jobs, fin.out_partial = NULL, fin.row_atom = s->row_atom;
    const double scale = 1.0 / M; /* the ensemble mean */
    fin.out_scale = scale, fin.n_out_jobs = s->n_out_jobs, fin.members = M, fin.out_tiles = 0, fin.out_rows = 0, fin.out_by_row = 0;
    bool finish_fused = false;
    if (n > 0 && with_forces && io->forces_format != NNP_FORCES_FIXED_POINT)
        cudaMemsetAsync(s->fixed, 0, sizeof(unsigned long long) * 3 * n, stream);
    if (n > 0) {
        if (io->sorted_particles)
            launch_k(false, k_inverse_order, dim3((s->base.n_particles + 255) / 256), dim3(256), 0, stream, io->sorted_particles,
                     s->base.n_particles, s->index_of);
        MARK();
        FrontIn<real> in;
        in.positions = io->positions, in.format = io->positions_format;
        in.index_of = io->sorted_particles ? s->index_of : NULL;
        in.row_info = s->row_info, in.batch_entry = s->batch_entry;
        NbrTables<real> T;
        T.count = s->count, T.vec = (real4*)s->nbr_vec, T.cut = (real4*)s->nbr_cut, T.info = s->nbr_info, T.ang = s->nbr_ang;
        in.force_index = s->force_index, in.T = T;
        in.flags = s->flags, in.box = box, in.to_angstrom = (real)to_angstrom, in.rc2 = (real)(nnp_ani_of(m)->aev.Rcr * nnp_ani_of(m)->aev.Rcr);
        launch_k(pdl && io->sorted_particles, K.aev_slices > 1 ? k_aev<real, true> : k_aev<real, false>, dim3(n, K.aev_slices),
                 dim3(K.aev_threads), K.aev_shmem, stream, P, s->capacity, in, (real*)s->aev, s->aev_ld, K.aev_acc_stride);
        MARK();
        GemmJob<real>* jobs = (GemmJob<real>*)s->jobs;
        /* stage timing keeps the output layer apart */
        const bool fuse_output = s->fuse_output && !profile, fuse_big = fuse_output && s->fwd[s->n_hidden - 1].kernel == NNP_GEMM_BIG_H;
        for (int h = 0; h < s->n_hidden; h++) {
            if constexpr (sizeof(real) == 4)
                if (fuse_output && h == s->n_hidden - 1) { /* the last hidden layer's forward with the output layer (EPI_OUT) */
                    const GemmLaunch& g = s->fwd[h];
                    OutFuse f;
                    f.jobs = (const OutputJob<float>*)s->out_jobs, f.partial = s->out_partial, f.scale = (float)scale;
                    f.with_forces = with_forces, f.rows = s->out_rows;
                    fin.out_partial = s->out_partial, fin.out_tiles = g.grid.x, fin.out_rows = s->out_rows, fin.out_by_row = fuse_big;
                    if (fuse_big)
                        big_h<EPI_OUT>((const GemmJob<float>*)jobs + g.job0, g, stream, pdl, f);
                    else
                        launch_k(pdl, k_gemm_mma<true, EPI_OUT>, dim3(g.grid.x, 1, g.grid.z), dim3(256), 0, stream, jobs + g.job0, 1,
                                 g.counters, f);
                    continue;
                }
            gemm<real, true, EPI_BIAS_CELU>(jobs, s->fwd[h], stream, pdl);
        }
        MARK();
        if (fuse_big && n > FINISH_SMALL) { /* the atoms' energies now, by a grid; the end of the evaluation reads them */
            launch_k(pdl, k_output_rows, dim3((n + 255) / 256), dim3(256), 0, stream, fin);
            fin.out_partial = NULL;
        } else if (!fuse_output)
            launch_k(pdl, k_output<real>, dim3(n), dim3(32 * min(M, OUTPUT_WARPS)), 0, stream, (const OutputJob<real>*)s->out_jobs,
                     s->n_out_jobs, M, (const int*)s->row_atom, scale, s->atom_energy, with_forces);
        MARK();
        if (with_forces) {
            for (int h = s->n_hidden - 1; h >= 0; h--) {
                GemmLaunch g = s->bwd[h];
                if (h == s->n_hidden - 1 && !fuse_big) g.split_by_producer = 0; /* k_output wrote delta as float32 */
                if (h > 0) gemm<real, false, EPI_DERIV>(jobs, g, stream, pdl);
                else gemm<real, false, EPI_NONE>(jobs, g, stream, pdl); /* no counters where deferred: DeferredSum */
            }
            MARK();
            unsigned long long* target;
            const int* findex;
            long long stride;
            double force_unit = eunit * to_angstrom;
            if (io->forces_format == NNP_FORCES_FIXED_POINT) {
                target = (unsigned long long*)io->forces;
                stride = io->forces_stride;
                findex = s->force_index; /* where each atom's position came from */
            } else { /* cleared at the start */
                target = s->fixed;
                stride = n;
                findex = s->identity;
                force_unit *= PLAIN_FIXED_EXTRA;
            }
            finish_fused = K.bwd_slices > 1 && !profile; /* few atoms: the end of the evaluation in its first block */
            const DeferredSum<real> defer = {s->bwd_defer ? s->defer_rows : NULL, (const real*)s->partial, s->bwd[0].ksplit};
            if (K.bwd_slices > 1)
                launch_k(pdl, k_aev_backward<real, true>, dim3(n + finish_fused, K.bwd_slices), dim3(AEV_THREADS), K.bwd_shmem,
                         stream, P, (const int*)s->row_atom, s->capacity, T, (const real*)s->daev, (int)A, findex, target, stride,
                         force_unit, fin, (int)finish_fused, defer);
            else
                launch_k(pdl, k_aev_backward<real, false>, dim3(n), dim3(BWD_THREADS), K.bwd_shmem, stream, P,
                         (const int*)s->row_atom, s->capacity, T, (const real*)s->daev, (int)A, findex, target, stride, force_unit,
                         fin, 0, DeferredSum<real>{NULL, NULL, 0});
            if (io->forces_format == NNP_FORCES_XYZ_DOUBLE)
                launch_k(pdl, k_fixed_to_xyz, dim3((n + 127) / 128), dim3(128), 0, stream, (const unsigned long long*)s->fixed, n,
                         (double*)io->forces);
            MARK();
        }
    }
    while (profile && stage < NNP_CUDA_STAGES) MARK(); /* stages skipped (no atoms or no forces) take no time */
    if (!finish_fused) launch_k(pdl && n > 0, k_finish, dim3(1), dim3(FINISH_THREADS), 0, stream, fin);
    MARK();
#undef MARK
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return nnp_fail(NNP_ERR_CUDA, "launching the CUDA evaluation failed: %s", cudaGetErrorString(err));
    return NNP_OK;
}
