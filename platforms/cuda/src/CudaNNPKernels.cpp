#include "CudaNNPKernels.h"
#include "internal/NNPForceImpl.h"
#include "openmm/OpenMMException.h"
#include "openmm/common/ComputeForceInfo.h"
#include "openmm/common/ContextSelector.h"

#include <map>
#include <unordered_map>

using namespace NNPPlugin;
using namespace OpenMM;
using std::vector;

/* What OpenMM's CUDA platform needs to know to reorder atoms: each batch is a group (its atoms move
   together), and two batches are identical when they hold the same elements in the same order, so
   OpenMM may swap whole molecules of one kind (the kernels read positions through OpenMM's atom
   index, and energies go to each atom's own batch). Comparing batches by their elements, not their
   index, keeps OpenMM's grouping of identical molecules linear in the number of replicas. */
class NNPPlugin::NNPForceInfo : public ComputeForceInfo {
public:
    explicit NNPForceInfo(const NNPForce& force) { update(force); }
    void update(const NNPForce& force) {
        elementOf.clear();
        groups.clear();
        for (int i = 0; i < force.getNumAtoms(); i++) {
            int particle, z, batch;
            force.getAtomParameters(i, particle, z, batch);
            elementOf[particle] = z;
            if ((int)groups.size() <= batch) groups.resize(batch + 1);
            groups[batch].push_back(particle);
        }
        // Batches with the same element sequence get the same kind.
        std::map<vector<int>, int> kinds;
        kindOf.assign(groups.size(), 0);
        for (size_t b = 0; b < groups.size(); b++) {
            vector<int> elements;
            elements.reserve(groups[b].size());
            for (int particle : groups[b]) elements.push_back(elementOf[particle]);
            kindOf[b] = kinds.emplace(std::move(elements), (int)kinds.size()).first->second;
        }
    }
    bool areParticlesIdentical(int p1, int p2) override {
        auto a = elementOf.find(p1), b = elementOf.find(p2);
        if (a == elementOf.end() || b == elementOf.end()) return a == b;
        return a->second == b->second;
    }
    int getNumParticleGroups() override { return groups.size(); }
    void getParticlesInGroup(int index, vector<int>& particles) override { particles = groups[index]; }
    bool areGroupsIdentical(int g1, int g2) override { return kindOf[g1] == kindOf[g2]; }

private:
    std::unordered_map<int, int> elementOf; // particle → atomic number
    vector<vector<int>> groups;             // batch → its particles, in the force's order
    vector<int> kindOf;                     // batch → index of its element sequence
};

CudaCalcNNPForceKernel::CudaCalcNNPForceKernel(const std::string& name, const Platform& platform, CudaContext& cu)
    : CalcNNPForceKernel(name, platform), cu(cu), plan(nullptr), info(nullptr), periodic(false) {}

CudaCalcNNPForceKernel::~CudaCalcNNPForceKernel() {
    if (plan != nullptr) {
        ContextSelector selector(cu);
        nnp_plan_free(plan);
    }
}

void CudaCalcNNPForceKernel::initialize(const System&, const NNPForce& force) {
    model = force.getInternalModel();
    checkNNP(nnp_plan_create(model->get(), &plan), "cannot create a plan");
    checkNNP(nnp_plan_set_units(plan, NNP_UNITS_NM_KJMOL), "cannot set units");
    checkNNP(nnp_plan_set_cuda_precision(plan, cu.getUseDoublePrecision() ? NNP_PRECISION_DOUBLE : NNP_PRECISION_SINGLE),
             "cannot set the precision");
    setAtoms(force);
    info = new NNPForceInfo(force);
    cu.addForce(info); // the context owns it
}

void CudaCalcNNPForceKernel::setAtoms(const NNPForce& force) {
    setPlanAtoms(plan, force, firstBatch, endBatch);
    periodic = force.usesPeriodicBoundaryConditions();
}

void CudaCalcNNPForceKernel::setBatchRange(const NNPForce& force, int first, int end) {
    firstBatch = first;
    endBatch = end;
    if (plan != nullptr) {
        ContextSelector selector(cu);
        setAtoms(force);
    }
}

