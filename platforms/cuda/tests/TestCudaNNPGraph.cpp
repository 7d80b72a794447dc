/*
 * Whole-step CUDA graph capture of a VerletIntegrator step of a System with NNPForce and a bonded
 * force, through OpenMM's stream (ComputeContext queues): N replays against N eager steps, and
 * the documented refusals (capture before warm-up, capture after a change). Also times eager
 * steps against replays. Started through run_if_cuda.sh: it links OpenMM's CUDA library.
 */
#include "NNPForce.h"
#include "openmm/Context.h"
#include "openmm/HarmonicBondForce.h"
#include "openmm/OpenMMException.h"
#include "openmm/Platform.h"
#include "openmm/State.h"
#include "openmm/System.h"
#include "openmm/VerletIntegrator.h"
#include "openmm/common/ContextSelector.h"
#include "openmm/cuda/CudaContext.h"
#include "openmm/cuda/CudaPlatform.h"
#include "openmm/cuda/CudaQueue.h"
#include "openmm/internal/ContextImpl.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

using namespace NNPPlugin;
using namespace OpenMM;
using std::string;
using std::vector;

static string sharedPath(const string& rel) {
    const char* root = getenv("NNP_SHARED_DIR");
    return string(root && root[0] ? root : NNP_SHARED_DIR_DEFAULT) + "/" + rel;
}

static int failures = 0;

/* Precision of the graph scenarios: NNP_GRAPH_PRECISION (default mixed). */
static string graphPrecision() {
    const char* p = getenv("NNP_GRAPH_PRECISION");
    return p && p[0] ? p : "mixed";
}
#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            std::cerr << __FILE__ << ":" << __LINE__ << ": CHECK failed: " #cond << std::endl; \
            failures++;                                                                      \
        }                                                                                    \
    } while (0)
