/*
 * The shared test body of NNPForce, run on every platform by a thin Test<Platform>NNPForce.cpp that
 * sets the platform name and tolerances and calls runAllTests().
 */
#include "TestHelpers.h"

extern double energyTolerance; // relative, energies against the double-precision libnnp values
extern double forceTolerance;  // relative RMS of forces

static State evaluate(System& system, const vector<Vec3>& positions, int groups = -1) {
    VerletIntegrator integrator(0.001);
    std::unique_ptr<Context> context(makeContext(system, integrator));
    context->setPositions(positions);
    return context->getState(State::Energy | State::Forces, false, groups);
}

static double rmsRelative(const vector<Vec3>& expected, const vector<Vec3>& found) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < expected.size(); i++) {
        diff += (expected[i] - found[i]).dot(expected[i] - found[i]);
        norm += expected[i].dot(expected[i]);
    }
    return std::sqrt(diff / norm);
}

void testPublishedValues() {
    // ANI-1x member 0, methane: -40.277153758433975 Hartree.
    if (!exists(ani1x())) {
        std::cout << "  methane ANI-1x: skipped, " << ani1x() << " is not present" << std::endl;
    } else {
    System system;
    NNPForce* force = new NNPForce(ani1x());
    const double pos[5][3] = {{0, 0, 0}, {0, 1, 1}, {1, 0, 1}, {1, 1, 0}, {0.5, 0.5, 0.5}};
    const int z[5] = {1, 1, 1, 1, 6};
    vector<Vec3> positions;
    for (int i = 0; i < 5; i++) {
        force->addAtom(system.addParticle(1.0), z[i], 0);
        positions.push_back(Vec3(pos[i][0], pos[i][1], pos[i][2]) * 0.1);
    }
    force->setEnsembleMember(0);
    system.addForce(force);
    double e = evaluate(system, positions).getPotentialEnergy();
    std::cout << "  methane ANI-1x member 0: " << std::setprecision(12) << e / HARTREE << " Ha" << std::endl;
    ASSERT(std::abs(e / HARTREE - (-40.277153758433975)) <= std::max(1e-6, energyTolerance * 40.28));
    }

    // ANI-2x member 0 diatomics at 2.0 Å (kcal/mol, published with float32 rounding).
    const struct { int z; double kcal; } diatomics[] = {{9, -125100.7729}, {16, -499666.2354}, {8, -94191.3460}, {17, -577504.1792}};
    for (auto d : diatomics) {
        System s;
        NNPForce* f = new NNPForce(ani2x());
        f->setEnsembleMember(0);
        f->addAtom(s.addParticle(1.0), d.z, 0);
        f->addAtom(s.addParticle(1.0), d.z, 0);
        s.addForce(f);
        double kcal = evaluate(s, {Vec3(0, 0, 0), Vec3(0.2, 0, 0)}).getPotentialEnergy() / 4.184;
        ASSERT(std::abs(kcal - d.kcal) <= std::max(1e-7, energyTolerance) * std::abs(d.kcal));
    }
}

void testFiniteDifferences() {
    vector<Molecule> mols = {readXyz(drugs[1])};
    System system;
    vector<Vec3> positions;
    buildSystem(system, positions, mols, ani2x());
    VerletIntegrator integrator(0.001);
    std::unique_ptr<Context> owner(makeContext(system, integrator));
    Context& context = *owner;
    context.setPositions(positions);
    vector<Vec3> forces = context.getState(State::Forces).getForces();
    // Step along the force direction: dE = -|F|² h, compared with a central difference.
    double norm = 0;
    for (const Vec3& f : forces) norm += f.dot(f);
    norm = std::sqrt(norm);
    const double h = 1e-4; // nm
    vector<Vec3> plus(positions), minus(positions);
    for (size_t i = 0; i < positions.size(); i++) {
        plus[i] = positions[i] + forces[i] * (h / norm);
        minus[i] = positions[i] - forces[i] * (h / norm);
    }
    context.setPositions(plus);
    double ePlus = context.getState(State::Energy).getPotentialEnergy();
    context.setPositions(minus);
    double eMinus = context.getState(State::Energy).getPotentialEnergy();
    double fd = -(ePlus - eMinus) / (2 * h); // the energy falls along the force: fd ≈ |F|
    std::cout << "  derivative along the force: analytic " << norm << ", finite difference " << fd << std::endl;
    ASSERT_EQUAL_TOL(norm, fd, std::max(1e-4, 10 * forceTolerance));
    // Per coordinate, for the first atoms.
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 3; k++) {
            vector<Vec3> p(positions), m(positions);
            p[i][k] += h;
            m[i][k] -= h;
            context.setPositions(p);
            double ep = context.getState(State::Energy).getPotentialEnergy();
            context.setPositions(m);
            double em = context.getState(State::Energy).getPotentialEnergy();
            ASSERT(std::abs(-(ep - em) / (2 * h) - forces[i][k]) <= std::max(0.05, 100 * forceTolerance * norm / std::sqrt(positions.size())));
        }
}

