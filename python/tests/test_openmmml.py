"""OpenMM-ML's MLPotential with openmm-nnp's potentials: ani1x-nnp, ani1ccx-nnp, ani2x-nnp.

Whole systems against an NNPForce built by hand; ML/MM systems (mechanical embedding, link-atom caps,
interpolation) against energies computed independently here, and forces against finite differences.
"""
import os
import subprocess
import sys

import numpy as np
import openmm
import pytest
from openmm import app, unit

import openmmnnp
from conftest import ANI2X, EXAMPLES, drug, solvated_dipeptide

from openmmml import MLPotential  # OpenMM-ML from PyPI (scripts/setup.sh installs it)

KJ = unit.kilojoule_per_mole
KJNM = unit.kilojoule_per_mole / unit.nanometer
REFERENCE = "Reference"


def evaluate(system, positions, platform=REFERENCE, groups=-1, parameters=None):
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName(platform))
    context.setPositions(positions)
    for name, value in (parameters or {}).items():
        context.setParameter(name, value)
    context.computeVirtualSites()
    state = context.getState(getEnergy=True, getForces=True, groups=groups)
    return state.getPotentialEnergy().value_in_unit(KJ), state.getForces(asNumpy=True).value_in_unit(KJNM)


def finite_difference(system, positions, atoms, h=1e-4, parameters=None):
    """Central differences (4th order) of the Reference energy for the given atoms: -dE/dx."""
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName(REFERENCE))
    for name, value in (parameters or {}).items():
        context.setParameter(name, value)
    xyz = np.array(positions.value_in_unit(unit.nanometer))
    result = []
    for atom in atoms:
        row = []
        for k in range(3):
            energies = []
            for step in (-2, -1, 1, 2):
                moved = xyz.copy()
                moved[atom, k] += step * h
                context.setPositions(moved)
                context.computeVirtualSites()
                energies.append(context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(KJ))
            row.append(-(energies[0] - 8 * energies[1] + 8 * energies[2] - energies[3]) / (12 * h))
        result.append(row)
    return np.array(result)


def molecule_topology(path):
    """A Topology (one residue, no bonds) and positions for an XYZ molecule."""
    mol = openmmnnp.readXYZ(path)
    topology = app.Topology()
    residue = topology.addResidue("MOL", topology.addChain())
    for i, element in enumerate(mol.elements):
        topology.addAtom(f"{element.symbol}{i}", element, residue)
    return topology, mol.positions


def test_registered_cheaply():
    """import openmmml registers the three names without loading openmmnnp; the entry-point module
    imports without OpenMM-ML and without raising."""
    code = ("import sys, openmmml\n"
            "from openmmml import MLPotential\n"
            "names = sorted(n for n in MLPotential._implFactories if n.endswith('-nnp'))\n"
            "assert names == ['aceff-1.0-nnp', 'aceff-1.1-nnp', 'ani1ccx-nnp', 'ani1x-nnp', 'ani2x-nnp', 'torchmdnet-nnp'], names\n"
            "assert 'openmmnnp' not in sys.modules, 'import openmmml loaded openmmnnp'\n"
            "sys.modules['openmmml'] = sys.modules['openmmml.mlpotential'] = None\n"
            "del sys.modules['openmmnnp_openmmml']\n"
            "import openmmnnp_openmmml\n"
            "assert openmmnnp_openmmml.NNPPotentialImplFactory.__bases__ == (object,)\n")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("platform", ["Reference", "CPU"])
def test_create_system_matches_force_by_hand(platform):
    topology, positions = molecule_topology(drug("0030"))
    system = MLPotential("ani2x-nnp").createSystem(topology)
    forces = [f for f in system.getForces() if openmmnnp.NNPForce.isinstance(f)]
    assert len(forces) == 1 and any(isinstance(f, openmm.CMMotionRemover) for f in system.getForces())
    nnp = openmmnnp.NNPForce.cast(forces[0])
    assert nnp.getNumBatches() == 1 and not nnp.usesPeriodicBoundaryConditions() and nnp.getForceGroup() == 0

    byHand = openmm.System()
    force = openmmnnp.NNPForce(ANI2X)
    for atom in topology.atoms():
        byHand.addParticle(atom.element.mass)
        force.addAtom(atom.index, atom.element, 0)
    byHand.addForce(force)
    energy, forcesML = evaluate(system, positions, platform)
    expected, forcesHand = evaluate(byHand, positions, platform)
    assert energy == pytest.approx(expected, rel=1e-12)
    assert np.abs(forcesML - forcesHand).max() <= 1e-9 * np.abs(forcesHand).max()
    if platform == REFERENCE:  # kJ/mol/nm, not kJ/mol/Å
        fd = finite_difference(system, positions, [0, 5, 17])
        assert np.abs(forcesML[[0, 5, 17]] - fd).max() < 1e-4 * np.abs(fd).max()  # 10x wrong units: 9


