/*
 * The shared test body of NNPVerletIntegrator and NNPLangevinIntegrator, run on every platform by a
 * thin Test<Platform>NNPIntegrators.cpp. Where CUDA graphs are used (CUDA platform), it also checks
 * that graphs are recorded, replayed, and recorded again exactly when something they baked in
 * changed; elsewhere the same scenarios run eagerly and must match OpenMM's own integrators.
 */
#include "NNPIntegrators.h"
#include "TestHelpers.h"
#include "openmm/CMMotionRemover.h"
#include "openmm/CustomBondForce.h"
#include "openmm/LangevinMiddleIntegrator.h"
#include "openmm/NonbondedForce.h"

#include <chrono>
#include <functional>

static bool usesGraphs() { return string(platformName) == "CUDA"; }

static int failures = 0;
#define CHECK(cond, what)                                                                            \
    do {                                                                                             \
        if (!(cond)) {                                                                               \
            std::cout << "  FAILED (" << __LINE__ << "): " << what << "  [" #cond "]" << std::endl; \
            failures++;                                                                              \
        }                                                                                            \
    } while (0)

static double maxDiff(const vector<Vec3>& a, const vector<Vec3>& b) {
    double worst = 0;
    for (size_t i = 0; i < a.size(); i++)
        for (int k = 0; k < 3; k++) worst = std::max(worst, std::abs(a[i][k] - b[i][k]));
    return worst;
}

/* A chain of bonded particles (HarmonicBondForce, periodic), a CustomBondForce with a global
   parameter in force group 1 and, optionally, an NNPForce molecule (drugbank-0030). */
struct TestSystem {
    System system;
    vector<Vec3> positions;
    HarmonicBondForce* bonds = nullptr;
    NNPForce* nnp = nullptr;
};

static void makeTestSystem(TestSystem& t, bool withNNP, int chain = 12) {
    t.system.setDefaultPeriodicBoxVectors(Vec3(4, 0, 0), Vec3(0, 4, 0), Vec3(0, 0, 4));
    if (withNNP) {
        vector<Vec3> pos;
        t.nnp = buildSystem(t.system, pos, {readXyz(drugs[1])}, smallModel());
        t.positions = pos;
    }
    t.bonds = new HarmonicBondForce();
    t.bonds->setUsesPeriodicBoundaryConditions(true);
    CustomBondForce* custom = new CustomBondForce("kscale*100*(r-0.15)^2");
    custom->addGlobalParameter("kscale", 1.0);
    custom->setForceGroup(1);
    int first = t.system.getNumParticles();
    for (int i = 0; i < chain; i++) {
        t.system.addParticle(12.0);
        t.positions.push_back(Vec3(1.8 + 0.14 * i, 0.03 * (i % 3), 0.02 * (i % 2)));
        if (i > 0) {
            t.bonds->addBond(first + i - 1, first + i, 0.15, 20000.0);
            custom->addBond(first + i - 1, first + i);
        }
    }
    t.system.addForce(t.bonds);
    t.system.addForce(custom);
}

struct Run {
    std::unique_ptr<Integrator> integrator;
    std::unique_ptr<Context> context;
    Run(System& system, Integrator* integrator, const vector<Vec3>& positions) : integrator(integrator) {
        context.reset(makeContext(system, *integrator));
        context->setPositions(positions);
        context->setVelocitiesToTemperature(300.0, 11);
    }
    State state() { return context->getState(State::Positions | State::Velocities); }
};

static NNPVerletIntegrator* nnpVerlet(double dt, int k) {
    NNPVerletIntegrator* integrator = new NNPVerletIntegrator(dt);
    integrator->setStepsPerGraph(k);
    return integrator;
}

/* Positions, velocities, time and step count of two runs must be identical (or, where OpenMM's own
   kernels are not deterministic, within tolX nm and tolV nm/ps). */
static void expectSame(Run& a, Run& b, const string& label, double tolX = 0, double tolV = 0) {
    State sa = a.state(), sb = b.state();
    double dx = maxDiff(sa.getPositions(), sb.getPositions()), dv = maxDiff(sa.getVelocities(), sb.getVelocities());
    std::cout << "  " << label << ": position difference " << dx << " nm, velocity difference " << dv << " nm/ps, steps "
              << a.context->getStepCount() << "/" << b.context->getStepCount() << ", time " << sa.getTime() << "/"
              << sb.getTime() << std::endl;
    CHECK(dx <= tolX && dv <= tolV, label << ": trajectories differ");
    CHECK(a.context->getStepCount() == b.context->getStepCount(), label << ": step counts differ");
    CHECK(sa.getTime() == sb.getTime(), label << ": times differ");
}

