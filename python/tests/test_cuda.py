"""NNPForce and the NNP integrators on OpenMM's CUDA platform, from Python: energies, forces and
per-batch energies against the Reference platform, whole steps replayed from CUDA graphs, XML.
Skipped (saying why) where no CUDA platform loads, as on a machine without an NVIDIA GPU."""
import os

import numpy as np
import openmm
import pytest
from openmm import unit

import openmmnnp
from conftest import EXAMPLES, drug, solvated_dipeptide

try:
    CUDA = openmm.Platform.getPlatformByName("CUDA")
except openmm.OpenMMException:
    CUDA = None
pytestmark = pytest.mark.skipif(CUDA is None or not (CUDA and CUDA.supportsKernels(["CalcNNPForce"])),
                                reason="no CUDA platform with NNPForce here (no NVIDIA driver, or the "
                                       "openmm-nnp-cuda-13 plugin is not installed)")

# H, C, N, O only (ANI-1x): drugbank-0030 (22 atoms), -0147 (39), -0009 (40).
MOLECULES = [drug("0030"), drug("0147"), drug("0009")]
# Mixed precision: float32 networks and AEVs, double energy sums (measured on an H200 against the
# Reference platform for these molecules: forces 3.1e-5 relative RMS). Double: float64 throughout.
ENERGY_TOLERANCE = {"mixed": 1e-8, "double": 1e-11}
FORCE_TOLERANCE = {"mixed": 1e-4, "double": 1e-9}


def system_and_positions():
    system, _, positions, force, _ = openmmnnp.createSystemFromXYZ("ani1x", MOLECULES)
    return system, positions, force


def evaluate(system, positions, force, platform, properties=None):
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), platform, properties or {})
    context.setPositions(positions)
    state = context.getState(getEnergy=True, getForces=True)
    energy = state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
    forces = state.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.nanometer)
    batches = np.array(force.getBatchEnergies(context).value_in_unit(unit.kilojoule_per_mole))
    return energy, forces, batches


@pytest.mark.parametrize("precision", ["mixed", "double"])
def test_energies_forces_batches_match_reference(precision):
    system, positions, force = system_and_positions()
    e_ref, f_ref, b_ref = evaluate(system, positions, force, openmm.Platform.getPlatformByName("Reference"))
    e, f, b = evaluate(system, positions, force, CUDA, {"Precision": precision})
    assert len(b) == len(b_ref) == len(MOLECULES)
    assert abs(e - e_ref) <= ENERGY_TOLERANCE[precision] * abs(e_ref), (e, e_ref)
    assert np.all(np.abs(b - b_ref) <= ENERGY_TOLERANCE[precision] * np.abs(b_ref)), (b, b_ref)
    assert abs(b.sum() - e) <= 1e-12 * abs(e)
    rms = np.sqrt(np.mean((f - f_ref) ** 2) / np.mean(f_ref ** 2))
    print(f"CUDA {precision} against Reference: energy {abs(e - e_ref) / abs(e_ref):.2e} relative, "
          f"batches {np.max(np.abs(b - b_ref) / np.abs(b_ref)):.2e}, forces {rms:.2e} relative RMS")
    assert rms <= FORCE_TOLERANCE[precision], rms
    # Independent molecules: each batch energy equals that molecule evaluated alone.
    alone, _, p, force1, _ = openmmnnp.createSystemFromXYZ("ani1x", MOLECULES[1:2])
    e1, _, _ = evaluate(alone, p, force1, CUDA, {"Precision": precision})
    assert abs(e1 - b[1]) <= ENERGY_TOLERANCE[precision] * abs(e1)


def positions_after(system, positions, integrator, calls):
    """Positions and velocities after integrator.step(n) for each n in calls, and for an NNP
    integrator (isReplayingGraphs, getNumGraphRecordings, getFallbackReason) while its Context lives."""
    context = openmm.Context(system, integrator, CUDA, {"Precision": "mixed"})
    context.setPositions(positions)
    context.computeVirtualSites()  # link-atom caps of ML/MM Systems
    context.setVelocitiesToTemperature(300 * unit.kelvin, 5)
    for n in calls:
        integrator.step(n)
    state = context.getState(getPositions=True, getVelocities=True)
    graphs = None
    if hasattr(integrator, "isReplayingGraphs"):
        graphs = (integrator.isReplayingGraphs(), integrator.getNumGraphRecordings(), integrator.getFallbackReason())
    return (state.getPositions(asNumpy=True).value_in_unit(unit.nanometer),
            state.getVelocities(asNumpy=True).value_in_unit(unit.nanometer / unit.picosecond), graphs)