def test_arguments():
    topology, positions = molecule_topology(drug("0030"))
    potential = MLPotential("ani1x-nnp")
    mean, _ = evaluate(potential.createSystem(topology), positions)
    system = potential.createSystem(topology, modelIndex=3, someOtherToolsOption=True)  # unknown: ignored
    nnp = openmmnnp.NNPForce.cast(system.getForce(0))
    assert nnp.getEnsembleMember() == 3 and nnp.getModelName() == "ani-1x_8x"
    member, _ = evaluate(system, positions)
    assert member != pytest.approx(mean, abs=1e-3)
    # a model by path instead of the name's own
    system = MLPotential("ani2x-nnp", model=ANI2X).createSystem(topology)
    assert openmmnnp.NNPForce.cast(system.getForce(0)).getModelPath() == os.path.abspath(ANI2X)
    # periodic when the Topology is
    topology.setPeriodicBoxVectors([openmm.Vec3(3, 0, 0), openmm.Vec3(0, 3, 0), openmm.Vec3(0, 0, 3)])
    system = potential.createSystem(topology)
    assert openmmnnp.NNPForce.cast(system.getForce(0)).usesPeriodicBoundaryConditions()


def test_errors():
    topology = app.Topology()
    residue = topology.addResidue("LIG", topology.addChain())
    for element in (app.element.carbon, app.element.sulfur, app.element.hydrogen):
        topology.addAtom(element.symbol, element, residue)
    with pytest.raises(openmm.OpenMMException, match=r"atom 1 \(S of LIG .*\) is S, which model 'ani-1x_8x' does not cover"):
        MLPotential("ani1x-nnp").createSystem(topology)
    MLPotential("ani2x-nnp").createSystem(topology)  # ANI-2x has S
    with pytest.raises(openmm.OpenMMException, match="batches must be"):
        MLPotential("ani2x-nnp").createSystem(topology, batches="atom")
    with pytest.raises(openmm.OpenMMException, match="batches='molecule' needs the Topology's bonds"):
        MLPotential("ani2x-nnp").createSystem(topology, batches="molecule")
    topology.addAtom("X", None, residue)
    with pytest.raises(openmm.OpenMMException, match=r"atom 3 \(X of LIG .*\) has no element"):
        MLPotential("ani2x-nnp").createSystem(topology)
    with pytest.raises(openmm.OpenMMException, match="cannot find model 'no-such-model'"):
        MLPotential("ani2x-nnp", model="no-such-model")


def test_argument_types(tmp_path):
    """batches=, modelIndex= and model= of the wrong type are refused with a message, and a missing
    model path is refused when the potential is made, not at createSystem."""
    topology, _ = molecule_topology(drug("0030"))
    potential = MLPotential("ani2x-nnp")
    n = topology.getNumAtoms()
    for bad in (5, True, 1.5, b"chain"):
        with pytest.raises(openmm.OpenMMException, match="batches must be"):
            potential.createSystem(topology, batches=bad)
    with pytest.raises(openmm.OpenMMException, match="batch index 1 is 0.5"):
        potential.createSystem(topology, batches=[0, 0.5] + [0] * (n - 2))
    with pytest.raises(openmm.OpenMMException, match="batch index 0 is -1"):
        potential.createSystem(topology, batches=[-1] + [0] * (n - 1))
    system = potential.createSystem(topology, batches=np.zeros(n, dtype=np.int64))  # NumPy integers are fine
    assert openmmnnp.NNPForce.cast(system.getForce(0)).getNumBatches() == 1
    for bad in (1.7, True, "1"):
        with pytest.raises(openmm.OpenMMException, match="modelIndex must be an integer"):
            potential.createSystem(topology, modelIndex=bad)
    assert openmmnnp.NNPForce.cast(potential.createSystem(topology, modelIndex=np.int32(2)).getForce(0)).getEnsembleMember() == 2
    with pytest.raises(openmm.OpenMMException, match="model must be a name or a path"):
        MLPotential("ani2x-nnp", model=3)
    system = MLPotential("ani2x-nnp", model=os.fsencode(ANI2X)).createSystem(topology)  # bytes: a path
    assert openmmnnp.NNPForce.cast(system.getForce(0)).getModelPath() == os.path.abspath(ANI2X)
    missing = str(tmp_path / "missing.nnpm")
    with pytest.raises(openmm.OpenMMException, match="missing.nnpm"):
        MLPotential("torchmdnet-nnp", modelPath=missing)


