#include "CudaNNPIntegrators.h"
#include "NNPLangevinSource.h" // generated: nnpLangevin.cu.in with nnp_philox.h pasted in
#include "openmm/AndersenThermostat.h"
#include "openmm/ATMForce.h"
#include "openmm/CMMotionRemover.h"
#include "openmm/CustomCVForce.h"
#include "openmm/CustomGBForce.h"
#include "openmm/CustomNonbondedForce.h"
#include "openmm/GBSAOBCForce.h"
#include "openmm/MonteCarloAnisotropicBarostat.h"
#include "openmm/MonteCarloBarostat.h"
#include "openmm/MonteCarloFlexibleBarostat.h"
#include "openmm/MonteCarloMembraneBarostat.h"
#include "openmm/NonbondedForce.h"
#include "openmm/OpenMMException.h"
#include "openmm/common/ContextSelector.h"
#include "openmm/common/IntegrationUtilities.h"
#include "openmm/cuda/CudaQueue.h"
#include "openmm/internal/ContextImpl.h"
#include "openmm/reference/SimTKOpenMMRealType.h"

#include <cmath>
#include <iostream>
#include <random>

using namespace NNPPlugin;
using namespace OpenMM;
using std::string;
using std::vector;

static void checkCu(CUresult result, const char* what) {
    if (result != CUDA_SUCCESS) {
        const char* text = nullptr;
        cuGetErrorString(result, &text);
        throw OpenMMException(string("NNP integrator: ") + what + " failed: " + (text ? text : "unknown CUDA error") + " (" +
                              std::to_string((int)result) + ")");
    }
}

CudaIntegrateNNPStepKernel::CudaIntegrateNNPStepKernel(const string& name, const Platform& platform, CudaContext& cu,
                                                       ContextImpl& context)
    : IntegrateNNPStepKernel(name, platform), cu(cu), context(context) {}

CudaIntegrateNNPStepKernel::~CudaIntegrateNNPStepKernel() {
    ContextSelector selector(cu);
    dropGraphs();
    if (ordered != nullptr) cuEventDestroy(ordered);
    if (stream != nullptr) cuStreamDestroy(stream);
}

