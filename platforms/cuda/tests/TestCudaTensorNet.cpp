/* A TensorNet NNPForce on the CUDA platform against the Reference platform (energy, forces, per-batch
   energies of charged batches, in mixed and double precision), a changed charge reaching the running
   Context, and NNPVerletIntegrator / NNPLangevinIntegrator replaying whole steps from CUDA graphs
   (energy conserved under Verlet, equal to a plain VerletIntegrator's first steps), a Context on
   two devices against one (charges per device included); with N, also
   the NVE drift of N drug-like molecules (one batch each) over 0.5 ps.
     TestCudaTensorNet MODEL.nnpm [N]   (a converted TensorNet checkpoint) */
#include "NNPIntegrators.h"
#include "TestHelpers.h"

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

/* Three drug-like molecules, one batch each, charges +1, 0, −1, 3 nm apart. */
static NNPForce* build(System& system, vector<Vec3>& positions, const string& model) {
    vector<Molecule> mols;
    for (const char* d : drugs) mols.push_back(readXyz(d));
    for (size_t k = 0; k < mols.size(); k++)
        for (Vec3& p : mols[k].pos) p += Vec3(3.0 * k, 0, 0);
    NNPForce* force = buildSystem(system, positions, mols, model);
    for (int b = 0; b < 3; b++) force->setBatchCharge(b, 1 - b);
    return force;
}

static double rmsRelative(const vector<Vec3>& ref, const vector<Vec3>& x) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) num += (x[i] - ref[i]).dot(x[i] - ref[i]), den += ref[i].dot(ref[i]);
    return std::sqrt(num / den);
}

static void compareWithReference(const string& model, const string& precision) {
    System system;
    vector<Vec3> positions;
    NNPForce* force = build(system, positions, model);
    VerletIntegrator i1(0.001), i2(0.001);
    Context ref(system, i1, Platform::getPlatformByName("Reference"));
    Context cuda(system, i2, Platform::getPlatformByName("CUDA"), {{"Precision", precision}});
    ref.setPositions(positions);
    cuda.setPositions(positions);
    State sr = ref.getState(State::Energy | State::Forces), sc = cuda.getState(State::Energy | State::Forces);
    vector<double> br = force->getBatchEnergies(ref), bc = force->getBatchEnergies(cuda);
    double scale = 0, worst = 0;
    for (double e : br) scale += std::fabs(e) / br.size();
    for (size_t b = 0; b < br.size(); b++) worst = std::max(worst, std::fabs(bc[b] - br[b]) / scale);
    const double frms = rmsRelative(sr.getForces(), sc.getForces());
    const bool dbl = precision == "double";
    std::cout << precision << ": energy Reference " << std::setprecision(12) << sr.getPotentialEnergy() << " CUDA "
              << sc.getPotentialEnergy() << ", worst batch " << std::setprecision(3) << worst
              << " of the mean |batch energy|, forces rel RMS " << frms << std::endl;
    CHECK(worst <= (dbl ? 1e-12 : 2e-6));
    CHECK(frms <= (dbl ? 1e-10 : 5e-6));
    CHECK(std::fabs(sc.getPotentialEnergy() - sr.getPotentialEnergy()) <= (dbl ? 1e-12 : 2e-6) * 3 * scale);
    /* a changed charge reaches both Contexts */
    force->setBatchCharge(2, 0);
    force->updateParametersInContext(ref);
    force->updateParametersInContext(cuda);
    vector<double> br2 = force->getBatchEnergies(ref), bc2 = force->getBatchEnergies(cuda);
    CHECK(br2[2] != br[2]);
    CHECK(std::fabs(bc2[2] - br2[2]) <= (dbl ? 1e-12 : 2e-6) * scale);
}

/* The force in a Context on two devices ("0,1", or "0,0": two CUDA contexts on one GPU) against
   one device: the batches split between the devices' plans, each with its own batches' charges;
   per-batch energies gathered in batch order, the total, the forces; a changed charge reaching every
   device. Skipped (with a message) where no such Context can be created. */