def test_batches():
    """Default: one batch (molecules interact); batches='molecule' / 'residue' / a list: independent."""
    pdb = app.PDBFile(os.path.join(EXAMPLES, "alanine-dipeptide.pdb"))
    modeller = app.Modeller(pdb.topology, pdb.positions)
    shifted = [p + openmm.Vec3(0.45, 0, 0) * unit.nanometer for p in pdb.positions]
    modeller.add(pdb.topology, shifted)  # two dipeptides close enough to interact
    topology, positions = modeller.topology, modeller.positions
    potential = MLPotential("ani2x-nnp")
    one, _ = evaluate(potential.createSystem(topology), positions)
    single, _ = evaluate(potential.createSystem(pdb.topology), pdb.positions)
    single2, _ = evaluate(potential.createSystem(pdb.topology), shifted)
    assert abs(one - (single + single2)) > 1.0  # they interact in one batch
    system = potential.createSystem(topology, batches="molecule")
    energy, _ = evaluate(system, positions)
    assert energy == pytest.approx(single + single2, rel=1e-12)
    nnp = openmmnnp.NNPForce.cast(system.getForce(0))
    assert nnp.getNumBatches() == 2
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName(REFERENCE))
    context.setPositions(positions)
    batchEnergies = nnp.getBatchEnergies(context).value_in_unit(KJ)
    assert batchEnergies == pytest.approx([single, single2], rel=1e-12)
    assert openmmnnp.NNPForce.cast(potential.createSystem(topology, batches="residue").getForce(0)).getNumBatches() == 6
    listed = potential.createSystem(topology, batches=[0] * 22 + [1] * 22)
    assert evaluate(listed, positions)[0] == pytest.approx(energy, rel=1e-12)


@pytest.fixture(scope="module")
def solvated():
    """Alanine dipeptide in a 2.2 nm box of TIP3P-FB water (Amber14, PME, X-H constraints), the water
    relaxed a little around the peptide so that forces are moderate. Returns the Topology, positions
    and a function making the MM System: a tight Ewald tolerance by default and an LJ switch, so that
    the energy stays smooth where pairs cross the cutoff (for finite differences)."""
    forcefield, topology, positions = solvated_dipeptide(2.2)

    def createMM(ewaldErrorTolerance=1e-7):
        return forcefield.createSystem(topology, nonbondedMethod=app.PME, nonbondedCutoff=0.9 * unit.nanometer,
                                       constraints=app.HBonds, ewaldErrorTolerance=ewaldErrorTolerance,
                                       switchDistance=0.7 * unit.nanometer)
    context = openmm.Context(createMM(5e-4), openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("CPU"))
    context.setPositions(positions)
    openmm.LocalEnergyMinimizer.minimize(context, 50.0, 100)
    positions = context.getState(getPositions=True).getPositions(asNumpy=True)
    return topology, createMM, positions


def without_ml_internal_terms(mm, mlAtoms):
    """The MM System with every bonded term among ML atoms switched off and every ML-ML pair of the
    NonbondedForce excluded: what mechanical embedding keeps of the force field."""
    system = openmm.XmlSerializer.clone(mm)
    ml = set(mlAtoms)
    for force in system.getForces():
        if isinstance(force, openmm.HarmonicBondForce):
            for i in range(force.getNumBonds()):
                p1, p2, length, k = force.getBondParameters(i)
                if {p1, p2} <= ml:
                    force.setBondParameters(i, p1, p2, length, 0)
        elif isinstance(force, openmm.HarmonicAngleForce):
            for i in range(force.getNumAngles()):
                p1, p2, p3, angle, k = force.getAngleParameters(i)
                if {p1, p2, p3} <= ml:
                    force.setAngleParameters(i, p1, p2, p3, angle, 0)
        elif isinstance(force, openmm.PeriodicTorsionForce):
            for i in range(force.getNumTorsions()):
                p1, p2, p3, p4, n, phase, k = force.getTorsionParameters(i)
                if {p1, p2, p3, p4} <= ml:
                    force.setTorsionParameters(i, p1, p2, p3, p4, n, phase, 0)
        elif isinstance(force, openmm.NonbondedForce):
            for i in mlAtoms:
                for j in mlAtoms:
                    if i < j:
                        force.addException(i, j, 0, 1, 0, True)
    return system


