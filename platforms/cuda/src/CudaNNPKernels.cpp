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
    setPlanAtoms(plan, force);
    periodic = force.usesPeriodicBoundaryConditions();
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
    ContextSelector selector(cu);
    evaluate(includeForces, includeEnergy);
    return 0.0; // the energy was added to OpenMM's energy buffer on the GPU
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