static void multiDevice(const string& model, const string& precision) {
    const string devices = twoCudaDevices();
    if (devices.empty()) {
        std::cout << "several devices: skipped (no Context on two CUDA devices here)" << std::endl;
        return;
    }
    System system;
    vector<Vec3> positions;
    NNPForce* force = build(system, positions, model);
    VerletIntegrator i1(0.001), i2(0.001);
    Context one(system, i1, Platform::getPlatformByName("CUDA"), {{"Precision", precision}, {"DeviceIndex", "0"}});
    Context several(system, i2, Platform::getPlatformByName("CUDA"), {{"Precision", precision}, {"DeviceIndex", devices}});
    one.setPositions(positions);
    several.setPositions(positions);
    State s1 = one.getState(State::Energy | State::Forces), s2 = several.getState(State::Energy | State::Forces);
    vector<double> b1 = force->getBatchEnergies(one), b2 = force->getBatchEnergies(several);
    CHECK(b1.size() == 3 && b2.size() == 3);
    if (b1.size() != 3 || b2.size() != 3) return;
    double scale = 0, worst = 0;
    for (double e : b1) scale += std::fabs(e) / b1.size();
    for (size_t b = 0; b < b1.size(); b++) worst = std::max(worst, std::fabs(b2[b] - b1[b]) / scale);
    const double frms = rmsRelative(s1.getForces(), s2.getForces());
    const bool dbl = precision == "double";
    std::cout << precision << ", DeviceIndex " << devices << " against one device: energy " << std::setprecision(12)
              << s2.getPotentialEnergy() << " (one device " << s1.getPotentialEnergy() << "), worst batch " << std::setprecision(3)
              << worst << " of the mean |batch energy|, forces rel RMS " << frms << std::endl;
    CHECK(worst <= (dbl ? 1e-13 : 2e-6));
    CHECK(frms <= (dbl ? 1e-12 : 5e-6));
    CHECK(std::fabs(s2.getPotentialEnergy() - s1.getPotentialEnergy()) <= (dbl ? 1e-13 : 2e-6) * 3 * scale);
    /* a changed charge reaches every device */
    force->setBatchCharge(2, 0);
    force->updateParametersInContext(one);
    force->updateParametersInContext(several);
    vector<double> c1 = force->getBatchEnergies(one), c2 = force->getBatchEnergies(several);
    CHECK(c1[2] != b1[2]);
    CHECK(std::fabs(c2[2] - c1[2]) <= (dbl ? 1e-13 : 2e-6) * scale);
    std::cout << "  batch 2's charge -1 -> 0: energy " << std::setprecision(12) << c2[2] << " (one device " << c1[2] << ")"
              << std::setprecision(3) << std::endl;
}

/* NVE with the plugin's Verlet integrator (graphs of whole steps) on CUDA: the first steps equal a
   plain VerletIntegrator's, and the total energy is conserved over 400 steps. */
static void integrators(const string& model) {
    System system;
    vector<Vec3> positions;
    build(system, positions, model);
    NNPVerletIntegrator nnp(0.0002);
    VerletIntegrator plain(0.0002);
    Context c1(system, nnp, Platform::getPlatformByName("CUDA"), {{"Precision", "mixed"}});
    Context c2(system, plain, Platform::getPlatformByName("CUDA"), {{"Precision", "mixed"}});
    c1.setPositions(positions);
    c2.setPositions(positions);
    c1.setVelocitiesToTemperature(300, 5);
    c2.setVelocities(c1.getState(State::Velocities).getVelocities());
    nnp.step(10);
    plain.step(10);
    const vector<Vec3>& p1 = c1.getState(State::Positions).getPositions();
    const vector<Vec3>& p2 = c2.getState(State::Positions).getPositions();
    double worst = 0;
    for (size_t i = 0; i < p1.size(); i++) worst = std::max(worst, std::sqrt((p1[i] - p2[i]).dot(p1[i] - p2[i])));
    std::cout << "NNPVerletIntegrator against VerletIntegrator after 10 steps: largest position difference " << worst << " nm"
              << std::endl;
    CHECK(worst < 1e-5);
    State s0 = c1.getState(State::Energy);
    const double e0 = s0.getPotentialEnergy() + s0.getKineticEnergy();
    double largest = 0;
    for (int k = 0; k < 20; k++) {
        nnp.step(20);
        State s = c1.getState(State::Energy);
        largest = std::max(largest, std::fabs(s.getPotentialEnergy() + s.getKineticEnergy() - e0));
    }
    std::cout << "NVE, 400 steps of 0.2 fs: largest total-energy change " << largest << " kJ/mol (kinetic "
              << s0.getKineticEnergy() << ")" << std::endl;
    CHECK(largest < 0.01 * s0.getKineticEnergy());
    NNPLangevinIntegrator langevin(300, 1.0, 0.0005);
    Context c3(system, langevin, Platform::getPlatformByName("CUDA"), {{"Precision", "mixed"}});
    c3.setPositions(positions);
    langevin.step(100);
    const double e = c3.getState(State::Energy).getPotentialEnergy();
    std::cout << "NNPLangevinIntegrator, 100 steps: potential energy " << e << std::endl;
    CHECK(std::isfinite(e));
}

