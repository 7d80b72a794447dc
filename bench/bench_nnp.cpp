/*
 * Benchmark of NNPForce on the CUDA platform (ANI-2x, 8 members): MD steps of 1, 10, 100 and all
 * drug-like molecules (one batch each), launched eagerly and replayed from a CUDA graph of whole
 * steps, plus the stage breakdown of libnnp's evaluation (NNP_CUDA_PROFILE) for the same atoms.
 *   bench_nnp SHARED_DIR [sizes...]
 * Reports µs/step, ns/day at 1 fs, molecule-steps/s, atom-steps/s and the per-batch reduction's share.
 */
#include "NNPForce.h"
#include "nnp.h"
#include "openmm/Context.h"
#include "openmm/Platform.h"
#include "openmm/State.h"
#include "openmm/System.h"
#include "openmm/VerletIntegrator.h"
#include "openmm/common/ContextSelector.h"
#include "openmm/cuda/CudaContext.h"
#include "openmm/cuda/CudaPlatform.h"
#include "openmm/cuda/CudaQueue.h"
#include "openmm/internal/ContextImpl.h"

#include <cuda_runtime_api.h>
#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

using namespace OpenMM;
using namespace NNPPlugin;
using std::string;
using std::vector;

struct Mol {
    vector<int> z;
    vector<Vec3> pos; // nm
};

static Mol readXyz(const string& path) {
    std::ifstream in(path);
    int n;
    string line, symbol;
    in >> n;
    std::getline(in, line);
    std::getline(in, line);
    Mol m;
    for (int i = 0; i < n; i++) {
        double x, y, z;
        in >> symbol >> x >> y >> z;
        m.z.push_back(symbol == "H" ? 1 : symbol == "C" ? 6 : symbol == "N" ? 7 : symbol == "O" ? 8 : symbol == "F" ? 9 : symbol == "S" ? 16 : 17);
        m.pos.push_back(Vec3(x, y, z) * 0.1);
    }
    return m;
}

static CudaContext& cudaContextOf(Context& context) {
    ContextImpl* impl = *reinterpret_cast<ContextImpl**>(&context);
    return *static_cast<CudaPlatform::PlatformData*>(impl->getPlatformData())->contexts[0];
}

static double seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char** argv) {
    if (argc < 2) {
        std::cerr << "usage: bench_nnp SHARED_DIR [sizes...]" << std::endl;
        return 2;
    }
    string shared = argv[1], model = shared + "/models/ani-model-zoo/ani-2x_8x.info";
    vector<string> files;
    DIR* dir = opendir((shared + "/molecules/druglike").c_str());
    for (dirent* e; dir && (e = readdir(dir));)
        if (string(e->d_name).find(".xyz") != string::npos) files.push_back(shared + "/molecules/druglike/" + e->d_name);
    if (dir) closedir(dir);
    std::sort(files.begin(), files.end());
    vector<int> sizes = {1, 10, 100, (int)files.size()};
    if (argc > 2) {
        sizes.clear();
        for (int i = 2; i < argc; i++) sizes.push_back(atoi(argv[i]));
    }
    Platform::loadPluginsFromDirectory(Platform::getDefaultPluginsDirectory());
    NNPForce::getPluginLoadFailures();
    Platform& platform = Platform::getPlatformByName("CUDA");
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("GPU: %s; OpenMM %s CUDA platform, mixed precision; ANI-2x (8 members), float32 evaluation\n", prop.name,
           Platform::getOpenMMVersion().c_str());
    printf("%9s %7s | %10s %10s | %9s %9s %12s %12s | %6s\n", "molecules", "atoms", "eager µs", "graph µs",
           "speedup", "ns/day", "mol-steps/s", "atom-steps/s", "reduce");
    for (int count : sizes) {
        vector<string> chosen;
        if (count == 1) chosen.push_back(shared + "/molecules/druglike/drugbank-0030.xyz"); // the 22-atom molecule
        else chosen.assign(files.begin(), files.begin() + std::min<size_t>(count, files.size()));
        System system;
        NNPForce* force = new NNPForce(model);
        vector<Vec3> positions;
        vector<int> zs, batches;
        for (size_t k = 0; k < chosen.size(); k++) {
            Mol m = readXyz(chosen[k]);
            for (size_t i = 0; i < m.z.size(); i++) {
                int p = system.addParticle(m.z[i] == 1 ? 1.008 : 12.0);
                force->addAtom(p, m.z[i], k);
                positions.push_back(m.pos[i] + Vec3(3.0 * (k % 10), 3.0 * (k / 10 % 10), 3.0 * (k / 100)));
                zs.push_back(m.z[i]);
                batches.push_back(k);
            }
        }
        system.addForce(force);
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
            setenv("NNP_CUDA_PROFILE", "1", 1);
            double us[7] = {0}, sum[7] = {0};
            for (int r = 0; r < 6; r++) {
                nnp_evaluate_cuda(plan, &io);
                nnp_cuda_stage_times(plan, us);
                if (r > 0)
                    for (int k = 0; k < 7; k++) sum[k] += us[k] / 5;
            }
            unsetenv("NNP_CUDA_PROFILE");
            double total = 0;
            for (int k = 0; k < 7; k++) total += sum[k];
            share = sum[6] / graph * 100;
            printf("          stages (µs, evaluation alone, %.1f in all): neighbours %.1f, AEV %.1f, forward %.1f, "
                   "output %.1f, backward %.1f, AEV backward %.1f, batch sums %.1f\n", total, sum[0], sum[1], sum[2], sum[3],
                   sum[4], sum[5], sum[6]);
            cudaFree(d_pos), cudaFree(d_f), cudaFree(d_e);
            nnp_plan_free(plan);
            nnp_model_free(m);
        }
        double perSecond = 1e6 / graph;
        printf("%9zu %7d | %10.1f %10.1f | %8.2fx %9.1f %12.0f %12.3g | %5.2f%%\n", chosen.size(), atoms, eager, graph,
               eager / graph, perSecond * 86400 * 1e-6, perSecond * chosen.size(), perSecond * atoms, share);
        fflush(stdout);
    }
    return 0;
}