void testBatchIndependence() {
    vector<Molecule> mols;
    for (const char* d : drugs) mols.push_back(readXyz(d));
    // Together, overlapping in space, in batches 0, 2, 4 (1 and 3 empty).
    System all;
    vector<Vec3> allPos;
    NNPForce* force = buildSystem(all, allPos, mols, ani2x(), 2);
    ASSERT_EQUAL(5, force->getNumBatches());
    VerletIntegrator integrator(0.001);
    std::unique_ptr<Context> owner(makeContext(all, integrator));
    Context& context = *owner;
    context.setPositions(allPos);
    State state = context.getState(State::Energy | State::Forces);
    vector<double> batchEnergies = force->getBatchEnergies(context);
    ASSERT_EQUAL(5, (int)batchEnergies.size());
    ASSERT_EQUAL(0.0, batchEnergies[1]);
    ASSERT_EQUAL(0.0, batchEnergies[3]);
    double sum = 0;
    int offset = 0;
    for (size_t k = 0; k < mols.size(); k++) {
        System one;
        vector<Vec3> onePos;
        buildSystem(one, onePos, {mols[k]}, ani2x());
        State single = evaluate(one, onePos);
        ASSERT_EQUAL_TOL(single.getPotentialEnergy(), batchEnergies[2 * k], energyTolerance);
        vector<Vec3> part(state.getForces().begin() + offset, state.getForces().begin() + offset + mols[k].z.size());
        ASSERT(rmsRelative(single.getForces(), part) <= forceTolerance);
        sum += single.getPotentialEnergy();
        offset += mols[k].z.size();
    }
    ASSERT_EQUAL_TOL(sum, state.getPotentialEnergy(), energyTolerance);
    // Moving molecule 1 far away changes nothing in the others.
    vector<Vec3> moved(allPos);
    for (size_t i = mols[0].z.size(); i < mols[0].z.size() + mols[1].z.size(); i++) moved[i] += Vec3(50, -20, 3);
    context.setPositions(moved);
    vector<double> after = force->getBatchEnergies(context);
    ASSERT_EQUAL_TOL(batchEnergies[0], after[0], energyTolerance);
    ASSERT_EQUAL_TOL(batchEnergies[4], after[4], energyTolerance);
}

void testMixedSystem() {
    // NNPForce on one molecule; a HarmonicBondForce on two other particles, which get nothing from NNPForce.
    vector<Molecule> mols = {readXyz(drugs[0])};
    System system;
    vector<Vec3> positions;
    buildSystem(system, positions, mols, ani2x());
    int a = system.addParticle(10.0), b = system.addParticle(10.0);
    positions.push_back(Vec3(0.1, 0.1, 0.1)); // inside the molecule: NNPForce must still ignore it
    positions.push_back(Vec3(0.25, 0.1, 0.1));
    HarmonicBondForce* bonds = new HarmonicBondForce();
    bonds->addBond(a, b, 0.1, 1000.0);
    bonds->setForceGroup(1);
    system.addForce(bonds);
    system.getForce(0).setForceGroup(2);
    State both = evaluate(system, positions);
    ASSERT_EQUAL_VEC(Vec3(1000.0 * 0.05, 0, 0), both.getForces()[a], 1e-6);
    ASSERT_EQUAL_VEC(Vec3(-1000.0 * 0.05, 0, 0), both.getForces()[b], 1e-6);
    State nnpOnly = evaluate(system, positions, 1 << 2);
    State bondOnly = evaluate(system, positions, 1 << 1);
    ASSERT_EQUAL_TOL(0.5 * 1000.0 * 0.05 * 0.05, bondOnly.getPotentialEnergy(), std::max(1e-9, energyTolerance));
    ASSERT_EQUAL_TOL(both.getPotentialEnergy(), nnpOnly.getPotentialEnergy() + bondOnly.getPotentialEnergy(), std::max(1e-12, energyTolerance * 1e-3));
    ASSERT_EQUAL_VEC(Vec3(0, 0, 0), nnpOnly.getForces()[a], 0);
    for (size_t i = 0; i < mols[0].z.size(); i++) ASSERT_EQUAL_VEC(nnpOnly.getForces()[i], both.getForces()[i], 1e-12);
}

