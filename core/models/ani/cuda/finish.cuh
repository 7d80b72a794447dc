/*
 * The end of an evaluation: the output layer (k_output, or fused into k_gemm_mma: see OutFuse), the
 * per-batch energies and their total, the error flags (k_finish, or the first block of the split
 * AEV backward), and the plain forces' conversion (k_fixed_to_xyz).
 */
#pragma once

#include "gemm.cuh"

#define OUTPUT_WARPS 8
/*
 * The output layer: one block per network row (the rows of all elements in order, output job j
 * holding rows row0 .. row0 + rows - 1), one warp per member: the lanes' strided partial sums of
 * w·y and a shuffle tree, e = Σ_m scale·(w_m·y_m + b_m) added in member order; with forces the first
 * backward step delta[row, m, :] = scale · w_m ⊙ celu'(y_m).
 */
template <typename real>
__global__ void __launch_bounds__(32 * OUTPUT_WARPS) k_output(const OutputJob<real>* __restrict__ jobs, int n_jobs, int members,
                                                              const int* __restrict__ all_row_atom, double scale,
                                                              double* __restrict__ atom_energy, int with_forces) {
    __shared__ double s_e[NNP_MAX_MEMBERS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32, global_row = blockIdx.x;
    pdl_start();
    int j = 0;
    while (j + 1 < n_jobs && jobs[j + 1].row0 <= global_row) j++;
    const OutputJob<real> job = jobs[j];
    const int row = global_row - job.row0, width = job.width;
    const real* y = job.Y + (size_t)row * job.ldy;
    for (int m = warp; m < members; m += nwarps) {
        const real* w = job.w_out + m * width;
        real partial = 0;
        for (int k = lane; k < width; k += 32) partial += w[k] * __ldcg(y + m * width + k);
        for (int off = 16; off > 0; off >>= 1) partial += __shfl_down_sync(0xffffffffu, partial, off);
        if (lane == 0) s_e[m] = scale * ((double)partial + (double)job.b_out[m]);
        if (with_forces)
            for (int k = lane; k < width; k += 32)
                job.delta[(size_t)row * job.ldy + m * width + k] = (real)scale * w[k] * celu_deriv_from_output(__ldcg(y + m * width + k));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double e = 0;
        for (int m = 0; m < members; m++) e += s_e[m];
        atom_energy[all_row_atom[global_row]] = e;
    }
}

/*
 * The end of an evaluation, in one block: per-batch energies (one warp per batch, atoms in batch
 * order, a fixed reduction tree), their total (fixed order) added to the caller's energy (float or
 * double), then the evaluation's flags. Run by k_finish, or, for few atoms, by an extra first block
 * of k_aev_backward (nothing there depends on the forces, and one launch fewer is one dependency
 * fewer in the step). The flags go to the host's mapped copy only when one is raised: a write into
 * host memory would make every step wait for it at the kernel's end, and a raised flag stays there
 * until the host has read it (check_flags).
 */
struct Finish {
    double* atom_energy;
    const double* self_energy;
    const int* batch_start;
    const int* batch_atoms;
    double* batch_energy;
    void* energy;     /* the caller's energy, or NULL */
    double* total;
    int* flags;       /* device: NaN atom, overflow, same position (cleared here) */
    int* host_flags;  /* mapped pinned memory: what the host reads at its next evaluation */
    double unit;
    int n_atoms, n_batches, energy_is_double;
    /* With the output layer fused (OutFuse; else out_partial is NULL): the atoms' energies are
       first added up here from its partial sums, per element (out_jobs) and row. */
    const OutputJob<float>* out_jobs;
    const float* out_partial;
    const int* row_atom;
    double out_scale;
    int n_out_jobs, members, out_tiles, out_rows; /* the fused launch's gridDim.x, and partial's row stride (OutFuse::rows) */
    int out_by_row; /* the partial sums' rows: of k_gemm_big_h (1: the atoms' rows in order), else of k_gemm_mma (16 per job) */
};
#define FINISH_SMALL 256 /* up to this many atoms and fused output rows: finish_small */

/* Row q of the fused output's rows: its job and its row in the job, or false past the rows. With
   out_by_row (k_gemm_big_h) the atoms' rows in order, q = out_jobs[job].row0 + row (fused_rows:
   n_atoms); else (k_gemm_mma) at most 16 rows per job, q = 16·job + row (16 · n_out_jobs). */
__device__ __forceinline__ int fused_rows(const Finish& f) { return f.out_by_row ? f.n_atoms : f.n_out_jobs * 16; }
__device__ __forceinline__ bool fused_row(const Finish& f, int q, int* job, int* row) {
    if (f.out_by_row) {
        if (q >= f.n_atoms) return false;
        int j = 0;
        while (j + 1 < f.n_out_jobs && f.out_jobs[j + 1].row0 <= q) j++;
        *job = j, *row = q - f.out_jobs[j].row0;
        return true;
    }
    *job = q / 16, *row = q % 16;
    return *job < f.n_out_jobs && *row < f.out_jobs[*job].rows;
}

/* Energy of row `row` of fused output job o: the tiles' partial sums, then the members, in order. */
__device__ __forceinline__ double fused_row_energy(const Finish& f, const OutputJob<float>& o, int job, int row) {
    const int tiles = (o.width + GEMM_TILE - 1) / GEMM_TILE;
    double e = 0;
    for (int m0 = 0; m0 < f.members; m0 += 8) { /* 8 members' loads in flight at once */
        float sum[8];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            sum[i] = 0.f;
            if (m0 + i >= f.members) continue;
            const float* p = f.out_partial + ((size_t)(job * f.members + m0 + i) * f.out_tiles) * f.out_rows + row;
#pragma unroll
            for (int x = 0; x < 4; x++)
                if (x < tiles) sum[i] += __ldcg(p + (size_t)x * f.out_rows);
            for (int x = 4; x < tiles; x++) sum[i] += __ldcg(p + (size_t)x * f.out_rows);
        }
        for (int i = 0; i < 8 && m0 + i < f.members; i++) e += f.out_scale * ((double)sum[i] + (double)o.b_out[m0 + i]);
    }
    return e;
}