def ani_energy(topology, atoms, positions):
    """ANI-2x energy of some atoms alone, from an NNPForce built by hand."""
    system = openmm.System()
    force = openmmnnp.NNPForce(ANI2X)
    allAtoms = list(topology.atoms())
    for i, atom in enumerate(atoms):
        system.addParticle(1.0)
        force.addAtom(i, allAtoms[atom].element if atom < len(allAtoms) else app.element.hydrogen, 0)
    system.addForce(force)
    return evaluate(system, positions)[0]


def test_mixed_system_whole_peptide(solvated):
    topology, createMM, positions = solvated
    mm = createMM()
    mlAtoms = list(range(22))
    mixed = MLPotential("ani2x-nnp").createMixedSystem(topology, mm, mlAtoms)
    assert mixed.getNumParticles() == mm.getNumParticles()  # no link atoms: the peptide is whole
    assert all(not {mixed.getConstraintParameters(i)[0], mixed.getConstraintParameters(i)[1]} <= set(mlAtoms)
               for i in range(mixed.getNumConstraints()))
    energy, forces = evaluate(mixed, positions)
    expected = evaluate(without_ml_internal_terms(mm, mlAtoms), positions)[0] + ani_energy(topology, mlAtoms, positions[:22])
    assert energy == pytest.approx(expected, rel=1e-11, abs=1e-6)
    atoms = [0, 8, 14, 22, 500]  # peptide atoms, then water
    fd = finite_difference(mixed, positions, atoms)
    assert np.abs(forces[atoms] - fd).max() < 1e-3 * np.abs(fd).max()


def test_mixed_system_link_atoms(solvated):
    """ML region = the alanine residue only: two link-atom caps (virtual-site hydrogens) replace the
    peptide bonds to ACE and NME; forces reach the atoms the caps are built from."""
    topology, createMM, positions = solvated
    mm = createMM()
    mlAtoms = [atom.index for atom in topology.atoms() if atom.residue.name == "ALA"]
    mixed = MLPotential("ani2x-nnp").createMixedSystem(topology, mm, mlAtoms, forceGroup=1)
    caps = list(range(mm.getNumParticles(), mixed.getNumParticles()))
    assert len(caps) == 2 and all(mixed.isVirtualSite(c) for c in caps)
    nnp = [openmmnnp.NNPForce.cast(f) for f in mixed.getForces() if openmmnnp.NNPForce.isinstance(f)][0]
    assert nnp.getNumAtoms() == len(mlAtoms) + 2 and nnp.getForceGroup() == 1 and nnp.usesPeriodicBoundaryConditions()

    # The caps, computed here: on each ML-MM bond, at the sum of the covalent radii (Pyykkö & Atsumi:
    # H 32, C 75, N 71 pm) from the ML atom.
    atoms = list(topology.atoms())
    xyz = np.array(positions.value_in_unit(unit.nanometer))
    radius = {"H": 0.032, "C": 0.075, "N": 0.071}
    capXYZ = []
    for bond in topology.bonds():
        a, b = bond.atom1.index, bond.atom2.index
        if (a in mlAtoms) != (b in mlAtoms):
            ml, other = (a, b) if a in mlAtoms else (b, a)
            direction = (xyz[other] - xyz[ml]) / np.linalg.norm(xyz[other] - xyz[ml])
            capXYZ.append(xyz[ml] + (radius[atoms[ml].element.symbol] + radius["H"]) * direction)
    assert len(capXYZ) == 2
    mlXYZ = np.concatenate([xyz[mlAtoms], np.array(capXYZ)])
    expectedML = ani_energy(topology, mlAtoms + [len(atoms), len(atoms) + 1], mlXYZ * unit.nanometer)
    withCaps = positions.value_in_unit(unit.nanometer).tolist() + [[0, 0, 0]] * 2
    withCaps = np.array(withCaps) * unit.nanometer
    energyML = evaluate(mixed, withCaps, groups={1})[0]
    assert energyML == pytest.approx(expectedML, rel=1e-11)

    energy, forces = evaluate(mixed, withCaps)
    checked = [mlAtoms[0], mlAtoms[-2], 4, 16, 600]  # ML atoms with caps, the MM atoms across, water
    fd = finite_difference(mixed, withCaps, checked)
    assert np.abs(forces[checked] - fd).max() < 1e-3 * np.abs(fd).max()

    # batches='molecule' keeps each cap with its ML atom (caps have no bonds of their own)
    mixed = MLPotential("ani2x-nnp").createMixedSystem(topology, mm, mlAtoms, batches="molecule")
    nnp = [openmmnnp.NNPForce.cast(f) for f in mixed.getForces() if openmmnnp.NNPForce.isinstance(f)][0]
    assert nnp.getNumBatches() == 1
    assert evaluate(mixed, withCaps)[0] == pytest.approx(energy, rel=1e-12)