#define CU(call)                                                                             \
    do {                                                                                     \
        CUresult r_ = (call);                                                                \
        if (r_ != CUDA_SUCCESS) throw OpenMMException(string(#call) + " failed: " + std::to_string((int)r_)); \
    } while (0)

static CudaContext& cudaContextOf(Context& context) {
    ContextImpl* impl = *reinterpret_cast<ContextImpl**>(&context); // Context's first member
    return *static_cast<CudaPlatform::PlatformData*>(impl->getPlatformData())->contexts[0];
}

/* Three drug-like molecules (batches 0..2) and a bonded pair of extra particles. */
static void buildSystem(System& system, vector<Vec3>& positions, NNPForce*& force) {
    const char* files[] = {"drugbank-0001.xyz", "drugbank-0030.xyz", "drugbank-0147.xyz"};
    force = new NNPForce(sharedPath("models/ani-model-zoo/ani-2x_8x.info"));
    system.addForce(force); // first, so that a refused capture fails in it
    for (int k = 0; k < 3; k++) {
        std::ifstream in(sharedPath(string("molecules/druglike/") + files[k]));
        int n;
        string line, symbol;
        in >> n;
        std::getline(in, line);
        std::getline(in, line);
        for (int i = 0; i < n; i++) {
            double x, y, z;
            in >> symbol >> x >> y >> z;
            int atomic = symbol == "H" ? 1 : symbol == "C" ? 6 : symbol == "N" ? 7 : 8;
            force->addAtom(system.addParticle(atomic == 1 ? 1.008 : 12.0), atomic, k);
            positions.push_back(Vec3(x, y, z) * 0.1 + Vec3(1.5 * k, 0, 0));
        }
    }
    int a = system.addParticle(12.0), b = system.addParticle(12.0);
    positions.push_back(Vec3(-1, 0, 0));
    positions.push_back(Vec3(-1.12, 0, 0));
    HarmonicBondForce* bond = new HarmonicBondForce();
    bond->addBond(a, b, 0.1, 50000.0);
    system.addForce(bond);
}

struct Capture {
    CUstream stream;
    CudaContext& cu;
    explicit Capture(CudaContext& cu) : cu(cu) {
        ContextSelector selector(cu);
        CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
        cu.setCurrentQueue(std::make_shared<CudaQueue>(stream));
    }
    ~Capture() {
        ContextSelector selector(cu);
        cu.restoreDefaultQueue();
        cuStreamDestroy(stream);
    }
};

/* OpenMM's host-side transfers (getState, setPositions) are not ordered after work on a stream
   that the caller installed as the current queue: wait for it before handing control back. */
static void sync(CudaContext& cu, CUstream stream) {
    ContextSelector selector(cu);
    CU(cuStreamSynchronize(stream));
}

/* Records `steps` steps into a graph; returns it instantiated, or throws what the step threw. */
static CUgraphExec record(CudaContext& cu, CUstream stream, Integrator& integrator, int steps) {
    ContextSelector selector(cu);
    CU(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED));
    try {
        integrator.step(steps);
    } catch (...) {
        CUgraph broken;
        cuStreamEndCapture(stream, &broken);
        if (broken) cuGraphDestroy(broken);
        throw;
    }
    CUgraph graph;
    CU(cuStreamEndCapture(stream, &graph));
    size_t nodes = 0;
    CU(cuGraphGetNodes(graph, NULL, &nodes));
    std::cout << "  recorded " << steps << " step(s): " << nodes << " graph nodes" << std::endl;
    CUgraphExec exec;
    CU(cuGraphInstantiate(&exec, graph, 0));
    cuGraphDestroy(graph);
    return exec;
}

static void expectRefusal(CudaContext& cu, CUstream stream, Integrator& integrator, const string& needle) {
    try {
        record(cu, stream, integrator, 1);
    } catch (const OpenMMException& e) {
        std::cout << "  refused as documented: " << e.what() << std::endl;
        CHECK(string(e.what()).find(needle) != string::npos);
        return;
    }
    std::cerr << "capture was not refused (expected '" << needle << "')" << std::endl;
    failures++;
}

/* N eager steps against N/K replays of a K-step graph from the same state; returns the largest
   position difference, and how far the recording itself moved the positions (must be 0). */
static void compareEagerAndReplay(System& system, const vector<Vec3>& positions, const char* label, double& worst,
                                  double& moved) {
    const int N = 40, K = 10;
    Platform& platform = Platform::getPlatformByName("CUDA");
    VerletIntegrator integrator(0.0005);
    Context context(system, integrator, platform, {{"Precision", graphPrecision()}});
    context.setPositions(positions);
    context.setVelocitiesToTemperature(300.0, 7);
    CudaContext& cu = cudaContextOf(context);
    Capture capture(cu);
    {
        ContextSelector selector(cu);
        CHECK(cu.getCurrentStream() == capture.stream);
    }
    integrator.step(2); // warm-up on the capture stream
    sync(cu, capture.stream);
    State start = context.getState(State::Positions | State::Velocities);
    auto t0 = std::chrono::steady_clock::now();
    integrator.step(N);
    {
        ContextSelector selector(cu);
        cuStreamSynchronize(capture.stream);
    }
    double eagerUs = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / N;
    vector<Vec3> eager = context.getState(State::Positions).getPositions();

    // OpenMM reorders atoms at the first step after setPositions (host work that cannot be
    // captured), so: reset, one eager step, record, then reset again and replay. Recording runs
    // nothing on the GPU, so the positions must not move while it happens.
    context.setPositions(start.getPositions());
    context.setVelocities(start.getVelocities());
    integrator.step(1);
    sync(cu, capture.stream);
    vector<Vec3> before = context.getState(State::Positions).getPositions();
    CUgraphExec exec = record(cu, capture.stream, integrator, K);
    vector<Vec3> afterRecord = context.getState(State::Positions).getPositions();
    moved = 0;
    for (size_t i = 0; i < before.size(); i++)
        for (int c = 0; c < 3; c++) moved = std::max(moved, std::abs(before[i][c] - afterRecord[i][c]));
    std::cout << "  positions moved by the recording itself: " << moved << " nm (must be 0)" << std::endl;
    CHECK(moved == 0.0);
    context.setPositions(start.getPositions());
    context.setVelocities(start.getVelocities());
    t0 = std::chrono::steady_clock::now();
    {
        ContextSelector selector(cu);
        for (int r = 0; r < N / K; r++) CU(cuGraphLaunch(exec, capture.stream));
        CU(cuStreamSynchronize(capture.stream));
    }
    double replayUs = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / N;
    vector<Vec3> replayed = context.getState(State::Positions).getPositions();
    worst = 0;
    for (size_t i = 0; i < eager.size(); i++)
        for (int c = 0; c < 3; c++) worst = std::max(worst, std::abs(eager[i][c] - replayed[i][c]));
    std::cout << "  " << label << ": " << N << " eager steps vs " << N / K << " replays of a " << K << "-step graph: largest position "
          << "difference " << worst << " nm; " << eagerUs << " µs/step eager, " << replayUs << " µs/step replayed"
          << std::endl;
    CHECK(worst == 0.0);
    {
        ContextSelector selector(cu);
        cuGraphExecDestroy(exec);
    }
}

/* MD from rest on CUDA against Reference: positions after a few Verlet steps must agree. */
static double compareWithReference(System& system, const vector<Vec3>& positions, const string& precision) {
    VerletIntegrator i1(0.0005), i2(0.0005);
    Context cuda(system, i1, Platform::getPlatformByName("CUDA"), {{"Precision", precision}});
    Context ref(system, i2, Platform::getPlatformByName("Reference"));
    cuda.setPositions(positions);
    ref.setPositions(positions);
    double worst = 0;
    for (int step = 1; step <= 10; step++) {
        i1.step(1);
        i2.step(1);
        vector<Vec3> a = cuda.getState(State::Positions).getPositions(), b = ref.getState(State::Positions).getPositions();
        worst = 0;
        int at = 0;
        for (size_t i = 0; i < a.size(); i++)
            for (int c = 0; c < 3; c++)
                if (std::abs(a[i][c] - b[i][c]) > worst) worst = std::abs(a[i][c] - b[i][c]), at = i;
        if (step == 1 || step == 10)
            std::cout << "  MD from rest (" << precision << "), step " << step << ": CUDA vs Reference largest position difference " << worst
                      << " nm (particle " << at << ": " << a[at] << " vs " << b[at] << ")" << std::endl;
    }
    return worst;
}

int main() {
    try {
        Platform::loadPluginsFromDirectory(OPENMM_PLUGIN_DIR);
        NNPForce::getPluginLoadFailures();
        bool found = false;
        for (int i = 0; i < Platform::getNumPlatforms(); i++) found |= Platform::getPlatform(i).getName() == "CUDA";
        if (!found) {
            std::cout << "skipped: no CUDA platform" << std::endl;
            return 77;
        }
        Platform& platform = Platform::getPlatformByName("CUDA");
        System system;
        vector<Vec3> positions;
        NNPForce* force;
        buildSystem(system, positions, force);
        // 0. Plain MD steps agree with the Reference platform.
        for (const char* precision : {"single", "mixed", "double"}) CHECK(compareWithReference(system, positions, precision) < 1e-4);

        // 1. Capture before any evaluation: refused with the documented message.
        {
            VerletIntegrator integrator(0.0005);
            Context context(system, integrator, platform, {{"Precision", graphPrecision()}});
            context.setPositions(positions);
            CudaContext& cu = cudaContextOf(context);
            Capture capture(cu);
            expectRefusal(cu, capture.stream, integrator, "run one step");
        }

        // 2. Whole steps replayed from a graph against eager steps: OpenMM's own forces alone, then with NNPForce.
        double worst, moved;
        {
            System bondsOnly;
            vector<Vec3> pos2;
            for (int i = 0; i < 4; i++) {
                bondsOnly.addParticle(12.0);
                pos2.push_back(Vec3(0.13 * i, 0.02 * i * i, 0));
            }
            HarmonicBondForce* b = new HarmonicBondForce();
            for (int i = 0; i < 3; i++) b->addBond(i, i + 1, 0.1, 50000.0);
            bondsOnly.addForce(b);
            compareEagerAndReplay(bondsOnly, pos2, "bonds only", worst, moved);
            CHECK(moved == 0.0);
            CHECK(worst == 0.0);
        }
        compareEagerAndReplay(system, positions, "NNPForce + bond", worst, moved);
        CHECK(moved == 0.0);
        CHECK(worst == 0.0);
        VerletIntegrator integrator(0.0005);
        Context context(system, integrator, platform, {{"Precision", graphPrecision()}});
        context.setPositions(positions);
        CudaContext& cu = cudaContextOf(context);
        Capture capture(cu);
        integrator.step(2);
        sync(cu, capture.stream);
        // Per-batch energies read after replays are those of the current positions.
        vector<double> batches = force->getBatchEnergies(context);
        CHECK(batches.size() == 3 && batches[0] < 0 && batches[2] < 0);

        // 3. A change that needs a new setup (another ensemble member): capture refused until a step ran.
        force->setEnsembleMember(2);
        force->updateParametersInContext(context);
        expectRefusal(cu, capture.stream, integrator, "changed since the last evaluation outside capture");
        integrator.step(1);
        sync(cu, capture.stream);
        CUgraphExec again = record(cu, capture.stream, integrator, 1);
        {
            ContextSelector selector(cu);
            CU(cuGraphLaunch(again, capture.stream));
            CU(cuStreamSynchronize(capture.stream));
            cuGraphExecDestroy(again);
        }
    } catch (const std::exception& e) {
        std::cerr << "exception: " << e.what() << std::endl;
        return 1;
    }
    if (failures) {
        std::cerr << "TestCudaNNPGraph: " << failures << " check(s) failed" << std::endl;
        return 1;
    }
    std::cout << "TestCudaNNPGraph: all checks passed" << std::endl;
    return 0;
}