/* The total of the batch energies `batch` (global or shared memory, written before a barrier), the
   caller's energy and the flags (thread 0). */
__device__ void finish_total(const Finish& f, const double* batch) {
    __shared__ double s_warp[32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
    double sum = 0;
    for (int b = threadIdx.x; b < f.n_batches; b += blockDim.x) sum += batch[b];
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, off);
    if (lane == 0) s_warp[warp] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0;
        for (int w = 0; w < nwarps; w++) total += s_warp[w];
        *f.total = total;
        if (f.energy != NULL) {
            if (f.energy_is_double) *(double*)f.energy += total;
            else *(float*)f.energy += (float)total;
        }
        int* flags = f.flags;
        volatile int* host = f.host_flags;
        const int nan_atom = flags[0], overflow = flags[1], same = flags[2];
        if (nan_atom != 0x7fffffff) host[0] = nan_atom, flags[0] = 0x7fffffff;
        if (overflow != 0) host[1] = overflow, flags[1] = 0;
        if (same != 0) host[2] = same, flags[2] = 0;
        if (!isfinite(total)) host[3] = 1;
    }
}

/* Few atoms with the output layer fused (at most FINISH_SMALL atoms and batches, empty ones
   included, and fused_rows at most blockDim.x): the batch layout and each thread's row requested before the wait, the atoms' and
   batches' energies kept in shared memory. The same sums in the same order as finish_evaluation's. */
