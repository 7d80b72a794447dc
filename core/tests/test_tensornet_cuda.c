/*
 * TensorNet's CUDA evaluation against its CPU evaluation in double precision (which the Python tests
 * compare with torchmd-net itself), for the converted test checkpoints given on the command line:
 * float32 and float64, one molecule, many molecules with total charges −1/0/+1, every AceFF element,
 * a periodic box, over 1,100 atoms (the many-atom kernels), a batch of 1,699 atoms in a triclinic box
 * and one of 4,374 without (the neighbour search's cell grids, also where one cannot be used), one
 * ensemble member; determinism; OpenMM's layout (float4 positions, a permuted index, fixed-point
 * forces) captured into a CUDA graph and replayed bit-identical to eager calls.
 *   test_tensornet_cuda MODEL.nnpm...
 * NNP_TEST_QUICK=1: fewer systems, one precision mostly; "small": without the systems over 290
 * atoms; "grid": the cell grid's two systems alone (for compute-sanitizer).
 * Skips (exit code 77, with the reason) where no CUDA device is present.
 */
#include "test.h"
#include "tensornet_systems.h"

#include <cuda_runtime_api.h>

/* Agreement with the CPU's float64 evaluation: per-batch energy relative to the batch's energy
   (float64; an ensemble mean: to the mean of its members' |batch energy|, which may cancel) or to
   the mean |batch energy| of the system (float32: the random test models' batch energies are small
   sums of terms of both signs, so their own relative error says little), and relative RMS of the
   forces. Float32 is float32-class: the largest values measured (H100,
   2026-12-06) were 5.1e-6 (a batch, of the mean) and 1.6e-6 (forces). */
