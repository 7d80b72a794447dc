#include "ReferenceNNPKernels.h"
#include "internal/NNPForceImpl.h"
#include "openmm/OpenMMException.h"
#include "openmm/internal/ContextImpl.h"
#include "openmm/reference/ReferencePlatform.h"

#include <algorithm>
#include <string>

using namespace NNPPlugin;
using namespace OpenMM;
using std::vector;

static ReferencePlatform::PlatformData& platformData(ContextImpl& context) {
    return *reinterpret_cast<ReferencePlatform::PlatformData*>(context.getPlatformData());
}

ReferenceCalcNNPForceKernel::ReferenceCalcNNPForceKernel(const std::string& name, const Platform& platform)
    : CalcNNPForceKernel(name, platform), plan(nullptr), periodic(false) {}

ReferenceCalcNNPForceKernel::~ReferenceCalcNNPForceKernel() { nnp_plan_free(plan); }

void ReferenceCalcNNPForceKernel::initialize(const System&, const NNPForce& force) {
    model = force.getInternalModel();
    checkNNP(nnp_plan_create(model->get(), &plan), "cannot create a plan");
    checkNNP(nnp_plan_set_units(plan, NNP_UNITS_NM_KJMOL), "cannot set units");
    setAtoms(force);
}

void ReferenceCalcNNPForceKernel::setAtoms(const NNPForce& force) {
    particles = setPlanAtoms(plan, force);
    int n = particles.size();
    periodic = force.usesPeriodicBoundaryConditions();
    positions.resize(3 * n);
    forces.resize(3 * n);
    batchEnergies.resize(nnp_plan_num_batches(plan));
}

double ReferenceCalcNNPForceKernel::evaluate(ContextImpl& context, bool withForces) {
    if (!threadsSet) {
        // On the CPU platform the evaluation uses as many threads as OpenMM's Threads property says
        // (which follows OPENMM_CPU_THREADS), and float32 networks; elsewhere all cores (or
        // NNP_NUM_THREADS) and double precision.
        const Platform& platform = context.getPlatform();
        if (platform.getName() == "CPU") {
            int threads = 0;
            try {
                threads = std::stoi(platform.getPropertyValue(context.getOwner(), "Threads"));
            } catch (const std::exception&) {
                threads = 0;
            }
            if (threads > 0) checkNNP(nnp_plan_set_num_threads(plan, std::min(threads, NNP_MAX_THREADS)), "cannot set the thread count");
            // OpenMM's CPU platform computes in single precision; Reference stays double and exact.
            checkNNP(nnp_plan_set_cpu_precision(plan, NNP_PRECISION_SINGLE), "cannot set the precision");
        }
        threadsSet = true;
    }
    ReferencePlatform::PlatformData& data = platformData(context);
    const vector<Vec3>& pos = *data.positions;
    for (size_t i = 0; i < particles.size(); i++)
        for (int k = 0; k < 3; k++) positions[3 * i + k] = pos[particles[i]][k];
    double box[9];
    if (periodic)
        for (int v = 0; v < 3; v++)
            for (int k = 0; k < 3; k++) box[3 * v + k] = data.periodicBoxVectors[v][k];
    double energy = 0;
    checkNNP(nnp_evaluate_cpu(plan, positions.data(), periodic ? box : nullptr, &energy, batchEnergies.data(),
                              withForces ? forces.data() : nullptr),
             "evaluation failed");
    return energy;
}

double ReferenceCalcNNPForceKernel::execute(ContextImpl& context, bool includeForces, bool) {
    double energy = evaluate(context, includeForces);
    if (includeForces) {
        vector<Vec3>& f = *platformData(context).forces;
        for (size_t i = 0; i < particles.size(); i++)
            f[particles[i]] += Vec3(forces[3 * i], forces[3 * i + 1], forces[3 * i + 2]);
    }
    return energy;
}

vector<double> ReferenceCalcNNPForceKernel::getBatchEnergies(ContextImpl& context) {
    evaluate(context, false);
    return batchEnergies;
}

void ReferenceCalcNNPForceKernel::copyParametersToContext(ContextImpl&, const NNPForce& force) {
    if (force.getInternalModel() != model)
        throw OpenMMException("NNPForce: updateParametersInContext cannot change the model");
    setAtoms(force);
}

void PlainIntegrateNNPStepKernel::initialize(const System&, const NNPGraphIntegrator& integrator) {
    stepper.initialize(context, integrator);
}

void PlainIntegrateNNPStepKernel::execute(ContextImpl& ctx, const NNPGraphIntegrator& integrator, int steps) {
    for (int i = 0; i < steps; i++) stepper.step(ctx, integrator);
}

double PlainIntegrateNNPStepKernel::computeKineticEnergy(ContextImpl& ctx, const NNPGraphIntegrator& integrator) {
    return stepper.computeKineticEnergy(ctx, integrator);
}
