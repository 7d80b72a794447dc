/* NNPForce in a CUDA Context on several devices (DeviceIndex "0,1", or "0,0" — two CUDA contexts on
   one GPU — where the machine has one): energies, forces and per-batch energies against a Context on
   one device, in double and mixed precision; more devices than batches; a changed parameter reaching
   every device; Verlet steps; the graph integrators' refusal. With N, the first N drug-like
   molecules (default 13). Exits 77 without a CUDA platform.
     TestCudaNNPMultiDevice [N] */
#include "NNPIntegrators.h"
#include "TestHelpers.h"

#include <cstring>

const char* platformName = "CUDA";
std::map<string, string> platformProperties;

static int failures = 0;
#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            std::cerr << __FILE__ << ":" << __LINE__ << ": CHECK failed: " #cond << std::endl; \
            failures++;                                                                      \
        }                                                                                    \
    } while (0)

/* The first n drug-like molecules, one batch each, on a 3 nm grid. */
static vector<Molecule> druglike(int n) {
    vector<Molecule> mols;
    char name[64];
    for (int k = 1; (int)mols.size() < n && k < 10000; k++) {
        snprintf(name, sizeof name, "molecules/druglike/drugbank-%04d.xyz", k);
        if (!exists(sharedPath(name))) continue;
        mols.push_back(readXyz(name));
        const int b = (int)mols.size() - 1;
        for (Vec3& p : mols.back().pos) p += Vec3(3.0 * (b % 10), 3.0 * (b / 10 % 10), 3.0 * (b / 100));
    }
    return mols;
}

static double rmsRelative(const vector<Vec3>& ref, const vector<Vec3>& x) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) num += (x[i] - ref[i]).dot(x[i] - ref[i]), den += ref[i].dot(ref[i]);
    return std::sqrt(num / den);
}

static string devices2; // "0,1" on a machine with two GPUs, else "0,0"

/* One device against `devices`: batch energies (bit for bit where `identical`), the total, forces. */
static void compare(const vector<Molecule>& mols, const string& precision, const string& devices) {
    System system;
    vector<Vec3> positions;
    NNPForce* force = buildSystem(system, positions, mols, ani2x());
    VerletIntegrator i1(0.001), i2(0.001);
    Context one(system, i1, Platform::getPlatformByName("CUDA"), {{"Precision", precision}, {"DeviceIndex", "0"}});
    Context several(system, i2, Platform::getPlatformByName("CUDA"), {{"Precision", precision}, {"DeviceIndex", devices}});
    CHECK(several.getPlatform().getPropertyValue(several, "DeviceIndex") == devices);
    one.setPositions(positions);
    several.setPositions(positions);
    State s1 = one.getState(State::Energy | State::Forces), s2 = several.getState(State::Energy | State::Forces);
    vector<double> b1 = force->getBatchEnergies(one), b2 = force->getBatchEnergies(several);
    CHECK(b1.size() == mols.size());
    CHECK(b2.size() == b1.size());
    if (b2.size() != b1.size()) return;
    double worst = 0, sum = 0;
    int same = 0;
    for (size_t b = 0; b < b1.size(); b++) {
        worst = std::max(worst, std::fabs(b2[b] - b1[b]) / std::fabs(b1[b]));
        same += b2[b] == b1[b];
        sum += b2[b];
    }
    const double frms = rmsRelative(s1.getForces(), s2.getForces());
    const double etot = std::fabs(s2.getPotentialEnergy() - s1.getPotentialEnergy()) / std::fabs(s1.getPotentialEnergy());
    const bool dbl = precision == "double";
    std::cout << precision << ", DeviceIndex " << devices << " against one device, " << mols.size() << " batches ("
              << positions.size() << " atoms): " << same << " batch energies bit-identical, worst batch " << std::setprecision(3)
              << worst << " relative, total " << etot << ", forces rel RMS " << frms << std::endl;
    CHECK(worst <= (dbl ? 1e-13 : 1e-7));
    CHECK(etot <= (dbl ? 1e-13 : 1e-7));
    CHECK(frms <= (dbl ? 1e-12 : 1e-5));
    /* the gathered batch energies sum to the Context's energy */
    CHECK(std::fabs(sum - s2.getPotentialEnergy()) <= 1e-9 * std::fabs(sum));

    /* a changed ensemble member and a batch moved between molecules reach every device */
    force->setEnsembleMember(3);
    int p, z, b;
    force->getAtomParameters(0, p, z, b);
    force->updateParametersInContext(one);
    force->updateParametersInContext(several);
    vector<double> c1 = force->getBatchEnergies(one), c2 = force->getBatchEnergies(several);
    double worst2 = 0;
    for (size_t k = 0; k < c1.size() && k < c2.size(); k++) worst2 = std::max(worst2, std::fabs(c2[k] - c1[k]) / std::fabs(c1[k]));
    std::cout << "  ensemble member 3: worst batch " << worst2 << " relative (changed by " << std::fabs(c1[0] - b1[0]) << " kJ/mol)"
              << std::endl;
    CHECK(c2.size() == c1.size());
    CHECK(c1[0] != b1[0]);
    CHECK(worst2 <= (dbl ? 1e-13 : 1e-7));

    /* Verlet steps: the same trajectory */
    one.setVelocitiesToTemperature(300, 3);
    several.setVelocities(one.getState(State::Velocities).getVelocities());
    i1.step(20);
    i2.step(20);
    const vector<Vec3>& p1 = one.getState(State::Positions).getPositions();
    const vector<Vec3>& p2 = several.getState(State::Positions).getPositions();
    double moved = 0;
    for (size_t i = 0; i < p1.size(); i++) moved = std::max(moved, std::sqrt((p1[i] - p2[i]).dot(p1[i] - p2[i])));
    std::cout << "  20 Verlet steps: largest position difference " << moved << " nm" << std::endl;
    CHECK(moved <= (dbl ? 1e-12 : 1e-5));
}

