#include "CudaNNPKernels.h"
#include "openmm/OpenMMException.h"
#include "openmm/common/ComputeForceInfo.h"
#include "openmm/common/ContextSelector.h"

#include <map>

using namespace NNPPlugin;
using namespace OpenMM;
using std::vector;

/*
 * Tells OpenMM's atom reordering about the batches: particles are interchangeable only within one
 * batch and with the same element, and each batch is one group (molecule), so that OpenMM never
 * swaps the coordinates of molecules that belong to different batches.
 */
class NNPPlugin::NNPForceInfo : public ComputeForceInfo {
public:
    explicit NNPForceInfo(const NNPForce& force) { update(force); }
    void update(const NNPForce& force) {
        atomOf.clear();
        groups.clear();
        for (int i = 0; i < force.getNumAtoms(); i++) {
            int particle, z, batch;
            force.getAtomParameters(i, particle, z, batch);
            atomOf[particle] = {z, batch};
            if ((int)groups.size() <= batch) groups.resize(batch + 1);
            groups[batch].push_back(particle);
        }
    }
    bool areParticlesIdentical(int p1, int p2) override {
        auto a = atomOf.find(p1), b = atomOf.find(p2);
        if (a == atomOf.end() || b == atomOf.end()) return a == b;
        return a->second == b->second;
    }
    int getNumParticleGroups() override { return groups.size(); }
    void getParticlesInGroup(int index, vector<int>& particles) override { particles = groups[index]; }
    bool areGroupsIdentical(int g1, int g2) override { return g1 == g2; }

private:
    std::map<int, std::pair<int, int>> atomOf; // particle → (element, batch)
    vector<vector<int>> groups;
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