/* NNPVerletIntegrator against OpenMM's VerletIntegrator, step counts not divisible by k. */
void testVerletMatchesOpenMM() {
    std::cout << "Verlet against OpenMM's VerletIntegrator" << std::endl;
    TestSystem t;
    makeTestSystem(t, true);
    Run a(t.system, nnpVerlet(0.0005, 10), t.positions), b(t.system, new VerletIntegrator(0.0005), t.positions);
    for (int n : {1, 23, 20, 3, 0, 7}) {
        a.integrator->step(n);
        b.integrator->step(n);
    }
    expectSame(a, b, "54 steps in calls of 1, 23, 20, 3, 0, 7");
    NNPVerletIntegrator& v = static_cast<NNPVerletIntegrator&>(*a.integrator);
    std::cout << "  graphs recorded: " << v.getNumGraphRecordings() << ", replaying: " << v.isReplayingGraphs()
              << ", fallback: '" << v.getFallbackReason() << "'" << std::endl;
    if (usesGraphs()) {
        // 23 = eager + 2×10 + 2; 20 = 2×10; 3 = 2 + 1; 7 = 4 + 2 + 1: graphs of 10, 2, 1 and 4 steps.
        CHECK(v.isReplayingGraphs(), "CUDA steps are not replayed from graphs");
        CHECK(v.getNumGraphRecordings() == 4, "expected 4 graphs (10, 2, 1, 4 steps), got " << v.getNumGraphRecordings());
    } else {
        CHECK(!v.isReplayingGraphs() && v.getNumGraphRecordings() == 0, "graphs reported on a platform without them");
    }
    CHECK(v.getFallbackReason().empty(), "unexpected fallback: " << v.getFallbackReason());
    // Kinetic energy: same definition as OpenMM's (half-step shifted velocities).
    double ka = a.context->getState(State::Energy).getKineticEnergy(), kb = b.context->getState(State::Energy).getKineticEnergy();
    std::cout << "  kinetic energy " << ka << " vs " << kb << " kJ/mol" << std::endl;
    CHECK(std::abs(ka - kb) <= 1e-12 * std::abs(kb), "kinetic energies differ");
    // The same integrator with graphs switched off: eager steps, same trajectory.
    NNPVerletIntegrator* eager = nnpVerlet(0.0005, 10);
    eager->setUseGraphs(false);
    Run c(t.system, eager, t.positions);
    for (int n : {1, 23, 20, 3, 0, 7}) c.integrator->step(n);
    expectSame(a, c, "graphs against the same integrator's eager steps");
    CHECK(!eager->isReplayingGraphs() && eager->getNumGraphRecordings() == 0, "setUseGraphs(false) still recorded graphs");
}