void testParameterUpdates() {
    vector<Molecule> mols = {readXyz(drugs[0]), readXyz(drugs[1])};
    System system;
    vector<Vec3> positions;
    NNPForce* force = buildSystem(system, positions, mols, ani2x());
    VerletIntegrator integrator(0.001);
    std::unique_ptr<Context> owner(makeContext(system, integrator));
    Context& context = *owner;
    context.setPositions(positions);
    double separate = context.getState(State::Energy).getPotentialEnergy();
    // Move every atom of molecule 1 into batch 0, select member 3, then update.
    for (int i = 0; i < force->getNumAtoms(); i++) {
        int p, z, b;
        force->getAtomParameters(i, p, z, b);
        force->setAtomParameters(i, p, z, 0);
    }
    force->setEnsembleMember(3);
    force->updateParametersInContext(context);
    ASSERT_EQUAL(1, (int)force->getBatchEnergies(context).size());
    double merged = context.getState(State::Energy).getPotentialEnergy();
    ASSERT(std::abs(merged - separate) > 1.0);
    // A fresh Context with the same parameters agrees.
    ASSERT_EQUAL_TOL(evaluate(system, positions).getPotentialEnergy(), merged, energyTolerance);
    // Split again into three batches (a new batch count) and change an element.
    int p, z, b;
    force->getAtomParameters(0, p, z, b);
    force->setAtomParameters(0, p, z, 2);
    force->updateParametersInContext(context);
    ASSERT_EQUAL(3, (int)force->getBatchEnergies(context).size());
    ASSERT_EQUAL_TOL(evaluate(system, positions).getPotentialEnergy(), context.getState(State::Energy).getPotentialEnergy(), energyTolerance);
}

void testPeriodic() {
    vector<Molecule> mols = {readXyz(drugs[1])};
    System system;
    vector<Vec3> positions;
    NNPForce* force = buildSystem(system, positions, mols, ani2x());
    double open = evaluate(system, positions).getPotentialEnergy();
    force->setUsesPeriodicBoundaryConditions(true);
    system.setDefaultPeriodicBoxVectors(Vec3(1.1, 0, 0), Vec3(0, 1.05, 0), Vec3(0, 0, 1.2));
    vector<Vec3> shifted(positions);
    for (Vec3& p : shifted) p += Vec3(1.1, -2 * 1.05, 3 * 1.2); // whole periodic images away
    ASSERT_EQUAL_TOL(open, evaluate(system, shifted).getPotentialEnergy(), energyTolerance);
    // A box narrower than twice the cutoff is refused.
    system.setDefaultPeriodicBoxVectors(Vec3(0.8, 0, 0), Vec3(0, 1.05, 0), Vec3(0, 0, 1.2));
    bool threw = false;
    try {
        evaluate(system, positions);
    } catch (const OpenMMException& e) {
        threw = string(e.what()).find("smaller than twice") != string::npos;
    }
    ASSERT(threw);
}

