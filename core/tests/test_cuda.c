/*
 * The CUDA evaluation against the CPU evaluation, and captured into a CUDA graph and replayed;
 * the variants of the tuning table (core/models/ani/cuda/tuning.h) against the CPU, and bit for bit
 * against the defaults where they add the same terms in the same order.
 * Skips (exit code 77, with the reason) where no CUDA device is present.
 */
#include "../models/ani/cuda/tuning.h"
#include "test.h"

#include <cuda_runtime_api.h>

#define NMOL 6
/* Agreement with the CPU's float64 evaluation: relative energy (total and every batch) and relative
   RMS of the forces. Float32 is float32-class: the largest values measured on the H200 (2026-12-02)
   were 5.3e-10 (total), 8.3e-10 (a batch) and 3.9e-6 (forces). */
#define SINGLE_ENERGY 3e-9
#define SINGLE_FORCES 1e-5
#define DOUBLE_ENERGY 1e-13
#define DOUBLE_FORCES 1e-10
#define CUDA_OK(call)                                                                            \
    do {                                                                                         \
        cudaError_t e_ = (call);                                                                 \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

/* The tuning table every GPU plan of the comparisons below gets (the defaults unless a test says). */
static nnp_cuda_tuning tuning;
static nnp_plan* gpu_plan(nnp_model* model) {
    nnp_plan* plan = NULL;
    CHECK_OK(nnp_plan_create(model, &plan));
    CHECK_OK(nnp_plan_set_cuda_tuning_internal(plan, &tuning));
    return plan;
}

typedef struct system_t {
    int32_t n, n_batches;
    int32_t *z, *batch;
    double* pos; /* Å */
} system_t;

/* Six drug-like molecules, interleaved atom by atom, in batches 0, 2, ..., 10 (odd ones empty). */
static system_t make_system(void) {
    static const char* const files[NMOL] = {"0001", "0002", "0030", "0147", "0251", "0259"};
    molecule mols[NMOL];
    system_t s = {0, 2 * NMOL - 1, NULL, NULL, NULL};
    for (int k = 0; k < NMOL; k++) {
        char rel[64];
        snprintf(rel, sizeof rel, "molecules/druglike/drugbank-%s.xyz", files[k]);
        mols[k] = read_molecule_or_die(rel);
        s.n += mols[k].n;
    }
    s.z = malloc(sizeof(int32_t) * s.n);
    s.batch = malloc(sizeof(int32_t) * s.n);
    s.pos = malloc(sizeof(double) * 3 * s.n);
    int32_t next[NMOL] = {0};
    for (int32_t i = 0; i < s.n;)
        for (int k = 0; k < NMOL && i < s.n; k++) {
            if (next[k] == mols[k].n) continue;
            int32_t a = next[k]++;
            s.z[i] = mols[k].z[a];
            s.batch[i] = 2 * k;
            for (int c = 0; c < 3; c++) s.pos[3 * i + c] = mols[k].pos[3 * a + c]; /* overlapping in space */
            i++;
        }
    for (int k = 0; k < NMOL; k++) free_molecule(&mols[k]);
    return s;
}

/* The first `count` drug-like molecules (by number), overlapping in space, one batch each: enough
   atoms of each element to exercise the many-row GEMM path. */
static system_t make_large_system(int count) {
    system_t s = {0, 0, NULL, NULL, NULL};
    for (int k = 1; s.n_batches < count && k < 2000; k++)
        if (append_druglike(k, s.n_batches, 0, &s.n, &s.z, &s.batch, &s.pos) > 0) s.n_batches++;
    return s;
}

/* Elements the drug-like molecules lack, for the AEV's live blocks (libnnp stores only the blocks
   some batch can fill): four copies of the first molecule, one plain; one with an S and two F; one
   with a single Cl (its Cl-Cl block stays empty); one with one F. Unusual chemistry, but every
   feature is computed the same way on the CPU, the oracle. */
static system_t make_mixed_system(void) {
    system_t s = make_large_system(1);
    const int32_t n1 = s.n;
    s.z = realloc(s.z, sizeof(int32_t) * 4 * n1);
    s.batch = realloc(s.batch, sizeof(int32_t) * 4 * n1);
    s.pos = realloc(s.pos, sizeof(double) * 12 * n1);
    for (int copy = 1; copy < 4; copy++) {
        int changed_o = 0, changed_h = 0;
        for (int32_t a = 0; a < n1; a++) {
            int32_t i = copy * n1 + a, z = s.z[a];
            if (copy == 1 && z == 8 && !changed_o) z = 16, changed_o = 1;
            else if (copy == 1 && z == 1 && changed_h < 2) z = 9, changed_h++;
            else if (copy == 2 && z == 1 && !changed_h) z = 17, changed_h = 1;
            else if (copy == 3 && z == 1 && !changed_h) z = 9, changed_h = 1;
            s.z[i] = z;
            s.batch[i] = copy;
            for (int c = 0; c < 3; c++) s.pos[3 * i + c] = s.pos[3 * a + c] + 0.01 * copy * (c + 1);
        }
    }
    s.n = 4 * n1, s.n_batches = 4;
    return s;
}

/* Changes the first `count` atoms of atomic number `from` in batch `b` to `to`. */
static void mutate(system_t* s, int32_t b, int32_t from, int32_t to, int count) {
    for (int32_t i = 0; i < s->n && count > 0; i++)
        if (s->batch[i] == b && s->z[i] == from) s->z[i] = to, count--;
}

/* The GEMMs at their edges: `molecules` drug-like molecules with one H made S (in batch b_s), one F
   (b_f) and one Cl (b_cl), so that every element of ANI-2x is present, three of them with one row
   each (1-row jobs inside launches that the many- or middle-rows kernels run).
   - 40 molecules (many rows; 713 H and 451 C, so 710 and 451 rows after the changes: not multiples
     of the 128-row tiles; the AEV's 1,008 features end in the middle of a 32-k stage and of a
     64-column tile): make_edge_system(40, 3, 7, 11).
   - 10 molecules (middle rows, k_gemm_big_h split over k; 114 H rows, made 111: two 64-row tiles,
     the second not full; 816 of the AEV's 1,008 features stored): make_edge_system(10, 1, 4, 8). */
static system_t make_edge_system(int molecules, int32_t b_s, int32_t b_f, int32_t b_cl) {
    system_t s = make_large_system(molecules);
    mutate(&s, b_s, 1, 16, 1);
    mutate(&s, b_f, 1, 9, 1);
    mutate(&s, b_cl, 1, 17, 1);
    return s;
}

static double rms_relative(const double* ref, const double* x, int n) {
    double d = 0, r = 0;
    for (int i = 0; i < n; i++) d += (ref[i] - x[i]) * (ref[i] - x[i]), r += ref[i] * ref[i];
    return sqrt(d / r);
}

/* CUDA evaluation with plain arrays: positions (n×3 double, device), forces back to the host. */
static nnp_status eval_plain(nnp_plan* plan, cudaStream_t stream, double* d_pos, double* d_forces, double* d_energy,
                             double* forces, double* energy, double* batches) {
    nnp_cuda_io io = {0};
    io.stream = stream;
    io.positions = d_pos;
    io.positions_format = NNP_POSITIONS_XYZ_DOUBLE;
    io.forces = d_forces;
    io.forces_format = NNP_FORCES_XYZ_DOUBLE;
    io.energy = d_energy;
    io.energy_is_double = 1;
    CUDA_OK(cudaMemsetAsync(d_energy, 0, sizeof(double), stream));
    nnp_status st = nnp_evaluate_cuda(plan, &io);
    if (st != NNP_OK) return st;
    int n = nnp_plan_num_atoms(plan);
    CUDA_OK(cudaMemcpyAsync(forces, d_forces, sizeof(double) * 3 * n, cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaMemcpyAsync(energy, d_energy, sizeof(double), cudaMemcpyDeviceToHost, stream));
    return nnp_cuda_batch_energies(plan, stream, batches);
}

static int32_t last_classes; /* classes of the last comparison's CUDA layout */
static int32_t last_modes[64], last_launches; /* how its GEMM launches read their activations (room for 2 · NNP_MAX_LAYERS) */

/* Energy alone (no forces: the output layer's first backward step is not stored, and for one
   molecule the end of the evaluation is a kernel of its own), against the CPU. */
static void compare_energy_only(nnp_model* model, const system_t* s) {
    nnp_plan *cpu, *gpu;
    CHECK_OK(nnp_plan_create(model, &cpu));
    gpu = gpu_plan(model);
    CHECK_OK(nnp_plan_set_atoms(cpu, s->n, s->z, s->batch));
    CHECK_OK(nnp_plan_set_atoms(gpu, s->n, s->z, s->batch));
    double e_cpu, e_gpu = 0, *b_cpu = malloc(sizeof(double) * (s->n_batches + 1)), *b_gpu = malloc(sizeof(double) * (s->n_batches + 1));
    CHECK_OK(nnp_evaluate_cpu(cpu, s->pos, NULL, &e_cpu, b_cpu, NULL));
    double *d_pos, *d_energy;
    CUDA_OK(cudaMalloc((void**)&d_pos, sizeof(double) * 3 * s->n));
    CUDA_OK(cudaMalloc((void**)&d_energy, sizeof(double)));
    CUDA_OK(cudaMemcpy(d_pos, s->pos, sizeof(double) * 3 * s->n, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_energy, 0, sizeof(double)));
    nnp_cuda_io io = {0};
    io.positions = d_pos;
    io.positions_format = NNP_POSITIONS_XYZ_DOUBLE;
    io.forces_format = NNP_FORCES_NONE;
    io.energy = d_energy;
    io.energy_is_double = 1;
    CHECK_OK(nnp_evaluate_cuda(gpu, &io));
    CUDA_OK(cudaMemcpy(&e_gpu, d_energy, sizeof(double), cudaMemcpyDeviceToHost));
    CHECK_OK(nnp_cuda_batch_energies(gpu, 0, b_gpu));
    double worst = 0;
    for (int b = 0; b < s->n_batches; b++)
        if (b_cpu[b] != 0.0) worst = fmax(worst, fabs(b_gpu[b] - b_cpu[b]) / fabs(b_cpu[b]));
    printf("%d atoms, energy only: CPU %.10f GPU %.10f (rel %.2e), worst batch rel %.2e\n", s->n, e_cpu, e_gpu,
           fabs(e_gpu - e_cpu) / fabs(e_cpu), worst);
    CHECK(fabs(e_gpu - e_cpu) <= SINGLE_ENERGY * fabs(e_cpu));
    CHECK(worst <= SINGLE_ENERGY);
    free(b_cpu), free(b_gpu);
    cudaFree(d_pos), cudaFree(d_energy);
    nnp_plan_free(cpu);
    nnp_plan_free(gpu);
}

static void compare_with_cpu(nnp_model* model, const system_t* s, int32_t member, nnp_precision precision, double etol,
                             double ftol) {
    nnp_plan* cpu;
    nnp_plan* gpu;
    CHECK_OK(nnp_plan_create(model, &cpu));
    gpu = gpu_plan(model);
    CHECK_OK(nnp_plan_set_atoms(cpu, s->n, s->z, s->batch));
    CHECK_OK(nnp_plan_set_atoms(gpu, s->n, s->z, s->batch));
    CHECK_OK(nnp_plan_set_member(cpu, member));
    CHECK_OK(nnp_plan_set_member(gpu, member));
    CHECK_OK(nnp_plan_set_cuda_precision(gpu, precision));
    double e_cpu, e_gpu, *f_cpu = malloc(sizeof(double) * 3 * s->n), *f_gpu = malloc(sizeof(double) * 3 * s->n);
    double* b_cpu = malloc(sizeof(double) * (s->n_batches + 1));
    double* b_gpu = malloc(sizeof(double) * (s->n_batches + 1));
    CHECK_OK(nnp_evaluate_cpu(cpu, s->pos, NULL, &e_cpu, b_cpu, f_cpu));
    double *d_pos, *d_forces, *d_energy;
    CUDA_OK(cudaMalloc((void**)&d_pos, sizeof(double) * 3 * s->n));
    CUDA_OK(cudaMalloc((void**)&d_forces, sizeof(double) * 3 * s->n));
    CUDA_OK(cudaMalloc((void**)&d_energy, sizeof(double)));
    CUDA_OK(cudaMemcpy(d_pos, s->pos, sizeof(double) * 3 * s->n, cudaMemcpyHostToDevice));
    CHECK_OK(eval_plain(gpu, 0, d_pos, d_forces, d_energy, f_gpu, &e_gpu, b_gpu));
    int32_t model_length = 0, stored_length = 0;
    CHECK_OK(nnp_cuda_aev_layout(gpu, &model_length, &stored_length, &last_classes));
    CHECK_OK(nnp_cuda_activations_internal(gpu, last_modes, &last_launches));
    printf("AEV: %d of %d features stored, %d class(es) of first-layer prefixes\n", stored_length, model_length, last_classes);
    double worst = 0;
    for (int b = 0; b < s->n_batches; b++) {
        if (b_cpu[b] == 0.0) CHECK(b_gpu[b] == 0.0); /* empty batch */
        else worst = fmax(worst, fabs(b_gpu[b] - b_cpu[b]) / fabs(b_cpu[b]));
    }
    double frms = rms_relative(f_cpu, f_gpu, 3 * s->n);
    printf("%d atoms, %s member %2d (many-rows kernel %d): energy CPU %.10f GPU %.10f (rel %.2e), worst batch rel %.2e, forces rel RMS %.2e\n",
           s->n, precision == NNP_PRECISION_DOUBLE ? "double" : "single", member, tuning.big_tensor_cores, e_cpu, e_gpu, fabs(e_gpu - e_cpu) / fabs(e_cpu),
           worst, frms);
    CHECK(fabs(e_gpu - e_cpu) <= etol * fabs(e_cpu));
    CHECK(worst <= etol);
    CHECK(frms <= ftol);
    /* Deterministic: a second evaluation gives the same bits. */
    double e2, *f2 = malloc(sizeof(double) * 3 * s->n), *b2 = malloc(sizeof(double) * (s->n_batches + 1));
    CHECK_OK(eval_plain(gpu, 0, d_pos, d_forces, d_energy, f2, &e2, b2));
    CHECK(e2 == e_gpu && memcmp(f2, f_gpu, sizeof(double) * 3 * s->n) == 0);
    free(f2), free(f_cpu), free(f_gpu), free(b_cpu), free(b_gpu), free(b2);
    cudaFree(d_pos), cudaFree(d_forces), cudaFree(d_energy);
    nnp_plan_free(cpu);
    nnp_plan_free(gpu);
}

/* The same evaluation with the tuning tables `base` (NULL: the defaults) and `variant`: bit-identical
   where the variant only changes which kernel adds the same terms in the same order. */
static void compare_bitwise(nnp_model* model, const system_t* s, const nnp_cuda_tuning* base, const nnp_cuda_tuning* variant,
                            const char* what) {
    double e[2], *f[2], *b[2];
    double *d_pos, *d_forces, *d_energy;
    CUDA_OK(cudaMalloc((void**)&d_pos, sizeof(double) * 3 * s->n));
    CUDA_OK(cudaMalloc((void**)&d_forces, sizeof(double) * 3 * s->n));
    CUDA_OK(cudaMalloc((void**)&d_energy, sizeof(double)));
    CUDA_OK(cudaMemcpy(d_pos, s->pos, sizeof(double) * 3 * s->n, cudaMemcpyHostToDevice));
    for (int m = 0; m < 2; m++) {
        f[m] = malloc(sizeof(double) * 3 * s->n), b[m] = malloc(sizeof(double) * (s->n_batches + 1));
        nnp_plan* gpu;
        CHECK_OK(nnp_plan_create(model, &gpu));
        CHECK_OK(nnp_plan_set_cuda_tuning_internal(gpu, m == 1 ? variant : base));
        CHECK_OK(nnp_plan_set_atoms(gpu, s->n, s->z, s->batch));
        CHECK_OK(eval_plain(gpu, 0, d_pos, d_forces, d_energy, f[m], &e[m], b[m]));
        nnp_plan_free(gpu);
    }
    const int same = e[1] == e[0] && memcmp(f[1], f[0], sizeof(double) * 3 * s->n) == 0 && memcmp(b[1], b[0], sizeof(double) * s->n_batches) == 0;
    printf("%d atoms, %s: energy %.10f, against %.10f: %s\n", s->n, what, e[1], e[0], same ? "bit-identical" : "DIFFERENT");
    CHECK(same);
    for (int m = 0; m < 2; m++) free(f[m]), free(b[m]);
    CUDA_OK(cudaFree(d_pos));
    CUDA_OK(cudaFree(d_forces));
    CUDA_OK(cudaFree(d_energy));
}

/* The last comparison's GEMM launches read their activations as `want` says (nnp_cuda_activations_internal). */
static void expect_modes(const char* what, const int32_t* want, int32_t n) {
    int same = last_launches == n;
    for (int k = 0; same && k < n; k++) same = last_modes[k] == want[k];
    printf("%s: activations read as", what);
    for (int k = 0; k < last_launches; k++) printf(" %d", last_modes[k]);
    printf(" (want");
    for (int k = 0; k < n; k++) printf(" %d", want[k]);
    printf(")\n");
    CHECK(same);
}

/* OpenMM's conventions: float4 positions in a permuted ("reordered") layout with an index array,
   fixed-point forces with a stride, float energy; then graph capture and replay. */
static void test_openmm_layout_and_capture(nnp_model* model, const system_t* s) {
    int n = s->n, stride = n + 13;
    int32_t* sorted = malloc(sizeof(int32_t) * n); /* position index → particle */
    for (int i = 0; i < n; i++) sorted[i] = (int32_t)((7L * i + 3) % n);
    float* pos4 = malloc(sizeof(float) * 4 * n);
    nnp_plan* plan;
    CHECK_OK(nnp_plan_create(model, &plan));
    CHECK_OK(nnp_plan_set_atoms(plan, n, s->z, s->batch));
    CHECK_OK(nnp_plan_set_units(plan, NNP_UNITS_NM_KJMOL));
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    float* d_pos4;
    int32_t* d_sorted;
    long long* d_forces;
    float* d_energy;
    CUDA_OK(cudaMalloc((void**)&d_pos4, sizeof(float) * 4 * n));
    CUDA_OK(cudaMalloc((void**)&d_sorted, sizeof(int32_t) * n));
    CUDA_OK(cudaMalloc((void**)&d_forces, sizeof(long long) * 3 * stride));
    CUDA_OK(cudaMalloc((void**)&d_energy, sizeof(float)));
    CUDA_OK(cudaMemcpy(d_sorted, sorted, sizeof(int32_t) * n, cudaMemcpyHostToDevice));
    nnp_cuda_io io = {0};
    io.stream = stream;
    io.positions = d_pos4;
    io.positions_format = NNP_POSITIONS_FLOAT4;
    io.sorted_particles = d_sorted;
    io.n_particles = n;
    io.forces = d_forces;
    io.forces_format = NNP_FORCES_FIXED_POINT;
    io.forces_stride = stride;
    io.energy = d_energy;
    io.energy_is_double = 0;

    /* Positions at step k: the molecules, slightly displaced. */
#define SET_POSITIONS(k)                                                                                  \
    do {                                                                                                  \
        for (int i = 0; i < n; i++) {                                                                     \
            int p = sorted[i];                                                                            \
            for (int c = 0; c < 3; c++) pos4[4 * i + c] = (float)(0.1 * s->pos[3 * p + c] + 1e-3 * sin(0.7 * p + c + (k))); \
            pos4[4 * i + 3] = 0;                                                                          \
        }                                                                                                 \
        CUDA_OK(cudaMemcpyAsync(d_pos4, pos4, sizeof(float) * 4 * n, cudaMemcpyHostToDevice, stream));     \
        CUDA_OK(cudaStreamSynchronize(stream));                                                           \
    } while (0)

    /* Capture before the first evaluation is refused, and the capture can be ended cleanly. */
    cudaGraph_t graph;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    CHECK_FAILS(nnp_evaluate_cuda(plan, &io), NNP_ERR_CAPTURE, "run one step");
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    CUDA_OK(cudaGraphDestroy(graph));

    /* Eager reference values for 5 positions, then the same from one graph replayed 5 times. */
    enum { STEPS = 5 };
    long long* eager_f = malloc(sizeof(long long) * 3 * stride * STEPS);
    float eager_e[STEPS];
    for (int k = 0; k < STEPS; k++) {
        SET_POSITIONS(k);
        CUDA_OK(cudaMemsetAsync(d_forces, 0, sizeof(long long) * 3 * stride, stream));
        CUDA_OK(cudaMemsetAsync(d_energy, 0, sizeof(float), stream));
        CHECK_OK(nnp_evaluate_cuda(plan, &io));
        CUDA_OK(cudaMemcpyAsync(eager_f + (size_t)k * 3 * stride, d_forces, sizeof(long long) * 3 * stride, cudaMemcpyDeviceToHost, stream));
        CUDA_OK(cudaMemcpyAsync(&eager_e[k], d_energy, sizeof(float), cudaMemcpyDeviceToHost, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
    }
    /* The fixed-point forces agree with the CPU evaluation, mapped through the permutation. */
    {
        nnp_plan* cpu;
        CHECK_OK(nnp_plan_create(model, &cpu));
        CHECK_OK(nnp_plan_set_atoms(cpu, n, s->z, s->batch));
        CHECK_OK(nnp_plan_set_units(cpu, NNP_UNITS_NM_KJMOL));
        double* p = malloc(sizeof(double) * 3 * n);
        double* f = malloc(sizeof(double) * 3 * n);
        double* g = malloc(sizeof(double) * 3 * n);
        double e;
        for (int i = 0; i < n; i++)
            for (int c = 0; c < 3; c++) p[3 * sorted[i] + c] = pos4[4 * i + c];
        CHECK_OK(nnp_evaluate_cpu(cpu, p, NULL, &e, NULL, f));
        for (int i = 0; i < n; i++)
            for (int c = 0; c < 3; c++)
                g[3 * sorted[i] + c] = (double)eager_f[(size_t)(STEPS - 1) * 3 * stride + i + c * stride] / 4294967296.0;
        printf("OpenMM layout: energy CPU %.4f GPU %.4f kJ/mol (rel %.2e), forces rel RMS %.2e\n", e, eager_e[STEPS - 1],
               fabs(eager_e[STEPS - 1] - e) / fabs(e), rms_relative(f, g, 3 * n));
        CHECK(fabs(eager_e[STEPS - 1] - e) <= 2e-7 * fabs(e)); /* a float32 energy: 2^-24 is 6e-8 */
        CHECK(rms_relative(f, g, 3 * n) <= SINGLE_FORCES);
        free(p), free(f), free(g);
        nnp_plan_free(cpu);
    }
    /* Capture the evaluation (with the zeroing around it, as a step would) and replay it. */
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    CUDA_OK(cudaMemsetAsync(d_forces, 0, sizeof(long long) * 3 * stride, stream));
    CUDA_OK(cudaMemsetAsync(d_energy, 0, sizeof(float), stream));
    CHECK_OK(nnp_evaluate_cuda(plan, &io));
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    long long* replay_f = malloc(sizeof(long long) * 3 * stride);
    int identical = 1;
    for (int k = 0; k < STEPS; k++) {
        SET_POSITIONS(k);
        CUDA_OK(cudaGraphLaunch(exec, stream));
        float e;
        CUDA_OK(cudaMemcpyAsync(replay_f, d_forces, sizeof(long long) * 3 * stride, cudaMemcpyDeviceToHost, stream));
        CUDA_OK(cudaMemcpyAsync(&e, d_energy, sizeof(float), cudaMemcpyDeviceToHost, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        identical &= e == eager_e[k] && memcmp(replay_f, eager_f + (size_t)k * 3 * stride, sizeof(long long) * 3 * stride) == 0;
    }
    printf("graph replay: %d replays with moving positions %s the eager evaluations\n", STEPS,
           identical ? "bit-identical to" : "DIFFER from");
    CHECK(identical);
    double batches[2 * NMOL];
    CHECK_OK(nnp_cuda_batch_energies(plan, stream, batches));

    /* A change that needs new buffers: capture refused until one evaluation outside capture (the
       atoms of batch 2 moved to a new batch 20, where there is a batch 2). */
    int32_t* moved = malloc(sizeof(int32_t) * n);
    const int move = s->n_batches > 2 && s->n_batches <= 20;
    for (int i = 0; i < n; i++) moved[i] = move && s->batch[i] == 2 ? 20 : s->batch[i];
    if (!move) moved[0] = s->n_batches; /* otherwise: the first atom alone in a new batch */
    CHECK_OK(nnp_plan_set_atoms(plan, n, s->z, moved));
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    CHECK_FAILS(nnp_evaluate_cuda(plan, &io), NNP_ERR_CAPTURE, "changed since the last evaluation outside capture");
    CHECK_FAILS(nnp_cuda_batch_energies(plan, stream, batches), NNP_ERR_STATE, "evaluate first");
    cudaGraph_t g2;
    CUDA_OK(cudaStreamEndCapture(stream, &g2));
    CUDA_OK(cudaGraphDestroy(g2));
    CHECK_OK(nnp_evaluate_cuda(plan, &io));
    if (move) {
        CHECK(nnp_plan_num_batches(plan) == 21);
        double moved_batches[21];
        CHECK_OK(nnp_cuda_batch_energies(plan, stream, moved_batches));
        CHECK(fabs(moved_batches[20] - batches[2]) < 1e-6 * fabs(batches[2]) && moved_batches[2] == 0.0);
    } else {
        CHECK(nnp_plan_num_batches(plan) == s->n_batches + 1);
        double moved_batches[2 * NMOL];
        CHECK_OK(nnp_cuda_batch_energies(plan, stream, moved_batches));
        CHECK(moved_batches[s->n_batches] != 0.0 && moved_batches[0] != batches[0]); /* the lone atom's self energy; the rest without it */
    }

    /* Non-finite coordinates: refused at the first evaluation after new buffers, and reported by
       the next look after an evaluation that is already running. */
    pos4[4 * 5 + 1] = NAN;
    CUDA_OK(cudaMemcpy(d_pos4, pos4, sizeof(float) * 4 * n, cudaMemcpyHostToDevice));
    CHECK_OK(nnp_evaluate_cuda(plan, &io));
    CHECK_FAILS(nnp_cuda_batch_energies(plan, stream, batches), NNP_ERR_NONFINITE, "not finite");
    CHECK_OK(nnp_plan_set_atoms(plan, n, s->z, s->batch));
    CHECK_FAILS(nnp_evaluate_cuda(plan, &io), NNP_ERR_NONFINITE, "not finite");

    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    cudaFree(d_pos4), cudaFree(d_sorted), cudaFree(d_forces), cudaFree(d_energy);
    CUDA_OK(cudaStreamDestroy(stream));
    free(eager_f), free(replay_f), free(sorted), free(pos4), free(moved);
    nnp_plan_free(plan);
}

/* A batch so dense that every atom has more neighbours than the capacity: reported, not silent. */
static void test_overflow(nnp_model* model) {
    int n = 600;
    int32_t* z = malloc(sizeof(int32_t) * n);
    int32_t* b = calloc(n, sizeof(int32_t));
    double* pos = malloc(sizeof(double) * 3 * n);
    for (int i = 0; i < n; i++) {
        z[i] = 1;
        pos[3 * i] = 0.5 * (i % 8), pos[3 * i + 1] = 0.5 * ((i / 8) % 8), pos[3 * i + 2] = 0.5 * (i / 64);
    }
    nnp_plan* plan;
    CHECK_OK(nnp_plan_create(model, &plan));
    CHECK_OK(nnp_plan_set_atoms(plan, n, z, b));
    CHECK_OK(nnp_plan_set_member(plan, 0));
    double *d_pos, *d_f, *d_e, e, be;
    double* f = malloc(sizeof(double) * 3 * n);
    CUDA_OK(cudaMalloc((void**)&d_pos, sizeof(double) * 3 * n));
    CUDA_OK(cudaMalloc((void**)&d_f, sizeof(double) * 3 * n));
    CUDA_OK(cudaMalloc((void**)&d_e, sizeof(double)));
    CUDA_OK(cudaMemcpy(d_pos, pos, sizeof(double) * 3 * n, cudaMemcpyHostToDevice));
    CHECK_FAILS(eval_plain(plan, 0, d_pos, d_f, d_e, f, &e, &be), NNP_ERR_STATE, "more than the CUDA evaluation's capacity");
    cudaFree(d_pos), cudaFree(d_f), cudaFree(d_e);
    free(z), free(b), free(pos), free(f);
    nnp_plan_free(plan);
}

/* Two atoms of one molecule at the same position (the AEV split over blocks per atom): reported at
   the next look, then cleared, so that the next evaluation with good positions passes. */
static void test_coincident(nnp_model* model) {
    system_t one = make_large_system(1);
    const int n = one.n;
    nnp_plan* plan;
    CHECK_OK(nnp_plan_create(model, &plan));
    CHECK_OK(nnp_plan_set_atoms(plan, n, one.z, one.batch));
    double *d_pos, *d_f, *d_e, e, be;
    double* f = malloc(sizeof(double) * 3 * n);
    double* pos = malloc(sizeof(double) * 3 * n);
    for (int k = 0; k < 3 * n; k++) pos[k] = one.pos[k];
    for (int c = 0; c < 3; c++) pos[3 + c] = pos[c]; /* atom 1 onto atom 0 */
    CUDA_OK(cudaMalloc((void**)&d_pos, sizeof(double) * 3 * n));
    CUDA_OK(cudaMalloc((void**)&d_f, sizeof(double) * 3 * n));
    CUDA_OK(cudaMalloc((void**)&d_e, sizeof(double)));
    CUDA_OK(cudaMemcpy(d_pos, pos, sizeof(double) * 3 * n, cudaMemcpyHostToDevice));
    CHECK_FAILS(eval_plain(plan, 0, d_pos, d_f, d_e, f, &e, &be), NNP_ERR_INVALID_ARGUMENT, "same position");
    CUDA_OK(cudaMemcpy(d_pos, one.pos, sizeof(double) * 3 * n, cudaMemcpyHostToDevice));
    CHECK_OK(eval_plain(plan, 0, d_pos, d_f, d_e, f, &e, &be));
    CHECK(isfinite(e) && isfinite(be));
    cudaFree(d_pos), cudaFree(d_f), cudaFree(d_e);
    free(f), free(pos), free(one.z), free(one.batch), free(one.pos);
    nnp_plan_free(plan);
}

/* A plan of no atoms: nothing to read or write, so positions and forces may be NULL whatever their
   formats; the energy gets 0 added, and there are no batch energies. */
static void test_no_atoms(nnp_model* model) {
    nnp_plan* plan = gpu_plan(model);
    CHECK_OK(nnp_plan_set_atoms(plan, 0, NULL, NULL));
    double* d_energy;
    const double before = 1.5;
    double after = 0;
    CUDA_OK(cudaMalloc((void**)&d_energy, sizeof(double)));
    CUDA_OK(cudaMemcpy(d_energy, &before, sizeof(double), cudaMemcpyHostToDevice));
    nnp_cuda_io io = {0};
    io.positions_format = NNP_POSITIONS_XYZ_DOUBLE;
    io.forces_format = NNP_FORCES_XYZ_DOUBLE;
    io.energy = d_energy;
    io.energy_is_double = 1;
    CHECK_OK(nnp_evaluate_cuda(plan, &io));
    io.forces_format = NNP_FORCES_FIXED_POINT;
    CHECK_OK(nnp_evaluate_cuda(plan, &io));
    CHECK_OK(nnp_cuda_batch_energies(plan, NULL, NULL));
    CUDA_OK(cudaMemcpy(&after, d_energy, sizeof(double), cudaMemcpyDeviceToHost));
    CHECK(after == before);
    printf("no atoms: forces and positions NULL accepted, energy %.3f before and after\n", after);
    cudaFree(d_energy);
    nnp_plan_free(plan);
}

/* Two plans alive at once whose kernels take different amounts of shared memory (13 molecules and
   one), the larger built first, as with two Contexts in one process or the devices of a Context on
   several GPUs: setting up the second must not make the first's launches fail, and the first gives
   the same bits as before. */
static void test_two_plans(nnp_model* model, nnp_precision precision) {
    system_t big = make_large_system(13), small = make_large_system(1);
    nnp_plan* a = gpu_plan(model);
    nnp_plan* b = gpu_plan(model);
    CHECK_OK(nnp_plan_set_atoms(a, big.n, big.z, big.batch));
    CHECK_OK(nnp_plan_set_atoms(b, small.n, small.z, small.batch));
    CHECK_OK(nnp_plan_set_cuda_precision(a, precision));
    CHECK_OK(nnp_plan_set_cuda_precision(b, precision));
    double *d_pos, *d_forces, *d_energy, *d_pos_b, *d_forces_b;
    CUDA_OK(cudaMalloc((void**)&d_pos, sizeof(double) * 3 * big.n));
    CUDA_OK(cudaMalloc((void**)&d_forces, sizeof(double) * 3 * big.n));
    CUDA_OK(cudaMalloc((void**)&d_pos_b, sizeof(double) * 3 * small.n));
    CUDA_OK(cudaMalloc((void**)&d_forces_b, sizeof(double) * 3 * small.n));
    CUDA_OK(cudaMalloc((void**)&d_energy, sizeof(double)));
    CUDA_OK(cudaMemcpy(d_pos, big.pos, sizeof(double) * 3 * big.n, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_pos_b, small.pos, sizeof(double) * 3 * small.n, cudaMemcpyHostToDevice));
    double e1, e2, eb, *f1 = malloc(sizeof(double) * 3 * big.n), *f2 = malloc(sizeof(double) * 3 * big.n);
    double *fb = malloc(sizeof(double) * 3 * small.n), *b1 = malloc(sizeof(double) * big.n_batches),
           *b2 = malloc(sizeof(double) * big.n_batches), bb[1];
    CHECK_OK(eval_plain(a, 0, d_pos, d_forces, d_energy, f1, &e1, b1));
    CHECK_OK(eval_plain(b, 0, d_pos_b, d_forces_b, d_energy, fb, &eb, bb));
    CHECK_OK(eval_plain(a, 0, d_pos, d_forces, d_energy, f2, &e2, b2));
    CHECK(e1 == e2 && memcmp(f1, f2, sizeof(double) * 3 * big.n) == 0);
    printf("two plans (%d and %d atoms, %s) alternating: the first's energy %.10f, then %.10f\n", big.n, small.n,
           precision == NNP_PRECISION_DOUBLE ? "double" : "single", e1, e2);
    free(f1), free(f2), free(fb), free(b1), free(b2);
    cudaFree(d_pos), cudaFree(d_forces), cudaFree(d_pos_b), cudaFree(d_forces_b), cudaFree(d_energy);
    nnp_plan_free(a);
    nnp_plan_free(b);
    free(big.z), free(big.batch), free(big.pos), free(small.z), free(small.batch), free(small.pos);
}

int main(void) {
    if (!nnp_cuda_available()) {
        printf("test_cuda: skipped: %s\n", "no CUDA device (or libnnp built without CUDA)");
        return 77;
    }
    nnp_cuda_tuning_defaults(&tuning);
    nnp_model* model = load_model_or_die("models/ani-model-zoo/ani-2x_8x.info");
    system_t s = make_system();
    const char* quick = getenv("NNP_TEST_QUICK");
    if (quick != NULL && strcmp(quick, "large") == 0) { /* for racecheck of the tensor-core GEMMs: one large system, ten molecules */
        system_t large = make_large_system(40);
        compare_with_cpu(model, &large, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        tuning.big_tensor_cores = 0;
        compare_with_cpu(model, &large, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        free(large.z), free(large.batch), free(large.pos);
        nnp_cuda_tuning_defaults(&tuning);
        system_t mid = make_large_system(10); /* middle row counts: k_gemm_big_h split over k */
        compare_with_cpu(model, &mid, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        free(mid.z), free(mid.batch), free(mid.pos);
        mid = make_edge_system(10, 1, 4, 8); /* the same with every element, three of one row */
        compare_with_cpu(model, &mid, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        free(mid.z), free(mid.batch), free(mid.pos);
        free(s.z), free(s.batch), free(s.pos);
        nnp_model_free(model);
        return test_finish("test_cuda (large)");
    }
    if (quick != NULL) { /* for slow tools (compute-sanitizer racecheck): few comparisons */
        compare_with_cpu(model, &s, 0, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        system_t one = make_large_system(1); /* the tensor-core few-rows GEMM and the split AEV backward */
        compare_with_cpu(model, &one, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        compare_energy_only(model, &one); /* the output layer inside the last forward, k_finish */
        free(one.z), free(one.batch), free(one.pos);
        system_t two = make_large_system(2); /* 17 to 32 rows of an element: the SIMT few-rows GEMM */
        compare_with_cpu(model, &two, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        free(two.z), free(two.batch), free(two.pos);
        test_no_atoms(model);
        free(s.z), free(s.batch), free(s.pos);
        nnp_model_free(model);
        return test_finish("test_cuda (quick)");
    }
    compare_with_cpu(model, &s, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
    compare_with_cpu(model, &s, 3, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
    compare_with_cpu(model, &s, -1, NNP_PRECISION_DOUBLE, DOUBLE_ENERGY, DOUBLE_FORCES);
    test_two_plans(model, NNP_PRECISION_DOUBLE);
    test_two_plans(model, NNP_PRECISION_SINGLE);
    test_no_atoms(model);
    {
        system_t one = make_large_system(1); /* one molecule: tensor-core few-rows GEMM (float32), AEV and AEV backward over several blocks per atom */
        compare_with_cpu(model, &one, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        compare_with_cpu(model, &one, 0, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES); /* one member */
        compare_with_cpu(model, &one, -1, NNP_PRECISION_DOUBLE, DOUBLE_ENERGY, DOUBLE_FORCES);
        test_openmm_layout_and_capture(model, &one); /* a single batch, OpenMM's layout, in a graph */
        compare_energy_only(model, &one);
        /* The output layer as a launch of its own (k_output) instead of inside the last forward. */
        tuning.fuse_output = 0;
        compare_with_cpu(model, &one, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        compare_energy_only(model, &one);
        nnp_cuda_tuning_defaults(&tuning);
        /* Each atom's AEV in one block of 1,024 threads instead of over several blocks (k_aev's
           slices; the default for one molecule), and the AEV backward in one block per atom. */
        tuning.aev_slices = 1;
        compare_with_cpu(model, &one, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        tuning.bwd_slices = 1;
        compare_with_cpu(model, &one, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        nnp_cuda_tuning_defaults(&tuning);
        /* The last backward GEMM's split-K parts added by its own last blocks instead of by the
           AEV backward (DeferredSum, the default for one molecule): the same sums in the same
           order, so bit-identical. */
        nnp_cuda_tuning variant;
        nnp_cuda_tuning_defaults(&variant);
        variant.defer_split_k = 0;
        compare_bitwise(model, &one, NULL, &variant, "split-K parts added by the GEMM (defer_split_k = 0)");
        /* k_gemm_mma's split-K parts added through distributed shared memory in thread-block
           clusters (cluster_fixup, the default on sm_90) or by each tile's last block
           (cluster_split_k = 0): the same sums in the same order, so bit-identical. The first
           layer's forward is split in two for one molecule; with defer_split_k = 0 the last
           backward GEMM's 8 parts go through clusters too. */
        nnp_cuda_tuning_defaults(&variant);
        variant.cluster_split_k = 0;
        compare_bitwise(model, &one, NULL, &variant, "no thread-block clusters (cluster_split_k = 0)");
        variant.defer_split_k = 0;
        compare_bitwise(model, &one, NULL, &variant, "no clusters, split-K parts added by the GEMM");
        /* The molecule as batch 300 of 301 (300 empty): more batches than the end of the
           evaluation keeps in shared memory for one molecule. */
        for (int32_t a = 0; a < one.n; a++) one.batch[a] = 300;
        one.n_batches = 301;
        compare_with_cpu(model, &one, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        compare_energy_only(model, &one);
        free(one.z), free(one.batch), free(one.pos);
        system_t two = make_large_system(2); /* two: 18 hydrogens, the SIMT few-rows GEMM */
        compare_with_cpu(model, &two, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        compare_with_cpu(model, &two, 0, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        free(two.z), free(two.batch), free(two.pos);
    }
    {
        /* Ten molecules (114 H, 61 C, 20 N, 25 O rows: middle row counts, one 128-row tile, not
           full): k_gemm_big_h split over k (the first layer's 1,008 k in 4 parts, its backward's
           2,048 in 8; with split_k_tensor = 96, 11 parts of 96 k and a last one of 48); the SIMT
           split-K kernel (big_tensor_cores = 0); double. */
        system_t mid = make_large_system(10);
        compare_with_cpu(model, &mid, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        /* every launch reads presplit activations: the first layer's forward and backward (k = 1,008
           and 2,048) split over k, their parts chunk-aligned; the AEV and the second forward's
           activations split by k_presplit (the latter's producer was split), the others written as
           pairs by the launch before */
        expect_modes("10 molecules", (const int32_t[]){NNP_CUDA_A_PRESPLIT, NNP_CUDA_A_PRESPLIT, NNP_CUDA_A_BY_PRODUCER,
                                                       NNP_CUDA_A_BY_PRODUCER, NNP_CUDA_A_BY_PRODUCER, NNP_CUDA_A_BY_PRODUCER}, 6);
        /* ... and the same bits as each block splitting its activations itself (presplit = 0), also
           with parts of 96 k (the last of 48) */
        {
            nnp_cuda_tuning base10, presplit0;
            nnp_cuda_tuning_defaults(&presplit0);
            presplit0.presplit = 0;
            compare_bitwise(model, &mid, NULL, &presplit0, "10 molecules, activations split by k_gemm_big_h (presplit = 0)");
            nnp_cuda_tuning_defaults(&base10);
            base10.split_k_tensor = presplit0.split_k_tensor = 96;
            compare_bitwise(model, &mid, &base10, &presplit0, "10 molecules, split_k_tensor = 96, presplit = 0");
            /* 64-row tiles (the default here: 114 H rows in two tiles, the second of 50; 61 C, 20 N,
               25 O in one) against 128-row tiles: the same sums, the same bits */
            nnp_cuda_tuning rows128;
            nnp_cuda_tuning_defaults(&rows128);
            rows128.middle_tile_rows = 128;
            compare_bitwise(model, &mid, NULL, &rows128, "10 molecules, 128-row tiles (middle_tile_rows = 128)");
            rows128.split_k_tensor = 96;
            compare_bitwise(model, &mid, &base10, &rows128, "10 molecules, split_k_tensor = 96, 128-row tiles");
        }
        compare_with_cpu(model, &mid, 1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        tuning.split_k_tensor = 96;
        compare_with_cpu(model, &mid, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        nnp_cuda_tuning_defaults(&tuning);
        tuning.big_tensor_cores = 0;
        compare_with_cpu(model, &mid, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        nnp_cuda_tuning_defaults(&tuning);
        compare_with_cpu(model, &mid, -1, NNP_PRECISION_DOUBLE, DOUBLE_ENERGY, DOUBLE_FORCES);
        free(mid.z), free(mid.batch), free(mid.pos);
        /* Tile edges at middle row counts: every element, S, F and Cl with one row each, against the
           CPU on the FP16 pairs (default), with one member, on the SIMT kernels and in double; the
           same bits as presplit = 0 and as 128-row tiles */
        mid = make_edge_system(10, 1, 4, 8);
        compare_with_cpu(model, &mid, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        /* every launch on k_gemm_big_h reading presplit activations (so that the bitwise comparison
           with presplit = 0 below cannot pass by presplit not being chosen) */
        {
            int presplit = last_launches == 6;
            for (int k = 0; k < last_launches; k++) presplit = presplit && last_modes[k] != NNP_CUDA_A_FLOAT32;
            printf("10 molecules with S, F and Cl: %d class(es) of first-layer prefixes, %d launches, all presplit: %s\n", last_classes,
                   last_launches, presplit ? "yes" : "NO");
            CHECK(presplit);
        }
        compare_with_cpu(model, &mid, 2, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        {
            nnp_cuda_tuning variant;
            nnp_cuda_tuning_defaults(&variant);
            variant.presplit = 0;
            compare_bitwise(model, &mid, NULL, &variant, "10 molecules with S, F and Cl, presplit = 0");
            nnp_cuda_tuning_defaults(&variant);
            variant.middle_tile_rows = 128;
            compare_bitwise(model, &mid, NULL, &variant, "10 molecules with S, F and Cl, 128-row tiles");
        }
        tuning.big_tensor_cores = 0;
        compare_with_cpu(model, &mid, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        nnp_cuda_tuning_defaults(&tuning);
        compare_with_cpu(model, &mid, -1, NNP_PRECISION_DOUBLE, DOUBLE_ENERGY, DOUBLE_FORCES);
        free(mid.z), free(mid.batch), free(mid.pos);
        /* 10, 15 and 40 molecules: k_aev with 8, 4 and 2 warps per atom on a GPU of 132 SMs
           (nnp_cuda_aev_atom_threads) */
        mid = make_large_system(15);
        compare_with_cpu(model, &mid, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        free(mid.z), free(mid.batch), free(mid.pos);
    }
    {
        system_t large = make_large_system(40); /* >256 atoms of H and of C: the many-row GEMM kernel */
        compare_with_cpu(model, &large, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        /* its six launches (forward 0-2, backward 2-0) read presplit activations: the AEV split by
           k_presplit, the rest written as pairs by the launch before (so that the bitwise comparison
           with presplit = 0 below cannot pass by presplit not being chosen) */
        expect_modes("40 molecules", (const int32_t[]){NNP_CUDA_A_PRESPLIT, NNP_CUDA_A_BY_PRODUCER, NNP_CUDA_A_BY_PRODUCER,
                                                       NNP_CUDA_A_BY_PRODUCER, NNP_CUDA_A_BY_PRODUCER, NNP_CUDA_A_BY_PRODUCER}, 6);
        compare_with_cpu(model, &large, 1, NNP_PRECISION_DOUBLE, DOUBLE_ENERGY, DOUBLE_FORCES);
        /* The output layer inside the last hidden layer's k_gemm_big_h (the default, above, and without
           forces) or in k_output of its own. */
        compare_energy_only(model, &large);
        tuning.fuse_output = 0;
        compare_with_cpu(model, &large, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        /* k_output writes the first backward product's activations as float32: k_presplit splits them */
        expect_modes("40 molecules, fuse_output = 0", (const int32_t[]){NNP_CUDA_A_PRESPLIT, NNP_CUDA_A_BY_PRODUCER,
                     NNP_CUDA_A_BY_PRODUCER, NNP_CUDA_A_PRESPLIT, NNP_CUDA_A_BY_PRODUCER, NNP_CUDA_A_BY_PRODUCER}, 6);
        compare_energy_only(model, &large);
        nnp_cuda_tuning_defaults(&tuning);
        /* The many-rows GEMMs in SIMT (k_gemm_big) instead of FP16 pairs on the tensor cores (k_gemm_big_h). */
        tuning.big_tensor_cores = 0;
        compare_with_cpu(model, &large, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        nnp_cuda_tuning_defaults(&tuning);
        nnp_cuda_tuning variant;
        /* Ordinary launches instead of programmatic dependent ones: the same kernels, so the same bits. */
        nnp_cuda_tuning_defaults(&variant);
        variant.pdl = 0;
        compare_bitwise(model, &large, NULL, &variant, "no programmatic dependent launches (pdl = 0)");
        /* k_gemm_big_h splitting its activations itself instead of reading them presplit: the same
           split and the same sums in the same order, so bit-identical (with and without the fused
           output layer). */
        nnp_cuda_tuning_defaults(&variant);
        variant.presplit = 0;
        compare_bitwise(model, &large, NULL, &variant, "activations split by k_gemm_big_h (presplit = 0)");
        nnp_cuda_tuning nofuse;
        nnp_cuda_tuning_defaults(&nofuse);
        nofuse.fuse_output = 0;
        variant.fuse_output = 0;
        compare_bitwise(model, &large, &nofuse, &variant, "presplit = 0 with the output layer apart");
        free(large.z), free(large.batch), free(large.pos);
        system_t edge = make_edge_system(40, 3, 7, 11); /* tile edges, every element, elements of one row */
        nnp_cuda_tuning_defaults(&variant);
        variant.presplit = 0;
        compare_bitwise(model, &edge, NULL, &variant, "edge system, presplit = 0");
        for (int kernel = 1; kernel >= 0; kernel--) { /* FP16 pairs, SIMT */
            tuning.big_tensor_cores = kernel;
            compare_with_cpu(model, &edge, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        }
        nnp_cuda_tuning_defaults(&tuning);
        compare_with_cpu(model, &edge, 2, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES); /* one member */
        compare_with_cpu(model, &edge, -1, NNP_PRECISION_DOUBLE, DOUBLE_ENERGY, DOUBLE_FORCES);
        free(edge.z), free(edge.batch), free(edge.pos);
    }
    {
        /* S, F and Cl in some batches only: stored AEV blocks and classes of first-layer prefixes
           (class_rows = 0 lets even small classes stand alone). */
        system_t mixed = make_mixed_system();
        compare_with_cpu(model, &mixed, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        compare_with_cpu(model, &mixed, -1, NNP_PRECISION_DOUBLE, DOUBLE_ENERGY, DOUBLE_FORCES);
        tuning.class_rows = 0;
        compare_with_cpu(model, &mixed, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        CHECK(last_classes >= 2);
        nnp_cuda_tuning_defaults(&tuning);
        free(mixed.z), free(mixed.batch), free(mixed.pos);
        system_t large = make_large_system(40); /* the many-rows GEMM with several classes */
        mutate(&large, 5, 8, 16, 1), mutate(&large, 5, 1, 9, 2), mutate(&large, 17, 1, 17, 1), mutate(&large, 30, 1, 9, 1);
        compare_with_cpu(model, &large, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        tuning.class_rows = 0;
        compare_with_cpu(model, &large, -1, NNP_PRECISION_SINGLE, SINGLE_ENERGY, SINGLE_FORCES);
        CHECK(last_classes >= 2);
        compare_with_cpu(model, &large, 2, NNP_PRECISION_DOUBLE, DOUBLE_ENERGY, DOUBLE_FORCES);
        nnp_cuda_tuning_defaults(&tuning);
        free(large.z), free(large.batch), free(large.pos);
    }
    test_openmm_layout_and_capture(model, &s);
    test_overflow(model);
    test_coincident(model);
    free(s.z), free(s.batch), free(s.pos);
    nnp_model_free(model);
    return test_finish("test_cuda");
}