/* Langevin: OpenMM's LangevinMiddleIntegrator where it is the kernel, else graphs against eager. */
void testLangevinReproducible() {
    std::cout << "Langevin: seeds, replays, and OpenMM's LangevinMiddleIntegrator" << std::endl;
    TestSystem t;
    makeTestSystem(t, true);
    auto run = [&](Integrator* integrator, int steps) {
        Run r(t.system, integrator, t.positions);
        for (int done = 0; done < steps; done += 9) r.integrator->step(9);
        return r.state();
    };
    auto langevin = [](int seed, bool graphs) {
        NNPLangevinIntegrator* l = new NNPLangevinIntegrator(300, 5, 0.0005);
        l->setRandomNumberSeed(seed);
        l->setStepsPerGraph(4);
        l->setUseGraphs(graphs);
        return l;
    };
    // Runs one after the other: the Reference platform's generator is global.
    State graphs = run(langevin(1234, true), 36);
    State again = run(langevin(1234, true), 36);
    State eager = run(langevin(1234, false), 36);
    State other = run(langevin(4321, true), 36);
    double same = maxDiff(graphs.getPositions(), again.getPositions());
    double vsEager = maxDiff(graphs.getPositions(), eager.getPositions());
    double seeds = maxDiff(graphs.getPositions(), other.getPositions());
    std::cout << "  same seed twice: " << same << " nm; graphs vs eager: " << vsEager << " nm; seeds 1234 vs 4321: " << seeds
              << " nm" << std::endl;
    CHECK(same == 0, "the same seed does not reproduce the trajectory");
    CHECK(vsEager == 0, "graph replay and eager steps differ");
    CHECK(seeds > 1e-6, "different seeds give the same trajectory");
    if (!usesGraphs()) {
        LangevinMiddleIntegrator* openmm = new LangevinMiddleIntegrator(300, 5, 0.0005);
        openmm->setRandomNumberSeed(1234);
        State reference = run(openmm, 36);
        double d = maxDiff(graphs.getPositions(), reference.getPositions());
        std::cout << "  against OpenMM's LangevinMiddleIntegrator (same seed): " << d << " nm" << std::endl;
        CHECK(d == 0, "differs from LangevinMiddleIntegrator with the same seed");
    }

    // A replayed graph must draw new random numbers: replay the same graph from the same state.
    Run r(t.system, langevin(99, true), t.positions);
    r.integrator->step(5); // eager step + graphs of 4
    State start = r.state();
    r.integrator->step(4);
    vector<Vec3> first = r.state().getPositions();
    int recorded = static_cast<NNPGraphIntegrator&>(*r.integrator).getNumGraphRecordings();
    r.context->setPositions(start.getPositions());
    r.context->setVelocities(start.getVelocities());
    r.integrator->step(4);
    vector<Vec3> second = r.state().getPositions();
    double d = maxDiff(first, second);
    std::cout << "  same state, 4 more steps twice: positions differ by " << d << " nm; graphs recorded "
              << recorded << " then " << static_cast<NNPGraphIntegrator&>(*r.integrator).getNumGraphRecordings() << std::endl;
    CHECK(d > 1e-7, "consecutive steps from the same state drew the same random numbers");
    CHECK(static_cast<NNPGraphIntegrator&>(*r.integrator).getNumGraphRecordings() == recorded,
          "setPositions/setVelocities made the graph record again");
}

/* A checkpoint restores the random-number state: the steps after loading it repeat exactly. */
void testCheckpoint() {
    std::cout << "Langevin checkpoint" << std::endl;
    TestSystem t;
    makeTestSystem(t, false, 16);
    NNPLangevinIntegrator* integrator = new NNPLangevinIntegrator(300, 10, 0.001);
    integrator->setRandomNumberSeed(31);
    integrator->setStepsPerGraph(4);
    Run r(t.system, integrator, t.positions);
    integrator->step(9);
    std::stringstream checkpoint;
    r.context->createCheckpoint(checkpoint);
    integrator->step(8);
    vector<Vec3> first = r.state().getPositions();
    r.context->loadCheckpoint(checkpoint);
    integrator->step(8);
    vector<Vec3> second = r.state().getPositions();
    double d = maxDiff(first, second);
    std::cout << "  8 steps after the checkpoint, twice: largest position difference " << d << " nm" << std::endl;
    CHECK(d == 0, "steps after loadCheckpoint differ from the steps after createCheckpoint");
    CHECK(maxDiff(first, t.positions) > 0, "the particles did not move");
}

/* Free particles: the Langevin thermostat reaches its temperature; changes of temperature and
   friction take effect without recording again. */