void testSerialization() {
    vector<Molecule> mols = {readXyz(drugs[0]), readXyz(drugs[2])};
    System system;
    vector<Vec3> positions;
    NNPForce* force = buildSystem(system, positions, mols, smallModel());
    force->setForceGroup(5);
    force->setName("ml-part");
    force->setEnsembleMember(2);
    std::stringstream xml;
    XmlSerializer::serialize<System>(&system, "System", xml);
    std::unique_ptr<System> copy(XmlSerializer::deserialize<System>(xml));
    const NNPForce& restored = dynamic_cast<const NNPForce&>(copy->getForce(0));
    ASSERT_EQUAL(5, restored.getForceGroup());
    ASSERT_EQUAL(string("ml-part"), restored.getName());
    ASSERT_EQUAL(2, restored.getEnsembleMember());
    ASSERT_EQUAL(force->getNumAtoms(), restored.getNumAtoms());
    ASSERT(restored.getModelData() == force->getModelData());
    ASSERT_EQUAL(evaluate(system, positions).getPotentialEnergy(), evaluate(*copy, positions).getPotentialEnergy());
    // Without the model embedded, the XML refers to the path and is much smaller.
    force->setEmbedModelInXml(false);
    std::stringstream small;
    XmlSerializer::serialize<System>(&system, "System", small);
    ASSERT(small.str().size() * 100 < xml.str().size());
    std::unique_ptr<System> fromPath(XmlSerializer::deserialize<System>(small));
    ASSERT_EQUAL(evaluate(system, positions).getPotentialEnergy(), evaluate(*fromPath, positions).getPotentialEnergy());
}

/* Expects an OpenMMException whose message contains needle (or alternative, if given). */
void testErrors() {
    expectError("cannot open model file", [] { NNPForce f("/nonexistent/model.nnpm"); });
    expectError("cannot load model", [] { NNPForce f(sharedPath("molecules/druglike/drugbank-0001.xyz")); });
    NNPForce force(smallModel());
    expectError("element Fe (atomic number 26) is not covered", [&] { force.addAtom(0, 26, 0); });
    expectError("batch index -2", [&] { force.addAtom(0, 6, -2); });
    expectError("particle index -1", [&] { force.addAtom(-1, 6, 0); });
    expectError("ensemble member 8", [&] { force.setEnsembleMember(8); });
    expectError("atom index 3 is out of range", [&] { int p, z, b; force.getAtomParameters(3, p, z, b); });
    {
        System system;
        system.addParticle(1.0);
        NNPForce* f = new NNPForce(smallModel());
        f->addAtom(0, 6, 0);
        f->addAtom(4, 1, 0);
        system.addForce(f);
        expectError("refers to particle 4", [&] { evaluate(system, {Vec3()}); });
    }
    {
        System system;
        system.addParticle(1.0);
        system.addParticle(1.0);
        NNPForce* f = new NNPForce(smallModel());
        f->addAtom(0, 6, 0);
        f->addAtom(0, 1, 1);
        system.addForce(f);
        expectError("particle 0 is added twice", [&] { evaluate(system, {Vec3(), Vec3(0.1, 0, 0)}); });
    }
    {
        System system;
        NNPForce* f = new NNPForce(smallModel());
        f->addAtom(system.addParticle(1.0), 6, 0);
        f->addAtom(system.addParticle(1.0), 1, 0);
        system.addForce(f);
        double nan = std::numeric_limits<double>::quiet_NaN();
        // The CPU platform's own check may see the NaN first.
        expectError("not finite", [&] { evaluate(system, {Vec3(), Vec3(nan, 0, 0)}); }, "NaN");
    }
}

void runAllTests() {
    std::cout << "NNPForce tests on the " << platformName << " platform" << std::endl;
    vector<string> failures = NNPForce::getPluginLoadFailures();
    for (const string& f : failures) std::cout << "  plugin load failure: " << f << std::endl;
    testPublishedValues();
    testFiniteDifferences();
    testBatchIndependence();
    testMixedSystem();
    testParameterUpdates();
    testPeriodic();
    testSerialization();
    testErrors();
}

int main() {
    try {
        if (!platformAvailable("CalcNNPForce")) return 77;
        runAllTests();
    } catch (const std::exception& e) {
        std::cout << "exception: " << e.what() << std::endl;
        return 1;
    }
    std::cout << "Done" << std::endl;
    return 0;
}