void CudaCalcNNPForceKernel::evaluate(bool includeForces, bool includeEnergy) {
    nnp_cuda_io io = {};
    io.stream = cu.getCurrentStream();
    io.positions = reinterpret_cast<void*>(cu.getPosq().getDevicePointer());
    io.positions_format = cu.getUseDoublePrecision() ? NNP_POSITIONS_DOUBLE4 : NNP_POSITIONS_FLOAT4;
    io.sorted_particles = reinterpret_cast<const int32_t*>(cu.getAtomIndexArray().getDevicePointer());
    io.n_particles = cu.getNumAtoms();
    double box[9];
    if (periodic) {
        Vec3 a, b, c;
        cu.getPeriodicBoxVectors(a, b, c);
        for (int k = 0; k < 3; k++) box[k] = a[k], box[3 + k] = b[k], box[6 + k] = c[k];
        io.box = box;
    }
    if (includeForces) {
        io.forces = reinterpret_cast<void*>(cu.getForce().getDevicePointer());
        io.forces_format = NNP_FORCES_FIXED_POINT;
        io.forces_stride = cu.getPaddedNumAtoms();
    }
    if (includeEnergy) {
        io.energy = reinterpret_cast<void*>(cu.getEnergyBuffer().getDevicePointer());
        io.energy_is_double = cu.getUseDoublePrecision() || cu.getUseMixedPrecision();
    }
    checkNNP(nnp_evaluate_cuda(plan, &io), "CUDA evaluation failed");
}

double CudaCalcNNPForceKernel::execute(ContextImpl&, bool includeForces, bool includeEnergy) {
    if (nnp_plan_num_atoms(plan) == 0) return 0.0; // a device of a split without batches
    ContextSelector selector(cu);
    evaluate(includeForces, includeEnergy);
    return 0.0; // the energy was added to OpenMM's energy buffer on the GPU
}

vector<double> CudaCalcNNPForceKernel::lastBatchEnergies() {
    vector<double> energies(nnp_plan_num_batches(plan));
    if (!energies.empty()) {
        ContextSelector selector(cu);
        checkNNP(nnp_cuda_batch_energies(plan, cu.getCurrentStream(), energies.data()), "cannot read batch energies");
    }
    // batches at the end of the range without atoms are not in the plan: energy 0
    if (endBatch >= 0) energies.resize(endBatch - firstBatch, 0.0);
    return energies;
}

vector<double> CudaCalcNNPForceKernel::getBatchEnergies(ContextImpl&) {
    ContextSelector selector(cu);
    evaluate(false, false);
    vector<double> energies(nnp_plan_num_batches(plan));
    checkNNP(nnp_cuda_batch_energies(plan, cu.getCurrentStream(), energies.data()), "cannot read batch energies");
    return energies;
}

void CudaCalcNNPForceKernel::copyParametersToContext(ContextImpl&, const NNPForce& force) {
    if (force.getInternalModel() != model)
        throw OpenMMException("NNPForce: updateParametersInContext cannot change the model");
    ContextSelector selector(cu);
    setAtoms(force);
    info->update(force);
    cu.invalidateMolecules(info);
}

/* ------------------------------------------------------------------ several GPUs */

/** One device's evaluation, on that device's work thread. */
class CudaParallelCalcNNPForceKernel::Task : public ComputeContext::WorkTask {
public:
    Task(ContextImpl& context, CudaCalcNNPForceKernel& kernel, bool includeForces, bool includeEnergy, double& energy)
        : context(context), kernel(kernel), includeForces(includeForces), includeEnergy(includeEnergy), energy(energy) {}
    void execute() override { energy += kernel.execute(context, includeForces, includeEnergy); }

private:
    ContextImpl& context;
    CudaCalcNNPForceKernel& kernel;
    bool includeForces, includeEnergy;
    double& energy;
};

CudaParallelCalcNNPForceKernel::CudaParallelCalcNNPForceKernel(const std::string& name, const Platform& platform,
                                                               CudaPlatform::PlatformData& data)
    : CalcNNPForceKernel(name, platform), data(data) {
    for (CudaContext* cu : data.contexts) kernels.push_back(Kernel(new CudaCalcNNPForceKernel(name, platform, *cu)));
}

/* Splits the batches into one contiguous range per device by cost; with context, the cost counts the
   pairs at the current positions, else atoms only (before any positions exist). */