void testLangevinTemperature() {
    std::cout << "Langevin: temperature of 600 free particles" << std::endl;
    System system;
    vector<Vec3> positions;
    const int n = 600;
    for (int i = 0; i < n; i++) {
        system.addParticle(10.0 + (i % 5));
        positions.push_back(Vec3(0.1 * (i % 10), 0.1 * ((i / 10) % 10), 0.1 * (i / 100)));
    }
    NNPLangevinIntegrator* integrator = new NNPLangevinIntegrator(300, 20, 0.002);
    integrator->setRandomNumberSeed(5);
    Run r(system, integrator, positions);
    const double kB = 0.00831446261815324; // kJ/mol/K
    auto meanTemperature = [&](int samples) {
        double sum = 0;
        for (int s = 0; s < samples; s++) {
            integrator->step(25);
            sum += 2 * r.context->getState(State::Energy).getKineticEnergy() / (3 * n * kB);
        }
        return sum / samples;
    };
    // Kinetic energy relaxes at 2γ = 40/ps: 25 steps (0.05 ps) apart the samples are nearly
    // independent; the tolerance counts every second sample only, and allows 5 standard errors.
    const int samples = 200;
    auto tolerance = [&](double T) { return 5 * T * std::sqrt(2.0 / (3 * n)) / std::sqrt(samples / 2.0); };
    integrator->step(500);
    double t300 = meanTemperature(samples);
    std::cout << "  set 300 K: mean " << t300 << " K (tolerance " << tolerance(300) << " K)" << std::endl;
    CHECK(std::abs(t300 - 300) < tolerance(300), "mean temperature " << t300 << " K at 300 K");
    int recorded = integrator->getNumGraphRecordings();
    integrator->setTemperature(150);
    integrator->step(500);
    double t150 = meanTemperature(samples);
    std::cout << "  set 150 K: mean " << t150 << " K (tolerance " << tolerance(150) << " K)" << std::endl;
    CHECK(std::abs(t150 - 150) < tolerance(150), "mean temperature " << t150 << " K at 150 K");
    // No friction: no noise either, so free particles keep their kinetic energy exactly.
    integrator->setFriction(0);
    integrator->step(3);
    double before = r.context->getState(State::Energy).getKineticEnergy();
    integrator->step(100);
    double after = r.context->getState(State::Energy).getKineticEnergy();
    std::cout << "  friction 0: kinetic energy " << before << " -> " << after << " kJ/mol" << std::endl;
    CHECK(before == after, "friction 0 changed the kinetic energy of free particles");
    std::cout << "  graphs recorded: " << recorded << " before the changes, " << integrator->getNumGraphRecordings()
              << " after" << std::endl;
    CHECK(integrator->getNumGraphRecordings() == recorded, "temperature or friction changes recorded graphs again");
    if (usesGraphs()) CHECK(recorded > 0, "no graph was recorded on CUDA");
}

/* Everything a graph baked in: each change must give the same trajectory as OpenMM's integrator;
   on CUDA, exactly the changes listed in docs/integrators.md record new graphs. */
void testRecordingTriggers() {
    std::cout << "Changes between steps (re-recording triggers)" << std::endl;
    TestSystem t;
    makeTestSystem(t, false, 16);
    Run a(t.system, nnpVerlet(0.0005, 5), t.positions), b(t.system, new VerletIntegrator(0.0005), t.positions);
    NNPVerletIntegrator& v = static_cast<NNPVerletIntegrator&>(*a.integrator);
    auto both = [&](const string& label, bool records, std::function<void(Run&)> change) {
        change(a);
        change(b);
        int before = v.getNumGraphRecordings(); // (reinitialize starts a new count)
        a.integrator->step(17);
        b.integrator->step(17);
        expectSame(a, b, label);
        int recorded = v.getNumGraphRecordings() - before;
        std::cout << "    graphs recorded by this change: " << recorded << std::endl;
        if (usesGraphs())
            CHECK((recorded > 0) == records, label << (records ? ": did not record again" : ": recorded again needlessly"));
    };
    // 17 steps: eager + 3×5 + 1; 17 more: 3×5 + 2 (graphs of 5, 1 and 2 steps, each recorded once).
    both("first steps", true, [](Run& r) { r.integrator->step(17); });
    both("nothing changed", false, [](Run&) {});
    both("setPositions + setVelocities", false, [&](Run& r) {
        r.context->setPositions(t.positions);
        r.context->setVelocities(vector<Vec3>(t.positions.size(), Vec3(0.1, -0.2, 0.3)));
    });
    both("setTime + setStepCount", false, [](Run& r) {
        r.context->setTime(1.5);
        r.context->setStepCount(1000);
    });
    both("step size 0.0005 -> 0.0008 ps", false, [](Run& r) { r.integrator->setStepSize(0.0008); });
    both("global parameter kscale 1 -> 3", true, [](Run& r) { r.context->setParameter("kscale", 3.0); });
    int p1, p2;
    double length, k;
    t.bonds->getBondParameters(3, p1, p2, length, k);
    both("HarmonicBondForce.updateParametersInContext", true, [&](Run& r) {
        t.bonds->setBondParameters(3, p1, p2, length * 1.1, k * 2);
        t.bonds->updateParametersInContext(*r.context);
    });
    both("periodic box 4 -> 5 nm", true, [](Run& r) {
        r.context->setPeriodicBoxVectors(Vec3(5, 0, 0), Vec3(0, 5, 0), Vec3(0, 0, 5));
    });
    both("integration force groups: group 0 only", true, [](Run& r) { r.integrator->setIntegrationForceGroups(1); });
    both("constraint tolerance 1e-5 -> 1e-6", true, [](Run& r) { r.integrator->setConstraintTolerance(1e-6); });
    both("steps per graph 5 -> 3", true, [&](Run& r) {
        if (&r == &a) v.setStepsPerGraph(3);
    });
    both("nothing changed again", false, [](Run&) {});
    both("Context.reinitialize(preserveState=true)", true, [](Run& r) { r.context->reinitialize(true); });
}

