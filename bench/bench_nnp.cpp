/*
 * Benchmark of NNPForce on the CUDA platform (ANI-2x, 8 members, or the model given): MD steps of 1, 10, 100 and all
 * drug-like molecules (one batch each), launched eagerly and replayed from a CUDA graph of whole
 * steps, plus the stage breakdown of libnnp's evaluation (nnp_plan_set_cuda_profiling) for the same atoms.
 *   bench_nnp SHARED_DIR [--model=PATH] [sizes...]
 * A size is N (the first N drug-like molecules), PATH.xyz (its atoms as one batch; periodic with a
 * Lattice) or K*PATH.xyz (K copies of it, one batch each).
 * Reports µs/step, ns/day at 1 fs, molecule-steps/s, atom-steps/s and the per-batch reduction's share,
 * and the host's own time to launch one eager step.
 */
#include "bench_common.h"

int main(int argc, char** argv) {
    Bench bench;
    if (!benchSetup(argc, argv, "bench_nnp", bench)) return 2;
    const string &shared = bench.shared, &model = bench.model;
    Platform& platform = *bench.platform;
    {
        NNPForce probe(model);
        printf("GPU: %s; OpenMM %s CUDA platform, mixed precision; model %s (%s), float32 evaluation\n", bench.gpu.c_str(),
               Platform::getOpenMMVersion().c_str(), probe.getModelName().c_str(), probe.getModelFamily().c_str());
    }
    printf("%9s %7s | %10s %10s | %9s %9s %12s %12s | %6s\n", "molecules", "atoms", "eager µs", "graph µs",
           "speedup", "ns/day", "mol-steps/s", "atom-steps/s", "reduce");
    for (const string& token : bench.tokens) {
        int copies;
        vector<string> chosen = moleculesOf(shared, token, &copies);
        System system;
        vector<int> zs, batches;
        vector<Vec3> positions = addMolecules(system, new NNPForce(model), chosen, &zs, &batches, copies);
        const size_t molecules = chosen.size() * copies;
        int atoms = system.getNumParticles();
        VerletIntegrator integrator(0.001);
        Context context(system, integrator, platform, {{"Precision", "mixed"}});
        context.setPositions(positions);
        context.setVelocitiesToTemperature(300.0, 1);
        CudaContext& cu = cudaContextOf(context);
        CUstream stream;
        {
            ContextSelector selector(cu);
            cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
            cu.setCurrentQueue(std::make_shared<CudaQueue>(stream));
        }
        auto sync = [&] {
            ContextSelector selector(cu);
            cuStreamSynchronize(stream);
        };
        integrator.step(5);
        sync();
        int steps = atoms > 10000 ? 50 : 500;
        double t = seconds();
        integrator.step(steps);
        sync();
        double eager = (seconds() - t) / steps * 1e6;
        // The host's own cost of an eager step: a few steps' launches timed without waiting for the
        // GPU (few enough that the launch queue does not fill and block the host).
        const int hostSteps = 20;
        t = seconds();
        integrator.step(hostSteps);
        double host = (seconds() - t) / hostSteps * 1e6;
        sync();
        const int K = 10;
        CUgraphExec exec;
        {
            ContextSelector selector(cu);
            cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED);
        }
        integrator.step(K);
        {
            ContextSelector selector(cu);
            CUgraph graph;
            cuStreamEndCapture(stream, &graph);
            cuGraphInstantiate(&exec, graph, 0);
            cuGraphDestroy(graph);
            cuGraphLaunch(exec, stream); // warm-up replay
            cuStreamSynchronize(stream);
            t = seconds();
            for (int r = 0; r < steps / K; r++) cuGraphLaunch(exec, stream);
            cuStreamSynchronize(stream);
        }
        double graph = (seconds() - t) / ((steps / K) * K) * 1e6;
        {
            ContextSelector selector(cu);
            cuGraphExecDestroy(exec);
            cu.restoreDefaultQueue();
            cuStreamDestroy(stream);
        }
        // Stage breakdown of the evaluation alone (libnnp, same atoms, float32, energy + forces).
        double share = -1;
        {
            nnp_model* m;
            nnp_plan* plan;
            nnp_model_load(model.c_str(), &m);
            nnp_plan_create(m, &plan);
            nnp_plan_set_atoms(plan, (int)zs.size(), zs.data(), batches.data());
            vector<double> xyz;
            for (const Vec3& p : positions) xyz.insert(xyz.end(), {p[0] * 10, p[1] * 10, p[2] * 10});
            double *d_pos, *d_f, *d_e;
            cudaMalloc((void**)&d_pos, sizeof(double) * xyz.size());
            cudaMalloc((void**)&d_f, sizeof(double) * xyz.size());
            cudaMalloc((void**)&d_e, sizeof(double));
            cudaMemcpy(d_pos, xyz.data(), sizeof(double) * xyz.size(), cudaMemcpyHostToDevice);
            nnp_cuda_io io = {};
            io.positions = d_pos;
            io.positions_format = NNP_POSITIONS_XYZ_DOUBLE;
            io.forces = d_f;
            io.forces_format = NNP_FORCES_XYZ_DOUBLE;
            io.energy = d_e;
            io.energy_is_double = 1;
            nnp_plan_set_cuda_profiling(plan, 1);
            double us[7] = {0}, sum[7] = {0};
            bool staged = true; /* stage times exist for ANI's evaluation only */
            for (int r = 0; r < 6; r++) {
                nnp_evaluate_cuda(plan, &io);
                staged = staged && nnp_cuda_stage_times(plan, us) == NNP_OK;
                if (r > 0)
                    for (int k = 0; k < 7; k++) sum[k] += us[k] / 5;
            }
            double total = 0;
            for (int k = 0; k < 7; k++) total += sum[k];
            share = sum[6] / graph * 100;
            if (staged) printf("          stages (µs, evaluation alone, %.1f in all): positions %.1f, neighbours + AEV %.1f, forward %.1f, "
                   "output %.1f, backward %.1f, AEV backward %.1f, batch sums %.1f\n", total, sum[0], sum[1], sum[2], sum[3],
                   sum[4], sum[5], sum[6]);
            cudaFree(d_pos), cudaFree(d_f), cudaFree(d_e);
            nnp_plan_free(plan);
            nnp_model_free(m);
        }
        printf("          host time to launch one eager step (not waiting for the GPU): %.1f µs\n", host);
        double perSecond = 1e6 / graph;
        printf("%9zu %7d | %10.1f %10.1f | %8.2fx %9.1f %12.0f %12.3g | %5.2f%%%s%s\n", molecules, atoms, eager, graph,
               eager / graph, perSecond * 86400 * 1e-6, perSecond * molecules, perSecond * atoms, share,
               token.find(".xyz") != string::npos ? "  " : "", token.find(".xyz") != string::npos ? token.c_str() : "");
        fflush(stdout);
    }
    return 0;
}