void CudaIntegrateNNPStepKernel::initialize(const System&, const NNPGraphIntegrator& integrator) {
    cu.initializeContexts();
    ContextSelector selector(cu);
    stochastic = integrator.isStochastic();
    if (!stochastic) {
        verlet.initialize(context, integrator);
    } else {
        const NNPLangevinIntegrator& langevin = static_cast<const NNPLangevinIntegrator&>(integrator);
        seed = (unsigned int)langevin.getRandomNumberSeed();
        if (seed == 0) seed = std::random_device()() | 1u; // 0 asks for a new seed per Context
        ComputeProgram program = cu.compileProgram(NNP_LANGEVIN_SOURCE);
        part1 = program->createKernel("nnpLangevinPart1");
        part2 = program->createKernel("nnpLangevinPart2");
        part3 = program->createKernel("nnpLangevinPart3");
        bool useDouble = cu.getUseDoublePrecision() || cu.getUseMixedPrecision();
        if (useDouble) {
            params.initialize<double>(cu, 2, "nnpLangevinParams");
            oldDelta.initialize<mm_double4>(cu, cu.getPaddedNumAtoms(), "nnpLangevinOldDelta");
        } else {
            params.initialize<float>(cu, 2, "nnpLangevinParams");
            oldDelta.initialize<mm_float4>(cu, cu.getPaddedNumAtoms(), "nnpLangevinOldDelta");
        }
        stepCounter.initialize<unsigned int>(cu, 2, "nnpLangevinStepCounter");
        stepCounter.upload(vector<unsigned int>{0u, 0u});
        IntegrationUtilities& integration = cu.getIntegrationUtilities();
        int numAtoms = cu.getNumAtoms();
        part1->addArg(numAtoms);
        part1->addArg(cu.getPaddedNumAtoms());
        part1->addArg(cu.getVelm());
        part1->addArg(cu.getLongForceBuffer());
        part1->addArg(integration.getStepSize());
        part2->addArg(numAtoms);
        part2->addArg(cu.getVelm());
        part2->addArg(integration.getPosDelta());
        part2->addArg(oldDelta);
        part2->addArg(params);
        part2->addArg(integration.getStepSize());
        part2->addArg(stepCounter);
        part2->addArg(seed);
        part3->addArg(numAtoms);
        part3->addArg(cu.getPosq());
        part3->addArg(cu.getVelm());
        part3->addArg(integration.getPosDelta());
        part3->addArg(oldDelta);
        part3->addArg(integration.getStepSize());
        part3->addArg(stepCounter);
        if (cu.getUseMixedPrecision()) part3->addArg(cu.getPosqCorrection());
    }
    checkCu(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    checkCu(cuEventCreate(&ordered, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
}

/* ------------------------------------------------------------------ one step */

void CudaIntegrateNNPStepKernel::uploadParameters(const NNPGraphIntegrator& integrator) {
    double dt = integrator.getStepSize();
    cu.getIntegrationUtilities().setNextStepSize(dt); // uploads only when it changed
    if (!stochastic) return;
    const NNPLangevinIntegrator& langevin = static_cast<const NNPLangevinIntegrator&>(integrator);
    double temperature = langevin.getTemperature(), friction = langevin.getFriction();
    if (temperature == prevTemperature && friction == prevFriction && dt == prevStepSize) return;
    double kT = BOLTZ * temperature;
    double vscale = std::exp(-dt * friction);
    double noisescale = std::sqrt(kT * (1 - vscale * vscale));
    params.upload(vector<double>{vscale, noisescale}, true);
    prevTemperature = temperature;
    prevFriction = friction;
    prevStepSize = dt;
}

void CudaIntegrateNNPStepKernel::langevinIntegrate(const NNPGraphIntegrator& integrator) {
    uploadParameters(integrator); // no-op inside a capture: execute() uploads before recording
    IntegrationUtilities& integration = cu.getIntegrationUtilities();
    int numAtoms = cu.getNumAtoms();
    double tolerance = integrator.getConstraintTolerance();
    part1->execute(numAtoms);
    integration.applyVelocityConstraints(tolerance);
    part2->execute(numAtoms);
    integration.applyConstraints(tolerance);
    part3->execute(numAtoms);
    integration.computeVirtualSites();
    cu.setTime(cu.getTime() + integrator.getStepSize());
    cu.setStepCount(cu.getStepCount() + 1);
    cu.reorderAtoms();
}

void CudaIntegrateNNPStepKernel::oneStep(const NNPGraphIntegrator& integrator) {
    if (!stochastic) {
        verlet.step(context, integrator);
        return;
    }
    context.updateContextState();
    context.calcForcesAndEnergy(true, false, integrator.getIntegrationForceGroups());
    langevinIntegrate(integrator);
}

void CudaIntegrateNNPStepKernel::eagerSteps(const NNPGraphIntegrator& integrator, int steps) {
    for (int i = 0; i < steps; i++) oneStep(integrator);
}

/* ------------------------------------------------------------------ graphs */

void CudaIntegrateNNPStepKernel::dropGraphs() {
    for (auto& g : graphs) cuGraphExecDestroy(g.second);
    graphs.clear();
}

void CudaIntegrateNNPStepKernel::setFallback(const NNPGraphIntegrator& integrator, const string& reason) {
    fallback = reason;
    replaying = false;
    dropGraphs();
    std::cerr << "openmm-nnp: " << (integrator.isStochastic() ? "NNPLangevinIntegrator" : "NNPVerletIntegrator")
              << " runs eager steps (no CUDA graphs): " << reason << std::endl;
}

/* Forces whose CUDA kernels need the host between steps (static check, before any recording). */
string CudaIntegrateNNPStepKernel::findUncapturable(const System& system) const {
    for (int i = 0; i < system.getNumForces(); i++) {
        const Force& f = system.getForce(i);
        string id = "force " + std::to_string(i) + " (";
        if (auto* nb = dynamic_cast<const NonbondedForce*>(&f)) {
            if (nb->getNonbondedMethod() != NonbondedForce::NoCutoff)
                return id + "NonbondedForce) uses a cutoff: OpenMM rebuilds its neighbour list with host synchronisation";
        } else if (auto* cnb = dynamic_cast<const CustomNonbondedForce*>(&f)) {
            if (cnb->getNonbondedMethod() != CustomNonbondedForce::NoCutoff)
                return id + "CustomNonbondedForce) uses a cutoff: OpenMM rebuilds its neighbour list with host synchronisation";
        } else if (auto* gb = dynamic_cast<const GBSAOBCForce*>(&f)) {
            if (gb->getNonbondedMethod() != GBSAOBCForce::NoCutoff)
                return id + "GBSAOBCForce) uses a cutoff: OpenMM rebuilds its neighbour list with host synchronisation";
        } else if (auto* cgb = dynamic_cast<const CustomGBForce*>(&f)) {
            if (cgb->getNonbondedMethod() != CustomGBForce::NoCutoff)
                return id + "CustomGBForce) uses a cutoff: OpenMM rebuilds its neighbour list with host synchronisation";
        } else if (dynamic_cast<const MonteCarloBarostat*>(&f) || dynamic_cast<const MonteCarloAnisotropicBarostat*>(&f) ||
                   dynamic_cast<const MonteCarloMembraneBarostat*>(&f) || dynamic_cast<const MonteCarloFlexibleBarostat*>(&f)) {
            return id + "Monte Carlo barostat) changes the box on the host between steps";
        } else if (dynamic_cast<const AndersenThermostat*>(&f)) {
            return id + "AndersenThermostat) passes its random-number offset to its kernel by value";
        } else if (auto* cm = dynamic_cast<const CMMotionRemover*>(&f)) {
            if (cm->getFrequency() > 1)
                return id + "CMMotionRemover with frequency " + std::to_string(cm->getFrequency()) +
                       ") decides on the host at which steps it runs (frequency 1 can be recorded)";
        } else if (dynamic_cast<const CustomCVForce*>(&f) || dynamic_cast<const ATMForce*>(&f)) {
            return id + "CustomCVForce/ATMForce) evaluates inner Contexts on the host every step";
        }
    }
    if (cu.getNonbondedUtilities().getUseCutoff())
        return "a force uses OpenMM's cutoff neighbour list, which is rebuilt with host synchronisation";
    // Constraints: SHAKE stars (a centre with up to 3 arms of equal length to equal-mass atoms that
    // have no other constraint) are plain kernels; anything else may go to CCMA, whose iterations
    // stop on a convergence flag read by the host.
    if (system.getNumConstraints() > 0) {
        vector<vector<int>> partners(system.getNumParticles());
        for (int c = 0; c < system.getNumConstraints(); c++) {
            int a, b;
            double d;
            system.getConstraintParameters(c, a, b, d);
            partners[a].push_back(c);
            partners[b].push_back(c);
        }
        for (int centre = 0; centre < system.getNumParticles(); centre++) {
            if (partners[centre].size() < 2) continue; // no constraint, an arm of a centre, or an isolated pair
            if (partners[centre].size() > 3) return "the System has constraints that OpenMM solves with CCMA (an atom with more than 3 constraints)";
            double length = -1, mass = -1;
            for (int c : partners[centre]) {
                int a, b;
                double d;
                system.getConstraintParameters(c, a, b, d);
                int other = a == centre ? b : a;
                if (partners[other].size() != 1 || (length >= 0 && (d != length || system.getParticleMass(other) != mass)))
                    return "the System has constraints that OpenMM may solve with CCMA (not all constraints form SHAKE clusters)";
                length = d;
                mass = system.getParticleMass(other);
            }
        }
    }
    return "";
}

CUgraphExec CudaIntegrateNNPStepKernel::record(const NNPGraphIntegrator& integrator, int steps) {
    double time = cu.getTime();
    long long stepCount = cu.getStepCount();
    checkCu(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture");
    string error;
    try {
        for (int i = 0; i < steps; i++) oneStep(integrator);
    } catch (const std::exception& e) {
        error = e.what();
    }
    CUgraph graph = nullptr;
    CUresult ended = cuStreamEndCapture(stream, &graph);
    cu.setTime(time); // recording ran nothing on the GPU: the host-side clock goes back
    cu.setStepCount(stepCount);
    if (error.empty() && ended != CUDA_SUCCESS) {
        const char* text = nullptr;
        cuGetErrorString(ended, &text);
        error = string("the stream capture was invalidated: ") + (text ? text : "unknown CUDA error");
    }
    CUgraphExec exec = nullptr;
    if (error.empty()) {
        CUresult made = cuGraphInstantiate(&exec, graph, 0);
        if (made != CUDA_SUCCESS) {
            const char* text = nullptr;
            cuGetErrorString(made, &text);
            error = string("cuGraphInstantiate failed: ") + (text ? text : "unknown CUDA error");
            exec = nullptr;
        }
    }
    if (graph != nullptr) cuGraphDestroy(graph);
    if (!error.empty()) {
        setFallback(integrator, "a step could not be recorded into a CUDA graph: " + error);
        return nullptr;
    }
    recordings++;
    return exec;
}

void CudaIntegrateNNPStepKernel::execute(ContextImpl&, const NNPGraphIntegrator& integrator, int steps) {
    ContextSelector selector(cu);
    if (steps == 0) return;
    if (!integrator.getUseGraphs() || !fallback.empty()) {
        replaying = false;
        eagerSteps(integrator, steps);
        return;
    }
    if (!staticChecked) {
        staticChecked = true;
        string cause = findUncapturable(context.getSystem());
        if (!cause.empty()) {
            setFallback(integrator, cause);
            eagerSteps(integrator, steps);
            return;
        }
    }
    // What the graphs baked in by value: if any of it changed, they are recorded again.
    Vec3 box[3];
    cu.getPeriodicBoxVectors(box[0], box[1], box[2]);
    bool sameBox = box[0] == recordedBox[0] && box[1] == recordedBox[1] && box[2] == recordedBox[2];
    if (invalidated || !sameBox || integrator.getConstraintTolerance() != recordedTolerance ||
        integrator.getIntegrationForceGroups() != recordedGroups || integrator.getStepsPerGraph() != recordedStepsPerGraph) {
        dropGraphs();
        invalidated = false;
        for (int k = 0; k < 3; k++) recordedBox[k] = box[k];
        recordedTolerance = integrator.getConstraintTolerance();
        recordedGroups = integrator.getIntegrationForceGroups();
        recordedStepsPerGraph = integrator.getStepsPerGraph();
    }

    // Our stream runs after everything already queued on OpenMM's, and becomes its current queue.
    CUstream defaultStream = cu.getCurrentStream();
    checkCu(cuEventRecord(ordered, defaultStream), "cuEventRecord");
    checkCu(cuStreamWaitEvent(stream, ordered, 0), "cuStreamWaitEvent");
    cu.setCurrentQueue(std::make_shared<CudaQueue>(stream));
    try {
        int remaining = steps;
        if (needEager) { // host work pending (first step, changed parameters): one plain step
            oneStep(integrator);
            remaining--;
            needEager = false;
        }
        uploadParameters(integrator);
        int k = integrator.getStepsPerGraph();
        while (remaining > 0) {
            int n = k;
            if (remaining < k)
                for (n = 1; 2 * n <= remaining;) n *= 2;
            CUgraphExec exec;
            auto found = graphs.find(n);
            if (found != graphs.end()) {
                exec = found->second;
            } else {
                exec = record(integrator, n);
                if (exec == nullptr) {
                    eagerSteps(integrator, remaining);
                    break;
                }
                graphs[n] = exec;
            }
            checkCu(cuGraphLaunch(exec, stream), "cuGraphLaunch");
            double dt = integrator.getStepSize();
            for (int i = 0; i < n; i++) cu.setTime(cu.getTime() + dt); // as n eager steps add it
            cu.setStepCount(cu.getStepCount() + n);
            remaining -= n;
        }
        // OpenMM's host transfers are not ordered after our stream: finish before returning.
        checkCu(cuStreamSynchronize(stream), "cuStreamSynchronize");
    } catch (...) {
        cuStreamSynchronize(stream);
        cu.restoreDefaultQueue();
        throw;
    }
    cu.restoreDefaultQueue();
    replaying = fallback.empty() && !graphs.empty();
}

/* ------------------------------------------------------------------ the rest */

double CudaIntegrateNNPStepKernel::computeKineticEnergy(ContextImpl&, const NNPGraphIntegrator& integrator) {
    ContextSelector selector(cu);
    if (!stochastic) return verlet.computeKineticEnergy(context, integrator);
    return cu.getIntegrationUtilities().computeKineticEnergy(0.0);
}

void CudaIntegrateNNPStepKernel::stateChanged(State::DataType changed) {
    // Positions and velocities live in device buffers the graphs read: nothing to do. A global
    // parameter or a Force's updateParametersInContext may change what kernels get by value, and
    // their host code uploads new values only when it runs: one eager step, then new graphs.
    if (changed == State::Parameters || changed == State::Energy) {
        invalidated = true;
        needEager = true;
    }
}

void CudaIntegrateNNPStepKernel::createCheckpoint(std::ostream& stream) const {
    unsigned int state[3] = {seed, 0, 0};
    if (stochastic) {
        ContextSelector selector(cu);
        vector<unsigned int> counter;
        const_cast<ComputeArray&>(stepCounter).download(counter);
        state[1] = counter[0];
        state[2] = counter[1];
    }
    stream.write(reinterpret_cast<const char*>(state), sizeof(state));
}

void CudaIntegrateNNPStepKernel::loadCheckpoint(std::istream& stream) {
    unsigned int state[3];
    stream.read(reinterpret_cast<char*>(state), sizeof(state));
    if (!stream) throw OpenMMException("NNP integrator: the checkpoint ends before the integrator's random-number state");
    if (!stochastic) return;
    ContextSelector selector(cu);
    stepCounter.upload(vector<unsigned int>{state[1], state[2]});
    if (state[0] != seed) {
        seed = state[0];
        part2->setArg(7, seed);
        invalidated = true; // the seed is baked into recorded graphs
    }
}