static vector<int> splitBatches(const NNPForce& force, int numDevices, const vector<Vec3>* positions, const Vec3* box) {
    nnp_plan* plan = nullptr;
    checkNNP(nnp_plan_create(force.getInternalModel()->get(), &plan), "cannot create a plan");
    std::unique_ptr<nnp_plan, void (*)(nnp_plan*)> owned(plan, nnp_plan_free);
    checkNNP(nnp_plan_set_units(plan, NNP_UNITS_NM_KJMOL), "cannot set units");
    vector<int32_t> particles = setPlanAtoms(plan, force);
    int numBatches = nnp_plan_num_batches(plan);
    vector<double> cost(numBatches, 0.0);
    if (positions != nullptr) {
        vector<double> xyz(3 * particles.size());
        for (size_t i = 0; i < particles.size(); i++)
            for (int k = 0; k < 3; k++) xyz[3 * i + k] = (*positions)[particles[i]][k];
        double b[9];
        if (box != nullptr)
            for (int v = 0; v < 3; v++)
                for (int k = 0; k < 3; k++) b[3 * v + k] = box[v][k];
        checkNNP(nnp_plan_batch_costs(plan, xyz.data(), box != nullptr ? b : nullptr, cost.data()),
                 "cannot split the batches across the GPUs");
    } else {
        for (int i = 0; i < force.getNumAtoms(); i++) {
            int p, z, batch;
            force.getAtomParameters(i, p, z, batch);
            cost[batch] += 1.0;
        }
    }
    vector<int32_t> first(numDevices + 1);
    checkNNP(nnp_partition_batches(numBatches, cost.data(), numDevices, first.data()), "cannot split the batches across the GPUs");
    return vector<int>(first.begin(), first.end());
}

void CudaParallelCalcNNPForceKernel::initialize(const System& system, const NNPForce& f) {
    force = &f;
    forceGroup = f.getForceGroup();
    first = splitBatches(f, (int)kernels.size(), nullptr, nullptr);
    numBatches = first.back();
    for (size_t d = 0; d < kernels.size(); d++) {
        device(d).setBatchRange(f, first[d], first[d + 1]);
        device(d).initialize(system, f);
    }
}

void CudaParallelCalcNNPForceKernel::split(ContextImpl& context) {
    data.syncContexts(); // the devices' queues are empty: positions can be read, ranges changed
    vector<Vec3> positions;
    context.getPositions(positions);
    Vec3 box[3];
    context.getPeriodicBoxVectors(box[0], box[1], box[2]);
    vector<int> next = splitBatches(*force, (int)kernels.size(), &positions,
                                    force->usesPeriodicBoundaryConditions() ? box : nullptr);
    if (next != first)
        for (size_t d = 0; d < kernels.size(); d++) device(d).setBatchRange(*force, next[d], next[d + 1]);
    first = next;
    balanced = true;
}

double CudaParallelCalcNNPForceKernel::execute(ContextImpl& context, bool includeForces, bool includeEnergy) {
    if (!balanced) split(context);
    for (size_t d = 0; d < kernels.size(); d++) {
        if (first[d] == first[d + 1]) continue;
        data.contexts[d]->getWorkThread().addTask(
            new Task(context, device(d), includeForces, includeEnergy, data.contextEnergy[d]));
    }
    return 0.0; // each device adds its share to its own energy buffer
}

vector<double> CudaParallelCalcNNPForceKernel::getBatchEnergies(ContextImpl& context) {
    // An energy evaluation of this force's group on every device (the devices get the current
    // positions first), then the devices' batch energies in batch order.
    context.calcForcesAndEnergy(false, true, 1 << forceGroup);
    data.syncContexts();
    vector<double> energies;
    energies.reserve(numBatches);
    for (size_t d = 0; d < kernels.size(); d++) {
        if (first[d] == first[d + 1]) continue;
        vector<double> part = device(d).lastBatchEnergies();
        energies.insert(energies.end(), part.begin(), part.end());
    }
    return energies;
}

void CudaParallelCalcNNPForceKernel::copyParametersToContext(ContextImpl& context, const NNPForce& f) {
    data.syncContexts();
    force = &f;
    forceGroup = f.getForceGroup();
    vector<int> next = splitBatches(f, (int)kernels.size(), nullptr, nullptr);
    for (size_t d = 0; d < kernels.size(); d++) {
        device(d).setBatchRange(f, next[d], next[d + 1]);
        device(d).copyParametersToContext(context, f);
    }
    first = next;
    numBatches = first.back();
    balanced = false; // split again by pairs at the next evaluation
}