def test_verlet_graphs_match_eager_and_openmm():
    system, positions, _ = system_and_positions()
    calls = [1, 23, 20, 3, 0, 7]
    graphs = openmmnnp.NNPVerletIntegrator(0.5 * unit.femtoseconds)
    graphs.setStepsPerGraph(10)
    replayed = positions_after(system, positions, graphs, calls)
    assert replayed[2] == (True, 4, "")  # replaying graphs of 10, 2, 1 and 4 steps, no fallback
    eager = openmmnnp.NNPVerletIntegrator(0.5 * unit.femtoseconds)
    eager.setUseGraphs(False)
    stepped = positions_after(system, positions, eager, calls)
    assert stepped[2] == (False, 0, "")
    theirs = positions_after(system, positions, openmm.VerletIntegrator(0.5 * unit.femtoseconds), calls)
    for a, b, c in zip(replayed[:2], stepped[:2], theirs[:2]):
        assert np.array_equal(a, b) and np.array_equal(a, c)


def test_langevin_graphs_reproducible_and_sampling():
    system, positions, _ = system_and_positions()

    def run(seed, graphs):
        integrator = openmmnnp.NNPLangevinIntegrator(300 * unit.kelvin, 5 / unit.picosecond, 0.5 * unit.femtoseconds)
        integrator.setRandomNumberSeed(seed)
        integrator.setStepsPerGraph(4)
        integrator.setUseGraphs(graphs)
        result = positions_after(system, positions, integrator, [9] * 4)
        assert result[2][0] == graphs
        return result[0]

    first, again, eager, other = run(1234, True), run(1234, True), run(1234, False), run(4321, True)
    assert np.array_equal(first, again)
    assert np.array_equal(first, eager)
    assert np.max(np.abs(first - other)) > 1e-6
    # The thermostat works from graphs: 40 molecules of ANI-1x at 300 K for 2,000 steps.
    system, _, positions, _, _ = openmmnnp.createSystemFromXYZ("ani1x", MOLECULES * 14)
    integrator = openmmnnp.NNPLangevinIntegrator(300 * unit.kelvin, 10 / unit.picosecond, 0.5 * unit.femtoseconds)
    context = openmm.Context(system, integrator, CUDA, {"Precision": "mixed"})
    context.setPositions(positions)
    openmm.LocalEnergyMinimizer.minimize(context, 10.0, 50)
    context.setVelocitiesToTemperature(300 * unit.kelvin, 3)
    integrator.step(500)
    temperatures = []
    dof = 3 * system.getNumParticles() - 3
    for _ in range(15):
        integrator.step(100)
        kinetic = context.getState(getEnergy=True).getKineticEnergy()
        temperatures.append((2 * kinetic / (dof * unit.MOLAR_GAS_CONSTANT_R)).value_in_unit(unit.kelvin))
    assert integrator.isReplayingGraphs()
    print(f"NNPLangevinIntegrator from graphs, 42 molecules: mean temperature {np.mean(temperatures):.1f} K")
    assert 270 < np.mean(temperatures) < 330, temperatures


def test_xml_round_trip_on_cuda():
    system, positions, force = system_and_positions()
    copy = openmm.XmlSerializer.deserialize(openmm.XmlSerializer.serialize(system))
    forces = [openmmnnp.NNPForce.cast(f) for f in copy.getForces() if f.getName() == force.getName()]
    assert len(forces) == 1 and forces[0].getModelPath() == force.getModelPath()
    e, f, b = evaluate(system, positions, force, CUDA)
    e2, f2, b2 = evaluate(copy, positions, forces[0], CUDA)
    assert e == e2 and np.array_equal(f, f2) and np.array_equal(b, b2)
    integrator = openmmnnp.NNPVerletIntegrator.cast(
        openmm.XmlSerializer.deserialize(openmm.XmlSerializer.serialize(openmmnnp.NNPVerletIntegrator(0.0005))))
    a = positions_after(system, positions, integrator, [20])
    b = positions_after(copy, positions, openmmnnp.NNPVerletIntegrator(0.0005), [20])
    assert np.array_equal(a[0], b[0]) and a[2][0] and b[2][0]


def energies_and_forces(system, positions, platform, groups=-1, parameters=None, properties=None):
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), platform, properties or {})
    context.setPositions(positions)
    for name, value in (parameters or {}).items():
        context.setParameter(name, value)
    context.computeVirtualSites()
    state = context.getState(getEnergy=True, getForces=True, groups=groups)
    return (state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole),
            state.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.nanometer))