/* Three devices for two batches: one device has none. */
static void moreDevicesThanBatches() {
    vector<Molecule> mols = druglike(2);
    System system;
    vector<Vec3> positions;
    NNPForce* force = buildSystem(system, positions, mols, ani2x());
    VerletIntegrator i1(0.001), i2(0.001);
    const string three = devices2 + "," + devices2.substr(0, 1);
    Context one(system, i1, Platform::getPlatformByName("CUDA"), {{"Precision", "double"}, {"DeviceIndex", "0"}});
    Context several(system, i2, Platform::getPlatformByName("CUDA"), {{"Precision", "double"}, {"DeviceIndex", three}});
    one.setPositions(positions);
    several.setPositions(positions);
    vector<double> b1 = force->getBatchEnergies(one), b2 = force->getBatchEnergies(several);
    const double e1 = one.getState(State::Energy).getPotentialEnergy(), e2 = several.getState(State::Energy).getPotentialEnergy();
    std::cout << "DeviceIndex " << three << ", 2 batches: energy " << std::setprecision(15) << e2 << " (one device " << e1 << ")"
              << std::setprecision(3) << std::endl;
    CHECK(b2.size() == 2);
    CHECK(std::fabs(e2 - e1) <= 1e-12 * std::fabs(e1));
    for (size_t b = 0; b < b1.size() && b < b2.size(); b++) CHECK(std::fabs(b2[b] - b1[b]) <= 1e-12 * std::fabs(b1[b]));
}

/* The graph integrators need one device: a clear refusal. */
static void integratorsRefuse() {
    vector<Molecule> mols = druglike(2);
    System system;
    vector<Vec3> positions;
    buildSystem(system, positions, mols, ani2x());
    NNPVerletIntegrator integrator(0.0005);
    expectError("one GPU", [&] {
        Context c(system, integrator, Platform::getPlatformByName("CUDA"), {{"DeviceIndex", devices2}});
        c.setPositions(positions);
        integrator.step(1);
    });
}

int main(int argc, char** argv) {
    try {
        if (!platformAvailable("CalcNNPForce")) return 77;
        devices2 = twoCudaDevices();
        if (devices2.empty()) {
            std::cout << "skipped: no Context on two CUDA devices can be created here" << std::endl;
            return 77;
        }
        const int n = argc > 1 ? atoi(argv[1]) : 13;
        vector<Molecule> mols = druglike(n);
        compare(mols, "double", devices2);
        compare(mols, "mixed", devices2);
        /* identical copies of one molecule: every device runs the same arithmetic per batch */
        vector<Molecule> copies(8, mols[1]);
        for (size_t k = 0; k < copies.size(); k++)
            for (Vec3& p : copies[k].pos) p += Vec3(3.0 * k, 0, 0) - (mols[1].pos[0] - mols[0].pos[0]);
        compare(copies, "mixed", devices2);
        moreDevicesThanBatches();
        integratorsRefuse();
    } catch (const std::exception& e) {
        std::cout << "exception: " << e.what() << std::endl;
        return 1;
    }
    if (failures > 0) {
        std::cout << failures << " check(s) failed" << std::endl;
        return 1;
    }
    std::cout << "Done" << std::endl;
    return 0;
}
