/*
 * NNPForce on several GPUs of one Context: MD steps (VerletIntegrator, mixed precision, eager) of
 * K copies of the drug-like molecules (one batch each; default 4 × all) for each DeviceIndex list
 * given (default "0" and every prefix "0,1", "0,1,2,3", ... of the GPUs present), µs per step,
 * atom-steps/s and the parallel efficiency against the first list: t₁ / (devices × t).
 *   bench_devices SHARED_DIR [--model=PATH] [--copies=K] [--steps=S] [DEVICES...]
 * A list may name one GPU twice ("0,0": two CUDA contexts on one GPU, to check the split where
 * only one GPU exists; it measures overhead, not speed-up).
 */
#include "bench_common.h"

int main(int argc, char** argv) {
    if (argc < 2) {
        std::cerr << "usage: bench_devices SHARED_DIR [--model=PATH] [--copies=K] [--steps=S] [DEVICES...]" << std::endl;
        return 2;
    }
    const string shared = argv[1];
    string model = shared + "/models/ani-model-zoo/ani-2x_8x.info";
    int copies = 4, steps = 20;
    vector<string> lists;
    for (int i = 2; i < argc; i++) {
        if (strncmp(argv[i], "--model=", 8) == 0) model = argv[i] + 8;
        else if (strncmp(argv[i], "--copies=", 9) == 0) copies = atoi(argv[i] + 9);
        else if (strncmp(argv[i], "--steps=", 8) == 0) steps = atoi(argv[i] + 8);
        else lists.push_back(argv[i]);
    }
    int gpus = 0;
    cudaGetDeviceCount(&gpus);
    if (lists.empty()) {
        string list = "0";
        lists.push_back(list);
        for (int d = 1; d < gpus; d++) {
            list += "," + std::to_string(d);
            if ((d & (d + 1)) == 0) lists.push_back(list); /* 2, 4, 8 GPUs */
        }
    }
    Platform::loadPluginsFromDirectory(Platform::getDefaultPluginsDirectory());
    NNPForce::getPluginLoadFailures();
    Platform& platform = Platform::getPlatformByName("CUDA");
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    vector<string> chosen = chooseMolecules(shared, 1 << 30);
    System system;
    NNPForce* force = new NNPForce(model);
    vector<Vec3> positions = addMolecules(system, force, chosen, nullptr, nullptr, copies);
    printf("%d × %s; OpenMM %s CUDA platform, mixed precision; model %s; %zu molecules × %d = %d batches, %d atoms; "
           "%d steps after 3 warm-up steps\n", gpus, prop.name, Platform::getOpenMMVersion().c_str(), force->getModelName().c_str(),
           chosen.size(), copies, force->getNumBatches(), system.getNumParticles(), steps);
    printf("%-18s %8s | %10s %12s %10s | %s\n", "DeviceIndex", "devices", "µs/step", "atom-steps/s", "efficiency",
           "energy (kJ/mol) after the steps");
    double first = 0;
    for (const string& list : lists) {
        const int devices = 1 + (int)std::count(list.begin(), list.end(), ',');
        VerletIntegrator integrator(0.0005);
        Context context(system, integrator, platform, {{"Precision", "mixed"}, {"DeviceIndex", list}});
        context.setPositions(positions);
        context.setVelocitiesToTemperature(300.0, 1);
        integrator.step(3);
        context.getState(State::Energy);
        double t = seconds();
        integrator.step(steps);
        context.getState(State::Positions); /* waits for every device */
        const double us = (seconds() - t) / steps * 1e6;
        const double e = context.getState(State::Energy).getPotentialEnergy();
        if (first == 0) first = us;
        printf("%-18s %8d | %10.1f %12.3g %9.1f%% | %.6f\n", list.c_str(), devices, us, system.getNumParticles() * 1e6 / us,
               100 * first / (devices * us), e);
        fflush(stdout);
    }
    return 0;
}