def relative_rms(a, b):
    return np.sqrt(np.mean((a - b) ** 2) / np.mean(b ** 2))


def test_mlmm_on_cuda_matches_reference():
    """OpenMM-ML's mixed System (ani1x-nnp for the peptide, Amber14 + PME for the water, ML in
    force group 1) and its interpolated form, on CUDA (mixed precision) against Reference."""
    from openmmml import MLPotential
    from openmm import app
    forcefield, topology, positions = solvated_dipeptide(2.2)
    mm = forcefield.createSystem(topology, nonbondedMethod=app.PME, nonbondedCutoff=0.9 * unit.nanometer,
                                 constraints=app.HBonds)
    potential = MLPotential("ani1x-nnp")
    reference = openmm.Platform.getPlatformByName("Reference")
    mixed = potential.createMixedSystem(topology, mm, list(range(22)), forceGroup=1)
    mlRef = energies_and_forces(mixed, positions, reference, groups={1})
    ml = energies_and_forces(mixed, positions, CUDA, groups={1}, properties={"Precision": "mixed"})
    totalRef = energies_and_forces(mixed, positions, reference)
    total = energies_and_forces(mixed, positions, CUDA, properties={"Precision": "mixed"})
    print(f"ML/MM on CUDA against Reference: ML energy {abs(ml[0] - mlRef[0]) / abs(mlRef[0]):.2e}, ML forces "
          f"{relative_rms(ml[1], mlRef[1]):.2e} relative RMS; total energy {abs(total[0] - totalRef[0]) / abs(totalRef[0]):.2e}, "
          f"total forces {relative_rms(total[1], totalRef[1]):.2e}")
    assert abs(ml[0] - mlRef[0]) <= ENERGY_TOLERANCE["mixed"] * abs(mlRef[0])
    assert relative_rms(ml[1], mlRef[1]) <= FORCE_TOLERANCE["mixed"]
    # The MM part differs by OpenMM's own CUDA-vs-Reference PME differences (Ewald tolerance 5e-4).
    assert abs(total[0] - totalRef[0]) <= 1e-5 * abs(totalRef[0])
    assert relative_rms(total[1], totalRef[1]) <= 1e-3

    interpolated = potential.createMixedSystem(topology, mm, list(range(22)), interpolate=True)
    for lam in (0.0, 0.5, 1.0):
        eRef, fRef = energies_and_forces(interpolated, positions, reference, parameters={"lambda_interpolate": lam})
        e, f = energies_and_forces(interpolated, positions, CUDA, parameters={"lambda_interpolate": lam},
                                   properties={"Precision": "mixed"})
        assert abs(e - eRef) <= 1e-5 * abs(eRef), (lam, e, eRef)
        assert relative_rms(f, fRef) <= 1e-3, lam


def test_mlmm_graph_integrators():
    """Graph integrators with ML/MM Systems: PME or a CustomCVForce (interpolation) make them run
    eager steps and say why; a cutoff-free ML/MM System with link-atom caps replays from graphs and
    gives OpenMM's VerletIntegrator trajectory."""
    from openmmml import MLPotential
    from openmm import app
    forcefield, topology, positions = solvated_dipeptide(2.2)
    mm = forcefield.createSystem(topology, nonbondedMethod=app.PME, nonbondedCutoff=0.9 * unit.nanometer,
                                 constraints=app.HBonds)
    potential = MLPotential("ani1x-nnp")
    for system, reason in [(potential.createMixedSystem(topology, mm, list(range(22))), "NonbondedForce) uses a cutoff"),
                           (potential.createMixedSystem(topology, forcefield.createSystem(topology), list(range(22)),
                                                        interpolate=True), "CustomCVForce")]:
        integrator = openmmnnp.NNPLangevinIntegrator(300 * unit.kelvin, 1 / unit.picosecond, 0.5 * unit.femtoseconds)
        replaying, recordings, why = positions_after(system, positions, integrator, [10])[2]
        assert not replaying and recordings == 0 and reason in why, why
    # In vacuum without cutoff: ALA with ANI-1x, the caps as virtual sites, ACE and NME with Amber14.
    pdb = app.PDBFile(os.path.join(EXAMPLES, "alanine-dipeptide.pdb"))
    vacuum = forcefield.createSystem(pdb.topology, nonbondedMethod=app.NoCutoff)
    mixed = potential.createMixedSystem(pdb.topology, vacuum, list(range(6, 16)))
    assert mixed.getNumParticles() == 24
    withCaps = list(pdb.positions) + [openmm.Vec3(0, 0, 0) * unit.nanometer] * 2
    graphs = openmmnnp.NNPVerletIntegrator(0.5 * unit.femtoseconds)
    graphs.setStepsPerGraph(10)
    replayed = positions_after(mixed, withCaps, graphs, [1, 25])
    assert replayed[2][0] and replayed[2][1] > 0, replayed[2]
    theirs = positions_after(mixed, withCaps, openmm.VerletIntegrator(0.5 * unit.femtoseconds), [1, 25])
    assert np.array_equal(replayed[0], theirs[0]) and np.array_equal(replayed[1], theirs[1])