/* NNPForce.updateParametersInContext that regroups the batches: new plan sizes, new graphs. */
void testNNPUpdate() {
    std::cout << "NNPForce changes between steps" << std::endl;
    System system;
    vector<Vec3> positions;
    Molecule m1 = readXyz(drugs[1]), m2 = readXyz(drugs[1]);
    for (Vec3& p : m2.pos) p += Vec3(0.6, 0.1, 0);
    NNPForce* nnp = buildSystem(system, positions, {m1, m2}, smallModel());
    Run a(system, nnpVerlet(0.0005, 4), positions), b(system, new VerletIntegrator(0.0005), positions);
    NNPVerletIntegrator& v = static_cast<NNPVerletIntegrator&>(*a.integrator);
    a.integrator->step(9);
    b.integrator->step(9);
    expectSame(a, b, "two molecules in two batches");
    int before = v.getNumGraphRecordings();
    for (int i = 0; i < nnp->getNumAtoms(); i++) { // one batch: the molecules now interact
        int particle, z, batch;
        nnp->getAtomParameters(i, particle, z, batch);
        nnp->setAtomParameters(i, particle, z, 0);
    }
    nnp->updateParametersInContext(*a.context);
    nnp->updateParametersInContext(*b.context);
    a.integrator->step(9);
    b.integrator->step(9);
    expectSame(a, b, "after moving every atom into batch 0");
    std::cout << "    graphs recorded by this change: " << v.getNumGraphRecordings() - before << std::endl;
    if (usesGraphs()) CHECK(v.getNumGraphRecordings() > before, "the NNPForce update did not record new graphs");
}

/* Systems that cannot be recorded run eagerly, name the cause, and still match OpenMM. */
void testFallback() {
    std::cout << "Forces that cannot be recorded" << std::endl;
    struct Case {
        string label, cause;
        std::function<void(TestSystem&)> add;
    };
    vector<Case> cases = {
        {"NonbondedForce with a cutoff", "NonbondedForce",
         [](TestSystem& t) {
             NonbondedForce* nb = new NonbondedForce();
             nb->setNonbondedMethod(NonbondedForce::CutoffNonPeriodic);
             nb->setCutoffDistance(1.0);
             for (int i = 0; i < t.system.getNumParticles(); i++) nb->addParticle(i % 2 ? 0.2 : -0.2, 0.3, 0.1);
             t.system.addForce(nb);
         }},
        {"CMMotionRemover every 5 steps", "CMMotionRemover", [](TestSystem& t) { t.system.addForce(new CMMotionRemover(5)); }},
        {"an atom with 4 constraints", "CCMA",
         [](TestSystem& t) {
             for (int i = 1; i <= 4; i++) t.system.addConstraint(0, i, 0.15);
         }},
        {"SHAKE clusters and CMMotionRemover every step (recordable)", "",
         [](TestSystem& t) {
             t.system.addConstraint(5, 4, 0.15);
             t.system.addConstraint(5, 6, 0.15);
             t.system.addConstraint(10, 11, 0.15);
             t.system.addForce(new CMMotionRemover(1));
         }},
    };
    for (Case& c : cases) {
        TestSystem t;
        makeTestSystem(t, false, 16);
        c.add(t);
        Run a(t.system, nnpVerlet(0.0005, 4), t.positions), b(t.system, new VerletIntegrator(0.0005), t.positions);
        a.integrator->step(13);
        b.integrator->step(13);
        // OpenMM's CPU nonbonded kernel adds the threads' forces in a varying order: two CPU
        // Contexts of the same System differ in the last bits (seen with 16 threads).
        bool cpuNonbonded = string(platformName) == "CPU" && c.cause == "NonbondedForce";
        expectSame(a, b, c.label, cpuNonbonded ? 1e-6 : 0, cpuNonbonded ? 1e-3 : 0);
        NNPVerletIntegrator& v = static_cast<NNPVerletIntegrator&>(*a.integrator);
        std::cout << "    fallback reason: '" << v.getFallbackReason() << "'" << std::endl;
        if (usesGraphs()) {
            if (c.cause.empty())
                CHECK(v.getFallbackReason().empty() && v.isReplayingGraphs(), c.label << ": graphs not used");
            else
                CHECK(v.getFallbackReason().find(c.cause) != string::npos && !v.isReplayingGraphs(),
                      c.label << ": reason does not name " << c.cause);
        } else {
            CHECK(v.getFallbackReason().empty(), "fallback reported without graphs");
        }
    }
}