/* NVE of the first n drug-like molecules (one batch each, 3 nm apart) with NNPVerletIntegrator, mixed
   precision, 2,000 steps of 0.25 fs from 300 K: the drift (a line fitted to the total energy every
   20 steps) per atom, and the largest excursion, which must stay under 2% of the kinetic energy. */
static void drift(const string& model, int n) {
    vector<Molecule> mols;
    char name[64];
    for (int k = 1; (int)mols.size() < n && k < 10000; k++) {
        snprintf(name, sizeof name, "molecules/druglike/drugbank-%04d.xyz", k);
        if (!exists(sharedPath(name))) continue;
        mols.push_back(readXyz(name));
        const int b = (int)mols.size() - 1;
        for (Vec3& p : mols.back().pos) p += Vec3(3.0 * (b % 10), 3.0 * (b / 10 % 10), 3.0 * (b / 100));
    }
    System system;
    vector<Vec3> positions;
    buildSystem(system, positions, mols, model);
    NNPVerletIntegrator nnp(0.00025);
    Context c(system, nnp, Platform::getPlatformByName("CUDA"), {{"Precision", "mixed"}});
    c.setPositions(positions);
    c.setVelocitiesToTemperature(300, 11);
    const int steps = 2000, every = 20;
    vector<double> t, e;
    double kinetic = 0;
    for (int k = 0; k <= steps / every; k++) {
        if (k > 0) nnp.step(every);
        State s = c.getState(State::Energy);
        if (k == 0) kinetic = s.getKineticEnergy();
        t.push_back(k * every * 0.00025), e.push_back(s.getPotentialEnergy() + s.getKineticEnergy());
    }
    double tm = 0, em = 0, stt = 0, ste = 0, largest = 0;
    for (size_t k = 0; k < t.size(); k++) tm += t[k] / t.size(), em += e[k] / t.size();
    for (size_t k = 0; k < t.size(); k++) {
        stt += (t[k] - tm) * (t[k] - tm), ste += (t[k] - tm) * (e[k] - em);
        largest = std::max(largest, std::fabs(e[k] - e[0]));
    }
    const double slope = ste / stt; /* kJ/mol per ps */
    std::cout << "NVE, " << mols.size() << " molecules (" << positions.size() << " atoms), " << steps
              << " steps of 0.25 fs, mixed: drift " << std::setprecision(3) << slope << " kJ/mol/ps (" << slope / positions.size()
              << " per atom), largest total-energy change " << largest << " kJ/mol (kinetic " << kinetic << ")" << std::endl;
    CHECK(largest < 0.02 * kinetic);
}

int main(int argc, char** argv) {
    try {
        if (argc != 2 && argc != 3) {
            std::cerr << "usage: TestCudaTensorNet MODEL.nnpm [N]" << std::endl;
            return 2;
        }
        if (!platformAvailable("IntegrateNNPStep")) return 77;
        compareWithReference(argv[1], "mixed");
        compareWithReference(argv[1], "double");
        integrators(argv[1]);
        multiDevice(argv[1], "mixed");
        multiDevice(argv[1], "double");
        if (argc == 3) drift(argv[1], atoi(argv[2]));
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