#define SINGLE_ENERGY 1e-5
#define SINGLE_FORCES 5e-6
#define DOUBLE_ENERGY 1e-12
#define DOUBLE_FORCES 1e-10
#define CUDA_OK(call)                                                                            \
    do {                                                                                         \
        cudaError_t e_ = (call);                                                                 \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

/* One evaluation on the GPU with double positions and plain forces; returns the status. */
static nnp_status eval_plain(nnp_plan* plan, const system_t* s, double* e, double* f, double* batches) {
    double *d_pos, *d_f, *d_e;
    CUDA_OK(cudaMalloc((void**)&d_pos, sizeof(double) * 3 * s->n));
    CUDA_OK(cudaMalloc((void**)&d_f, sizeof(double) * 3 * s->n));
    CUDA_OK(cudaMalloc((void**)&d_e, sizeof(double)));
    CUDA_OK(cudaMemcpy(d_pos, s->pos, sizeof(double) * 3 * s->n, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_e, 0, sizeof(double)));
    nnp_cuda_io io = {0};
    io.positions = d_pos;
    io.positions_format = NNP_POSITIONS_XYZ_DOUBLE;
    io.box = s->periodic ? s->box : NULL;
    io.forces = d_f;
    io.forces_format = f ? NNP_FORCES_XYZ_DOUBLE : NNP_FORCES_NONE;
    io.energy = d_e;
    io.energy_is_double = 1;
    nnp_status st = nnp_evaluate_cuda(plan, &io);
    if (st == NNP_OK) st = nnp_cuda_batch_energies(plan, 0, batches);
    if (st == NNP_OK) {
        CUDA_OK(cudaMemcpy(e, d_e, sizeof(double), cudaMemcpyDeviceToHost));
        if (f) CUDA_OK(cudaMemcpy(f, d_f, sizeof(double) * 3 * s->n, cudaMemcpyDeviceToHost));
    }
    cudaFree(d_pos), cudaFree(d_f), cudaFree(d_e);
    return st;
}

static void compare(const char* model_name, nnp_model* model, const system_t* s, int32_t member, nnp_precision precision) {
    if (!has_elements(model, s)) {
        printf("%s, %s: skipped (the model lacks some of its elements)\n", model_name, s->name);
        return;
    }
    nnp_plan* cpu = make_plan(model, s, member);
    nnp_plan* gpu = make_plan(model, s, member);
    CHECK_OK(nnp_plan_set_cuda_precision(gpu, precision));
    const size_t n3 = 3 * (size_t)s->n;
    double e_cpu, e_gpu = 0, *f_cpu = malloc(sizeof(double) * n3), *f_gpu = malloc(sizeof(double) * n3);
    double *b_cpu = malloc(sizeof(double) * (s->n_batches + 1)), *b_gpu = malloc(sizeof(double) * (s->n_batches + 1));
    CHECK_OK(nnp_evaluate_cpu(cpu, s->pos, s->periodic ? s->box : NULL, &e_cpu, b_cpu, f_cpu));
    CHECK_OK(eval_plain(gpu, s, &e_gpu, f_gpu, b_gpu));
    const int dbl = precision == NNP_PRECISION_DOUBLE;
    double worst = 0, scale = 0, *own = calloc((size_t)s->n_batches + 1, sizeof(double)); /* float64: each batch's scale */
    for (int b = 0; b < s->n_batches; b++) scale += fabs(b_cpu[b]) / s->n_batches;
    const int32_t members = member < 0 ? nnp_model_num_members(model) : 1;
    if (members == 1)
        for (int b = 0; b < s->n_batches; b++) own[b] = fabs(b_cpu[b]);
    for (int32_t k = 0; members > 1 && k < members; k++) {
        nnp_plan* one = make_plan(model, s, k);
        double ek, *bk = malloc(sizeof(double) * (s->n_batches + 1));
        CHECK_OK(nnp_evaluate_cpu(one, s->pos, s->periodic ? s->box : NULL, &ek, bk, NULL));
        for (int b = 0; b < s->n_batches; b++) own[b] += fabs(bk[b]) / members;
        free(bk);
        nnp_plan_free(one);
    }
    for (int b = 0; b < s->n_batches; b++) worst = fmax(worst, fabs(b_gpu[b] - b_cpu[b]) / fmax(dbl ? own[b] : scale, 1e-300));
    free(own);
    const double frms = rms_relative(f_cpu, f_gpu, (int)n3);
    const double single_forces = s->single_forces > 0 ? s->single_forces : SINGLE_FORCES;
    printf("%s, %s, %d atoms in %d batches, %s, member %d: energy CPU %.12g GPU %.12g, worst batch %.2e (of %s), forces rel RMS %.2e\n",
           model_name, s->name, s->n, s->n_batches, dbl ? "double" : "single", member, e_cpu, e_gpu, worst,
           dbl ? (members > 1 ? "the members' mean |batch energy|" : "its energy") : "the mean |batch energy|", frms);
    if (worst > (dbl ? DOUBLE_ENERGY : SINGLE_ENERGY) || frms > (dbl ? DOUBLE_FORCES : single_forces))
        printf("  FAILED: %s, %s, %s\n", model_name, s->name, dbl ? "double" : "single");
    CHECK(worst <= (dbl ? DOUBLE_ENERGY : SINGLE_ENERGY));
    CHECK(frms <= (dbl ? DOUBLE_FORCES : single_forces));
    /* the same bits again; and energy alone agrees with energy and forces */
    double e2 = 0, *f2 = malloc(sizeof(double) * n3), *b2 = malloc(sizeof(double) * (s->n_batches + 1));
    CHECK_OK(eval_plain(gpu, s, &e2, f2, b2));
    CHECK(e2 == e_gpu && memcmp(f2, f_gpu, sizeof(double) * n3) == 0);
    CHECK_OK(eval_plain(gpu, s, &e2, NULL, b2));
    CHECK(e2 == e_gpu);
    free(f2), free(b2);
    free(f_cpu), free(f_gpu), free(b_cpu), free(b_gpu);
    nnp_plan_free(cpu);
    nnp_plan_free(gpu);
}

/* OpenMM's layout: float4 positions in nm in a permuted order, fixed-point forces added at the
   permuted place, energy as float; the evaluation captured into a graph and replayed for moving
   positions, bit-identical to eager evaluations, and the forces as the CPU's. */
static void graph_replay(const char* model_name, nnp_model* model, const system_t* s) {
    const int n = s->n, stride = n + 5;
    nnp_plan* plan = make_plan(model, s, -1);
    CHECK_OK(nnp_plan_set_units(plan, NNP_UNITS_NM_KJMOL));
    int32_t* order = malloc(sizeof(int32_t) * n); /* order[slot] = particle: reversed */
    for (int i = 0; i < n; i++) order[i] = n - 1 - i;
    int32_t *d_order;
    float* d_pos;
    unsigned long long* d_forces;
    float* d_energy;
    CUDA_OK(cudaMalloc((void**)&d_order, sizeof(int32_t) * n));
    CUDA_OK(cudaMalloc((void**)&d_pos, sizeof(float) * 4 * n));
    CUDA_OK(cudaMalloc((void**)&d_forces, sizeof(long long) * 3 * stride));
    CUDA_OK(cudaMalloc((void**)&d_energy, sizeof(float)));
    CUDA_OK(cudaMemcpy(d_order, order, sizeof(int32_t) * n, cudaMemcpyHostToDevice));
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    nnp_cuda_io io = {0};
    io.stream = stream;
    io.positions = d_pos;
    io.positions_format = NNP_POSITIONS_FLOAT4;
    io.sorted_particles = d_order;
    io.n_particles = n;
    io.forces = d_forces;
    io.forces_format = NNP_FORCES_FIXED_POINT;
    io.forces_stride = stride;
    io.energy = d_energy;
    io.energy_is_double = 0;
    enum { STEPS = 4 };
    float* host_pos = malloc(sizeof(float) * 4 * n * STEPS);
    for (int k = 0; k < STEPS; k++)
        for (int slot = 0; slot < n; slot++)
            for (int c = 0; c < 4; c++)
                host_pos[((size_t)k * n + slot) * 4 + c] =
                    c == 3 ? 0.f : (float)(0.1 * s->pos[3 * order[slot] + c] + 0.002 * k * ((slot + c) % 3 - 1));
    cudaGraph_t graph;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    CHECK_FAILS(nnp_evaluate_cuda(plan, &io), NNP_ERR_CAPTURE, "run one step");
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    CUDA_OK(cudaGraphDestroy(graph));
    long long* eager_f = malloc(sizeof(long long) * 3 * stride * STEPS);
    float eager_e[STEPS];
    for (int k = 0; k < STEPS; k++) {
        CUDA_OK(cudaMemcpyAsync(d_pos, host_pos + (size_t)k * n * 4, sizeof(float) * 4 * n, cudaMemcpyHostToDevice, stream));
        CUDA_OK(cudaMemsetAsync(d_forces, 0, sizeof(long long) * 3 * stride, stream));
        CUDA_OK(cudaMemsetAsync(d_energy, 0, sizeof(float), stream));
        CHECK_OK(nnp_evaluate_cuda(plan, &io));
        CUDA_OK(cudaMemcpyAsync(eager_f + (size_t)k * 3 * stride, d_forces, sizeof(long long) * 3 * stride, cudaMemcpyDeviceToHost, stream));
        CUDA_OK(cudaMemcpyAsync(&eager_e[k], d_energy, sizeof(float), cudaMemcpyDeviceToHost, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
    }
    { /* step 0's forces against the CPU (the same float positions) */
        nnp_plan* cpu = make_plan(model, s, -1);
        CHECK_OK(nnp_plan_set_units(cpu, NNP_UNITS_NM_KJMOL));
        double *p = malloc(sizeof(double) * 3 * n), *f = malloc(sizeof(double) * 3 * n), *g = malloc(sizeof(double) * 3 * n), e;
        double* be = malloc(sizeof(double) * (s->n_batches + 1));
        for (int slot = 0; slot < n; slot++)
            for (int c = 0; c < 3; c++) p[3 * order[slot] + c] = host_pos[slot * 4 + c];
        CHECK_OK(nnp_evaluate_cpu(cpu, p, NULL, &e, be, f));
        /* the float32 criterion of compare() summed over the batches (each batch within SINGLE_ENERGY
           of the mean |batch energy|), and the float the energy is returned in */
        double tol = 1.2e-7 * fabs(e);
        for (int b = 0; b < s->n_batches; b++) tol += SINGLE_ENERGY * fabs(be[b]);
        for (int slot = 0; slot < n; slot++)
            for (int c = 0; c < 3; c++) g[3 * order[slot] + c] = (double)eager_f[slot + c * stride] / 4294967296.0;
        const double frms = rms_relative(f, g, 3 * n);
        printf("%s, %s: OpenMM layout (float4 nm, permuted, fixed point): energy CPU %.8g GPU %.8g, forces rel RMS %.2e\n",
               model_name, s->name, e, eager_e[0], frms);
        CHECK(fabs(eager_e[0] - e) <= tol);
        CHECK(frms <= SINGLE_FORCES);
        free(p), free(f), free(g), free(be);
        nnp_plan_free(cpu);
    }
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
        CUDA_OK(cudaMemcpyAsync(d_pos, host_pos + (size_t)k * n * 4, sizeof(float) * 4 * n, cudaMemcpyHostToDevice, stream));
        CUDA_OK(cudaGraphLaunch(exec, stream));
        float e;
        CUDA_OK(cudaMemcpyAsync(replay_f, d_forces, sizeof(long long) * 3 * stride, cudaMemcpyDeviceToHost, stream));
        CUDA_OK(cudaMemcpyAsync(&e, d_energy, sizeof(float), cudaMemcpyDeviceToHost, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        identical &= e == eager_e[k] && memcmp(replay_f, eager_f + (size_t)k * 3 * stride, sizeof(long long) * 3 * stride) == 0;
    }
    printf("%s, %s: %d graph replays with moving positions %s the eager evaluations\n", model_name, s->name, STEPS,
           identical ? "bit-identical to" : "DIFFER from");
    CHECK(identical);
    /* a changed charge needs an evaluation outside capture first */
    int32_t* q = malloc(sizeof(int32_t) * (s->n_batches + 1));
    for (int b = 0; b < s->n_batches; b++) q[b] = s->charge[b] == 1 ? 0 : 1;
    CHECK_OK(nnp_plan_set_batch_charges(plan, s->n_batches, q));
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    CHECK_FAILS(nnp_evaluate_cuda(plan, &io), NNP_ERR_CAPTURE, "charges");
    cudaGraph_t g2;
    CUDA_OK(cudaStreamEndCapture(stream, &g2));
    CUDA_OK(cudaGraphDestroy(g2));
    free(q);
    /* NaN coordinates: reported by the next call that looks */
    float nan_pos[4] = {NAN, 0, 0, 0};
    CUDA_OK(cudaMemcpyAsync(d_pos, nan_pos, sizeof nan_pos, cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    CHECK_OK(nnp_plan_set_batch_charges(plan, s->n_batches, s->charge));
    CHECK_FAILS(nnp_evaluate_cuda(plan, &io), NNP_ERR_NONFINITE, "not finite");
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    CUDA_OK(cudaStreamDestroy(stream));
    cudaFree(d_order), cudaFree(d_pos), cudaFree(d_forces), cudaFree(d_energy);
    free(order), free(host_pos), free(eager_f), free(replay_f);
    nnp_plan_free(plan);
}

/* A model the CUDA evaluation does not run (given after --refused; none of today's test models):
   the first evaluation fails with NNP_ERR_UNSUPPORTED naming the platforms that run it; the CPU one
   works. */
static void refuses(const char* path) {
    nnp_model* model = load_model_file_or_die(path);
    system_t s = make_system("one molecule", 1, 1, 0, 0);
    nnp_plan* plan = make_plan(model, &s, -1);
    double e = 0, batch[1], *f = malloc(sizeof(double) * 3 * s.n);
    CHECK(f != NULL);
    CHECK_FAILS(eval_plain(plan, &s, &e, f, batch), NNP_ERR_UNSUPPORTED, "Reference or CPU platform");
    CHECK_OK(nnp_evaluate_cpu(plan, s.pos, NULL, &e, batch, f));
    CHECK(isfinite(e));
    printf("  ok  %s: refused on CUDA, evaluated on the CPU\n", path);
    free(f);
    free_system(&s);
    nnp_plan_free(plan);
    nnp_model_free(model);
}

int main(int argc, char** argv) {
    /* each line as it is printed: a run stopped by a time limit (under compute-sanitizer) keeps what it had checked */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!nnp_cuda_available()) {
        printf("test_tensornet_cuda: skipped: %s\n", "no CUDA device (or libnnp built without CUDA)");
        return 77;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: test_tensornet_cuda MODEL.nnpm... [--refused MODEL.nnpm...]\n");
        return 2;
    }
    const char* quick = getenv("NNP_TEST_QUICK");
    int refused = 0; /* the models after --refused: ones the CUDA evaluation must refuse */
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--refused") == 0) {
            refused = 1;
            continue;
        }
        if (refused) {
            refuses(argv[a]);
            continue;
        }
        nnp_model* model = load_model_file_or_die(argv[a]);
        const char* name = strrchr(argv[a], '/') ? strrchr(argv[a], '/') + 1 : argv[a];
        CHECK(strcmp(nnp_model_family_name(model), "tensornet") == 0);
        system_t sys[N_SYSTEMS];
        make_systems(sys);
        system_t *one = &sys[0], *many = &sys[1], *rare = &sys[2], *box = &sys[3], *dense = &sys[4];
        /* more atoms (over 1,100) than the few-atom kernels take (TN_CHAN_DEEP_ATOMS) */
        system_t large = make_system("60 molecules, charged", 1, 60, 1, 0);
        CHECK(large.n > 1100);
        /* few enough atoms for the narrow GEMM tiles (TN_CHAN_NARROW_ATOMS, TN_ROWS_NARROW_ATOMS: 64),
           enough for several of their row blocks */
        system_t few = make_system("3 molecules, charged", 1, 3, 1, 0);
        CHECK(few.n > 40 && few.n <= 64);
        /* batches of at least TN_NBR_CELL_ATOMS (1,024) atoms in a box and TN_NBR_CELL_ATOMS_OPEN (4,096)
           without: the neighbour search's cell grids */
        system_t gas = make_gas("gas, triclinic box", 1, 0), cluster = make_gas("gas, open", 0, 0),
                 far = make_gas("gas, triclinic box, an atom 2e6 boxes away", 1, 1);
        if (quick != NULL && strcmp(quick, "grid") == 0) { /* the cell grid alone (compute-sanitizer) */
            compare(name, model, &gas, -1, NNP_PRECISION_SINGLE);
            compare(name, model, &cluster, -1, NNP_PRECISION_SINGLE);
        } else if (quick == NULL) {
            for (int p = 0; p < 2; p++) {
                nnp_precision prec = p ? NNP_PRECISION_DOUBLE : NNP_PRECISION_SINGLE;
                compare(name, model, one, -1, prec);
                compare(name, model, &few, -1, prec);
                compare(name, model, many, -1, prec);
                compare(name, model, rare, -1, prec);
                compare(name, model, box, -1, prec);
                compare(name, model, dense, -1, prec);
                compare(name, model, &large, -1, prec);
                compare(name, model, &gas, -1, prec);
                compare(name, model, &cluster, -1, prec);
            }
            compare(name, model, &far, -1, NNP_PRECISION_SINGLE);
            compare(name, model, many, 0, NNP_PRECISION_SINGLE);
        } else { /* the few-atom kernels (one molecule, both precisions) and the many-atom ones; "small":
                    without the 60 molecules (the kernels up to 290 atoms, for racecheck in less time) */
            compare(name, model, one, -1, NNP_PRECISION_SINGLE);
            compare(name, model, one, -1, NNP_PRECISION_DOUBLE);
            compare(name, model, &few, -1, NNP_PRECISION_SINGLE);
            compare(name, model, many, -1, NNP_PRECISION_SINGLE);
            compare(name, model, dense, -1, NNP_PRECISION_SINGLE);
            if (strcmp(quick, "small") != 0) compare(name, model, &large, -1, NNP_PRECISION_SINGLE);
            if (strcmp(quick, "small") != 0) compare(name, model, &gas, -1, NNP_PRECISION_SINGLE);
        }
        graph_replay(name, model, &few); /* up to 64 atoms: k_tn_layer_f */
        graph_replay(name, model, many);
        if (quick == NULL) graph_replay(name, model, &cluster);
        for (int k = 0; k < N_SYSTEMS; k++) free_system(&sys[k]);
        free_system(&large), free_system(&few), free_system(&gas), free_system(&cluster), free_system(&far);
        nnp_model_free(model);
    }
    return test_finish("test_tensornet_cuda");
}