/* Drug-like molecules drugbank-(first)..(first+count-1), 3 nm apart along x, one batch each. */
static vector<Molecule> drugBatch(int first, int count) {
    vector<Molecule> mols;
    for (int i = 0; i < count; i++) {
        char name[64];
        snprintf(name, sizeof name, "molecules/druglike/drugbank-%04d.xyz", first + i);
        if (!exists(sharedPath(name))) continue;
        mols.push_back(readXyz(name));
        for (Vec3& p : mols.back().pos) p += Vec3(3.0 * i, 0, 0);
    }
    return mols;
}

/* Verlet NVE energy conservation for a batch of drug-like molecules with the NNP. */
void testEnergyDrift(int molecules, int steps) {
    std::cout << "Verlet NVE energy drift, " << molecules << " drug-like molecules" << std::endl;
    System system;
    vector<Vec3> positions;
    buildSystem(system, positions, drugBatch(1, molecules), usesGraphs() ? ani2x() : smallModel());
    NNPVerletIntegrator* integrator = nnpVerlet(0.00025, 20);
    Run r(system, integrator, positions);
    r.context->setVelocitiesToTemperature(300.0, 3);
    auto energy = [&] {
        State s = r.context->getState(State::Energy);
        return std::make_pair(s.getPotentialEnergy() + s.getKineticEnergy(), s.getKineticEnergy());
    };
    auto e0 = energy();
    double worst = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (int done = 0; done < steps; done += steps / 10) {
        integrator->step(steps / 10);
        worst = std::max(worst, std::abs(energy().first - e0.first));
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto e1 = energy();
    double perAtom = (e1.first - e0.first) / positions.size();
    std::cout << "  " << positions.size() << " atoms, " << steps << " steps of 0.25 fs (" << seconds << " s): total energy "
              << e0.first << " -> " << e1.first << " kJ/mol, drift " << perAtom << " kJ/mol per atom, largest excursion "
              << worst / e0.second << " of the kinetic energy (" << e0.second << " kJ/mol)" << std::endl;
    CHECK(worst < 0.02 * e0.second, "total energy moved by more than 2% of the kinetic energy");
}

/* Langevin on a batch of drug-like molecules with the NNP, started at 0 K: the kinetic temperature
   reaches the set one within statistical error (the error from block averages of the samples). */
void testBatchEquilibration(int molecules) {
    std::cout << "Langevin: " << molecules << " drug-like molecules heated from 0 K to 300 K" << std::endl;
    System system;
    vector<Vec3> positions;
    buildSystem(system, positions, drugBatch(101, molecules), ani2x());
    NNPLangevinIntegrator* integrator = new NNPLangevinIntegrator(300, 10, 0.0005);
    integrator->setRandomNumberSeed(8);
    Run r(system, integrator, positions);
    r.context->setVelocities(vector<Vec3>(positions.size(), Vec3()));
    const double kB = 0.00831446261815324;
    const int n = positions.size(), blocks = 10, perBlock = 20;
    integrator->step(1000); // 0.5 ps = 5 / friction
    vector<double> blockMean;
    double sum = 0;
    for (int b = 0; b < blocks; b++) {
        double bs = 0;
        for (int k = 0; k < perBlock; k++) {
            integrator->step(10);
            bs += 2 * r.context->getState(State::Energy).getKineticEnergy() / (3 * n * kB);
        }
        blockMean.push_back(bs / perBlock);
        sum += bs;
    }
    double mean = sum / (blocks * perBlock), var = 0;
    for (double b : blockMean) var += (b - mean) * (b - mean);
    double se = std::sqrt(var / (blocks - 1) / blocks);
    double floor = 300 * std::sqrt(2.0 / (3 * n)) / std::sqrt(blocks * perBlock); // if samples were independent
    double tolerance = 5 * std::max(se, floor);
    std::cout << "  " << n << " atoms: mean kinetic temperature " << mean << " K over " << blocks * perBlock
              << " samples (standard error " << se << " K from " << blocks << " blocks; tolerance " << tolerance << " K); graphs: "
              << integrator->isReplayingGraphs() << std::endl;
    CHECK(std::abs(mean - 300) < tolerance, "the batch did not equilibrate to 300 K: " << mean << " K");
}

void testSerialization() {
    std::cout << "XML serialization" << std::endl;
    NNPLangevinIntegrator langevin(310, 2.5, 0.0007);
    langevin.setRandomNumberSeed(77);
    langevin.setStepsPerGraph(13);
    langevin.setUseGraphs(false);
    langevin.setConstraintTolerance(3e-6);
    langevin.setIntegrationForceGroups(5);
    std::stringstream xml;
    XmlSerializer::serialize<Integrator>(&langevin, "Integrator", xml);
    std::unique_ptr<Integrator> copy(XmlSerializer::deserialize<Integrator>(xml));
    NNPLangevinIntegrator* l = dynamic_cast<NNPLangevinIntegrator*>(copy.get());
    CHECK(l != nullptr, "deserialized integrator is not an NNPLangevinIntegrator");
    if (l != nullptr) {
        CHECK(l->getTemperature() == 310 && l->getFriction() == 2.5 && l->getStepSize() == 0.0007 &&
                  l->getRandomNumberSeed() == 77 && l->getStepsPerGraph() == 13 && !l->getUseGraphs() &&
                  l->getConstraintTolerance() == 3e-6 && l->getIntegrationForceGroups() == 5,
              "Langevin settings lost in XML");
    }
    NNPVerletIntegrator verlet(0.0009);
    verlet.setStepsPerGraph(6);
    std::stringstream xml2;
    XmlSerializer::serialize<Integrator>(&verlet, "Integrator", xml2);
    std::unique_ptr<Integrator> copy2(XmlSerializer::deserialize<Integrator>(xml2));
    NNPVerletIntegrator* v = dynamic_cast<NNPVerletIntegrator*>(copy2.get());
    CHECK(v != nullptr && v->getStepSize() == 0.0009 && v->getStepsPerGraph() == 6 && v->getUseGraphs(),
          "Verlet settings lost in XML");
    std::cout << "  ok: " << xml2.str().size() << " and " << xml.str().size() << " characters" << std::endl;
}

void testErrors() {
    std::cout << "Bad input" << std::endl;
    NNPVerletIntegrator v(0.001);
    expectError("steps per graph must be at least 1", [&] { v.setStepsPerGraph(0); });
    expectError("not bound to a context", [&] { v.step(1); });
    expectError("temperature must be finite and >= 0", [] { NNPLangevinIntegrator l(-1, 1, 0.001); });
    expectError("friction must be finite", [] { NNPLangevinIntegrator l(300, std::nan(""), 0.001); });
    TestSystem t;
    makeTestSystem(t, false);
    Run r(t.system, nnpVerlet(0.001, 4), t.positions);
    expectError("must not be negative", [&] { r.integrator->step(-3); });
}

/* heavy: the 100-molecule drift run (CUDA); quick: no statistics or drift (compute-sanitizer). */
void runIntegratorTests(bool heavy, bool quick) {
    std::cout << "NNP integrator tests on the " << platformName << " platform" << std::endl;
    testErrors();
    testSerialization();
    testVerletMatchesOpenMM();
    testLangevinReproducible();
    testCheckpoint();
    if (!quick) testLangevinTemperature();
    testRecordingTriggers();
    testNNPUpdate();
    testFallback();
    if (!quick) testEnergyDrift(heavy ? 100 : 2, heavy ? 4000 : 200);
    if (!quick && heavy) testBatchEquilibration(50);
}

int main() {
    try {
        if (!platformAvailable("IntegrateNNPStep")) return 77;
        const char* heavy = getenv("NNP_TEST_HEAVY");
        const char* quick = getenv("NNP_TEST_QUICK");
        runIntegratorTests(usesGraphs() && !(heavy && string(heavy) == "0"), quick && string(quick) == "1");
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