def test_mixed_system_interpolation(solvated):
    """interpolate=True: E(λ) = λ E(ML/MM) + (1-λ) E(MM), forces alike, at λ = 0, 0.5, 1."""
    topology, createMM, positions = solvated
    mm = createMM()
    mlAtoms = list(range(22))
    potential = MLPotential("ani2x-nnp")
    energyMixed, forcesMixed = evaluate(potential.createMixedSystem(topology, mm, mlAtoms), positions)
    energyMM, forcesMM = evaluate(mm, positions)
    interpolated = potential.createMixedSystem(topology, mm, mlAtoms, interpolate=True)
    assert any(isinstance(f, openmm.CustomCVForce) for f in interpolated.getForces())
    for lam in (0.0, 0.5, 1.0):
        energy, forces = evaluate(interpolated, positions, parameters={"lambda_interpolate": lam})
        # rounding scales with the terms summed (the ML/MM total is ~1e6 kJ/mol), not with the result
        assert energy == pytest.approx(lam * energyMixed + (1 - lam) * energyMM,
                                       abs=1e-9 * max(abs(energyMixed), abs(energyMM)))
        expected = lam * forcesMixed + (1 - lam) * forcesMM
        assert np.abs(forces - expected).max() < 1e-6 * np.abs(expected).max()
    atoms = [0, 9, 300]
    fd = finite_difference(interpolated, positions, atoms, parameters={"lambda_interpolate": 0.5})
    energy, forces = evaluate(interpolated, positions, parameters={"lambda_interpolate": 0.5})
    assert np.abs(forces[atoms] - fd).max() < 1e-3 * np.abs(fd).max()


def test_mixed_system_nve(solvated):
    """NVE with NNPVerletIntegrator on CPU, 0.5 fs, 0.2 ps: the total energy drifts little. One
    ensemble member (modelIndex=0) keeps it quick: the CPU evaluation of the 8-member ensemble takes
    about 65 ms per step for these 22 atoms."""
    topology, createMM, positions = solvated
    mixed = MLPotential("ani2x-nnp").createMixedSystem(topology, createMM(1e-5), list(range(22)), modelIndex=0)
    integrator = openmmnnp.NNPVerletIntegrator(0.5 * unit.femtoseconds)
    context = openmm.Context(mixed, integrator, openmm.Platform.getPlatformByName("CPU"))
    context.setPositions(positions)
    context.setVelocitiesToTemperature(300 * unit.kelvin, 1)
    context.applyConstraints(1e-6)
    context.applyVelocityConstraints(1e-6)
    totals, kinetic = [], []
    for _ in range(20):
        integrator.step(20)
        state = context.getState(getEnergy=True)
        kinetic.append(state.getKineticEnergy().value_in_unit(KJ))
        totals.append(kinetic[-1] + state.getPotentialEnergy().value_in_unit(KJ))
    drift = np.polyfit(np.arange(len(totals)) * 0.01, totals, 1)[0]  # kJ/mol per ps
    spread = np.ptp(totals)
    print(f"\nML/MM NVE (ANI-2x member 0), {mixed.getNumParticles()} particles, 0.2 ps at 0.5 fs on CPU: drift {drift:+.3f} kJ/mol/ps "
          f"({drift / mixed.getNumParticles():+.2e} per atom), total energy range {spread:.3f} kJ/mol, "
          f"mean kinetic {np.mean(kinetic):.0f} kJ/mol")
    assert spread < 1e-3 * np.mean(kinetic)