def replicas_system(replicas, seed=7, spacing=2.0):
    """`replicas` copies of drugbank-0030 (22 atoms, ANI-1x), each distorted a little differently, on
    a grid `spacing` nm apart: (system, positions, force)."""
    mol = openmmnnp.readXYZ(drug("0030"))
    rng = np.random.default_rng(seed)
    xyz = np.array(mol.positions.value_in_unit(unit.nanometer))
    n = len(xyz)
    side = int(np.ceil(replicas ** (1 / 3)))
    system = openmm.System()
    positions = []
    for b in range(replicas):
        offset = spacing * np.array([b % side, (b // side) % side, b // (side * side)])
        positions.extend(xyz + offset + rng.normal(0, 0.003, xyz.shape))
        for e in mol.elements:
            system.addParticle(e.mass)
    force = openmmnnp.NNPForce("ani1x")
    force.addAtoms(range(replicas * n), [e.atomic_number for e in mol.elements] * replicas,
                   [b for b in range(replicas) for _ in range(n)])
    system.addForce(force)
    return system, np.array(positions), force


def test_identical_replicas_reordered():
    """Identical replicas compare identical to OpenMM, which may then reorder whole molecules (it does
    when a force uses a cutoff): per-batch energies and forces still match Reference after steps."""
    system, positions, force = replicas_system(64)
    cutoff = openmm.NonbondedForce()  # LJ with a cutoff: makes OpenMM sort molecules in space
    cutoff.setNonbondedMethod(openmm.NonbondedForce.CutoffNonPeriodic)
    cutoff.setCutoffDistance(1.0)
    for _ in range(system.getNumParticles()):
        cutoff.addParticle(0.0, 0.3, 0.0)
    system.addForce(cutoff)
    context = openmm.Context(system, openmm.VerletIntegrator(0.0002), CUDA, {"Precision": "mixed"})
    context.setPositions(positions)
    context.setVelocitiesToTemperature(300 * unit.kelvin, 2)
    context.getIntegrator().step(300)  # OpenMM reorders atoms at its first step and every 250 steps
    state = context.getState(getPositions=True, getForces=True, getEnergy=True)
    cudaBatches = np.array(force.getBatchEnergies(context).value_in_unit(unit.kilojoule_per_mole))
    reference = openmm.Context(system, openmm.VerletIntegrator(0.0002), openmm.Platform.getPlatformByName("Reference"))
    reference.setPositions(state.getPositions())
    refState = reference.getState(getForces=True, getEnergy=True)
    refBatches = np.array(force.getBatchEnergies(reference).value_in_unit(unit.kilojoule_per_mole))
    assert len(set(np.round(refBatches, 3))) == 64  # the replicas differ
    assert np.all(np.abs(cudaBatches - refBatches) <= ENERGY_TOLERANCE["mixed"] * np.abs(refBatches))
    f = state.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.nanometer)
    fRef = refState.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.nanometer)
    assert np.sqrt(np.mean((f - fRef) ** 2) / np.mean(fRef ** 2)) <= FORCE_TOLERANCE["mixed"]


def test_many_replicas():
    """1,000 to 100,000 replicas on CUDA: the Context is made and evaluated (100,000 replicas are
    2.2 million atoms); the setup times are printed (a benchmark: bench/replica_setup.py)."""
    import time
    times = {}
    for replicas in (1000, 10000, 100000):
        system, positions, _ = replicas_system(replicas, spacing=1.5)
        start = time.perf_counter()
        context = openmm.Context(system, openmm.VerletIntegrator(0.0005), CUDA, {"Precision": "mixed"})
        context.setPositions(positions)
        energy = context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
        times[replicas] = time.perf_counter() - start
        assert np.isfinite(energy) and energy < 0
        del context
    print("Context creation + first energy on CUDA: " +
          ", ".join(f"{n:,} replicas {t:.2f} s" for n, t in times.items()))
