/*
 * Benchmark of the plugin's integrators on the CUDA platform (ANI-2x, 8 members, mixed precision,
 * 1 fs steps): for 1, 10, 100 and all drug-like molecules (one batch each), µs/step, ns/day and
 * molecule-steps/s of
 *   - OpenMM's LangevinMiddleIntegrator, launched eagerly (the baseline),
 *   - NNPLangevinIntegrator with graphs switched off (same kernels, eager),
 *   - NNPLangevinIntegrator replaying graphs (20 steps per graph, the default),
 *   - NNPVerletIntegrator replaying graphs,
 * and the speed-up of graph replay over the baseline and over the same integrator's eager steps.
 *   bench_integrators SHARED_DIR [sizes...]
 */
#include "NNPIntegrators.h"
#include "bench_common.h"
#include "openmm/LangevinMiddleIntegrator.h"

#include <functional>
#include <memory>

/* µs per step of `steps` steps after `warm` warm-up steps, the GPU finished at both ends. */
static double timeSteps(Context& context, Integrator& integrator, int warm, int steps) {
    CudaContext& cu = cudaContextOf(context);
    auto finish = [&] {
        ContextSelector selector(cu);
        cuCtxSynchronize();
    };
    integrator.step(warm);
    finish();
    double t = seconds();
    integrator.step(steps);
    finish();
    return (seconds() - t) / steps * 1e6;
}

int main(int argc, char** argv) {
    Bench bench;
    if (!benchSetup(argc, argv, "bench_integrators", bench)) return 2;
    const string &shared = bench.shared, &model = bench.model;
    Platform& platform = *bench.platform;
    printf("GPU: %s; OpenMM %s CUDA platform, mixed precision; ANI-2x (8 members); 1 fs steps; 20 steps per graph\n",
           bench.gpu.c_str(), Platform::getOpenMMVersion().c_str());
    printf("%9s %6s | %-28s | %10s %9s %12s | %s\n", "molecules", "atoms", "integrator", "µs/step", "ns/day", "mol-steps/s",
           "speed-up");
    const double dt = 0.001;
    for (int count : bench.sizes) {
        vector<string> chosen = chooseMolecules(shared, count);
        System system;
        vector<Vec3> positions = addMolecules(system, new NNPForce(model), chosen);
        int atoms = system.getNumParticles();
        int steps = atoms > 10000 ? 100 : atoms > 1000 ? 400 : 2000;
        struct Variant {
            const char* name;
            std::function<Integrator*()> make;
        };
        vector<Variant> variants = {
            {"LangevinMiddleIntegrator", [&] { return new LangevinMiddleIntegrator(300, 1, dt); }},
            {"NNPLangevinIntegrator, eager",
             [&] {
                 NNPLangevinIntegrator* l = new NNPLangevinIntegrator(300, 1, dt);
                 l->setUseGraphs(false);
                 return l;
             }},
            {"NNPLangevinIntegrator, graphs", [&] { return new NNPLangevinIntegrator(300, 1, dt); }},
            {"NNPVerletIntegrator, graphs", [&] { return new NNPVerletIntegrator(dt); }},
        };
        double baseline = 0, ownEager = 0;
        for (Variant& v : variants) {
            std::unique_ptr<Integrator> integrator(v.make());
            Context context(system, *integrator, platform, {{"Precision", "mixed"}});
            context.setPositions(positions);
            context.setVelocitiesToTemperature(300.0, 1);
            double us = timeSteps(context, *integrator, 45, steps);
            NNPGraphIntegrator* g = dynamic_cast<NNPGraphIntegrator*>(integrator.get());
            if (g && g->getUseGraphs() && !g->isReplayingGraphs())
                printf("  (%s did not replay graphs: %s)\n", v.name, g->getFallbackReason().c_str());
            double perSecond = 1e6 / us;
            char speedup[80] = "";
            if (baseline == 0) baseline = us;
            else if (string(v.name).find("eager") != string::npos) {
                ownEager = us;
                snprintf(speedup, sizeof speedup, "%.2fx vs baseline", baseline / us);
            } else
                snprintf(speedup, sizeof speedup, "%.2fx vs baseline, %.2fx vs own eager", baseline / us, ownEager / us);
            printf("%9zu %6d | %-28s | %10.1f %9.1f %12.0f | %s\n", chosen.size(), atoms, v.name, us,
                   perSecond * 86400 * dt * 1e-3, perSecond * chosen.size(), speedup);
            fflush(stdout);
        }
    }
    return 0;
}