__device__ void finish_small(const Finish& f) {
    __shared__ double s_e[FINISH_SMALL], s_batch[FINISH_SMALL]; /* atom energy + self energy; batch energies */
    __shared__ int s_start[FINISH_SMALL + 1], s_atom[FINISH_SMALL];
    const int t = threadIdx.x, warp = t / 32, lane = t % 32, nwarps = blockDim.x / 32;
    for (int b = t; b <= f.n_batches; b += blockDim.x) s_start[b] = f.batch_start[b];
    for (int q = t; q < f.n_atoms; q += blockDim.x) s_atom[q] = f.batch_atoms[q];
    OutputJob<float> o = {};
    int atom = -1, job = 0, row = 0;
    double self = 0;
    if (fused_row(f, t, &job, &row)) o = f.out_jobs[job], atom = f.row_atom[o.row0 + row], self = f.self_energy[atom];
    pdl_start();
    if (atom >= 0) {
        const double e = fused_row_energy(f, o, job, row);
        f.atom_energy[atom] = e;
        s_e[atom] = e + self;
    }
    __syncthreads();
    for (int b = warp; b < f.n_batches; b += nwarps) {
        double sum = 0;
        for (int q = s_start[b] + lane; q < s_start[b + 1]; q += 32) sum += s_e[s_atom[q]];
        for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, off);
        if (lane == 0) f.batch_energy[b] = s_batch[b] = sum * f.unit;
    }
    __syncthreads();
    finish_total(f, s_batch);
}

__device__ void finish_evaluation(const Finish& f) {
    if (f.out_partial != NULL && f.n_atoms <= FINISH_SMALL && f.n_batches <= FINISH_SMALL &&
        fused_rows(f) <= min((int)blockDim.x, FINISH_SMALL)) {
        finish_small(f);
        return;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
    pdl_start();
    if (f.out_partial != NULL) {
        for (int q = threadIdx.x; q < fused_rows(f); q += blockDim.x) {
            int job, row;
            if (!fused_row(f, q, &job, &row)) continue;
            const OutputJob<float>& o = f.out_jobs[job];
            f.atom_energy[f.row_atom[o.row0 + row]] = fused_row_energy(f, o, job, row);
        }
        __syncthreads();
    }
    for (int b = warp; b < f.n_batches; b += nwarps) {
        double sum = 0;
        for (int q = f.batch_start[b] + lane; q < f.batch_start[b + 1]; q += 32) {
            int a = f.batch_atoms[q];
            sum += f.atom_energy[a] + f.self_energy[a];
        }
        for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, off);
        if (lane == 0) f.batch_energy[b] = sum * f.unit;
    }
    __syncthreads();
    finish_total(f, f.batch_energy);
}

/* Many atoms with the output layer fused into k_gemm_big_h (out_by_row): each atom's energy from the
   partial sums, one thread per row (the same sums in the same order as finish_evaluation's). */
__global__ void k_output_rows(const Finish f) {
    pdl_start();
    const int q = blockIdx.x * blockDim.x + threadIdx.x;
    int job, row;
    if (!fused_row(f, q, &job, &row)) return;
    const OutputJob<float>& o = f.out_jobs[job];
    f.atom_energy[f.row_atom[o.row0 + row]] = fused_row_energy(f, o, job, row);
}

#define FINISH_THREADS 1024
__global__ void __launch_bounds__(FINISH_THREADS) k_finish(const Finish f) {
    finish_evaluation(f); /* waits for the earlier kernels */
}

/* Plain output: fixed-point [3][n] → n×3 doubles. The plan's own buffer uses 2^-48 steps
   (PLAIN_FIXED_EXTRA more than OpenMM's 2^-32), as Hartree/Å forces are small numbers. */
#define PLAIN_FIXED_EXTRA 65536.0
__global__ void k_fixed_to_xyz(const unsigned long long* __restrict__ fixed, int n, double* __restrict__ out) {
    pdl_start();
    int a = blockIdx.x * blockDim.x + threadIdx.x;
    if (a >= n) return;
    for (int c = 0; c < 3; c++)
        out[3 * a + c] = (double)(long long)fixed[a + (size_t)c * n] / ((double)0x100000000LL * PLAIN_FIXED_EXTRA);
}
