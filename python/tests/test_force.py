"""NNPForce from Python: values, units, batches, errors."""
import math
import os
import shutil

import openmm
import pytest
from openmm import app, unit

import openmmnnp
from conftest import ANI1X, ANI2X, HARTREE, drug

METHANE = [(0, 0, 0), (0, 1, 1), (1, 0, 1), (1, 1, 0), (0.5, 0.5, 0.5)]


def methane_system(model=ANI1X):
    system = openmm.System()
    force = openmmnnp.NNPForce(model)
    for z in (1, 1, 1, 1, 6):
        force.addAtom(system.addParticle(1.0), z, 0)
    system.addForce(force)
    return system, force, [openmm.Vec3(*p) * 0.1 for p in METHANE] * unit.nanometer


def context_for(system, positions, platform):
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), platform)
    context.setPositions(positions)
    return context


def test_methane_published_value(platform):
    system, force, positions = methane_system()
    force.setEnsembleMember(0)
    context = context_for(system, positions, platform)
    energy = context.getState(getEnergy=True).getPotentialEnergy()
    assert energy.unit == unit.kilojoule_per_mole
    # Reference: double throughout; CPU: float32 networks, within 1e-8 relative (docs: README)
    tolerance = 1e-9 if platform.getName() == "Reference" else 1e-8 * 40.277153758433975
    assert abs(energy.value_in_unit(unit.kilojoule_per_mole) / HARTREE + 40.277153758433975) < tolerance
    batches = force.getBatchEnergies(context)
    assert batches.unit == unit.kilojoule_per_mole
    assert batches.value_in_unit(unit.kilojoule_per_mole) == [energy.value_in_unit(unit.kilojoule_per_mole)]


def test_api_and_elements():
    force = openmmnnp.NNPForce(ANI2X)
    assert force.getModelName() == "ani-2x_8x"
    assert force.getNumEnsembleMembers() == 8
    assert force.getSupportedElements() == [1, 6, 7, 8, 16, 9, 17]
    assert force.getCutoff().value_in_unit(unit.nanometer) == pytest.approx(0.51)
    assert force.addAtom(3, app.element.chlorine, 4) == 0
    assert force.getAtomParameters(0) == [3, 17, 4]
    assert force.getNumBatches() == 5
    force.setAtomParameters(0, 2, app.element.sulfur, 1)
    assert force.getAtomParameters(0) == [2, 16, 1]
    assert force.getEnsembleMember() == -1
    force.setUsesPeriodicBoundaryConditions(True)
    assert force.usesPeriodicBoundaryConditions()
    assert isinstance(force, openmm.Force)


def test_batches_match_single_molecules():
    mols = [openmmnnp.readXYZ(drug(n)) for n in ("0001", "0030")]
    system, _, positions, force, _ = openmmnnp.createSystemFromXYZ(ANI2X, [drug("0001"), drug("0030")])
    context = context_for(system, positions, openmm.Platform.getPlatformByName("Reference"))
    together = force.getBatchEnergies(context).value_in_unit(unit.kilojoule_per_mole)
    for k, mol in enumerate(mols):
        s, _, p, f, _ = openmmnnp.createSystemFromXYZ(ANI2X, [drug(("0001", "0030")[k])])
        alone = context_for(s, p, openmm.Platform.getPlatformByName("Reference")).getState(getEnergy=True)
        assert together[k] == pytest.approx(alone.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole), rel=1e-13)
    total = context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
    assert total == pytest.approx(sum(together), rel=1e-13)


def test_errors_are_openmm_exceptions(tmp_path):
    with pytest.raises(openmm.OpenMMException, match="cannot open model file"):
        openmmnnp.NNPForce(str(tmp_path / "missing.nnpm"))
    # A truncated copy of the model in the project's own format.
    force = openmmnnp.NNPForce(ANI1X)
    assert force.getModelPath() == ANI1X
    converted = tmp_path / "ani1x.nnpm"
    openmmnnp.NNPForce.convertModel(ANI1X, str(converted))
    data = converted.read_bytes()
    assert openmmnnp.NNPForce(str(converted)).getModelName() == "ani-1x_8x"
    (tmp_path / "cut.nnpm").write_bytes(data[: len(data) // 2])
    with pytest.raises(openmm.OpenMMException, match="truncated"):
        openmmnnp.NNPForce(str(tmp_path / "cut.nnpm"))
    with pytest.raises(openmm.OpenMMException, match="element S"):
        force.addAtom(0, 16, 0)
    with pytest.raises(openmm.OpenMMException, match="batch index -1"):
        force.addAtom(0, 6, -1)
    with pytest.raises(openmm.OpenMMException, match="atomic number or openmm.app.Element"):
        force.addAtom(0, "C", 0)
    with pytest.raises(openmm.OpenMMException, match="ensemble member 9"):
        force.setEnsembleMember(9)
    with pytest.raises(openmm.OpenMMException, match="out of range"):
        force.getAtomParameters(0)
    # Particle out of range: reported when the Context is created.
    system = openmm.System()
    system.addParticle(1.0)
    force.addAtom(5, 6, 0)
    system.addForce(force)
    with pytest.raises(openmm.OpenMMException, match="refers to particle 5"):
        openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))
    # NaN coordinates.
    system, force, positions = methane_system()
    context = context_for(system, positions, openmm.Platform.getPlatformByName("Reference"))
    bad = positions.value_in_unit(unit.nanometer)
    bad[2] = openmm.Vec3(math.nan, 0, 0)
    context.setPositions(bad)
    with pytest.raises(openmm.OpenMMException, match="not finite"):
        force.getBatchEnergies(context)


def test_cast_and_isinstance():
    system, force, _ = methane_system()
    generic = system.getForce(0)
    assert openmmnnp.NNPForce.isinstance(generic)
    assert openmmnnp.NNPForce.cast(generic).getNumAtoms() == 5
    bonds = openmm.HarmonicBondForce()
    assert not openmmnnp.NNPForce.isinstance(bonds)
    with pytest.raises(openmm.OpenMMException, match="not an NNPForce"):
        openmmnnp.NNPForce.cast(bonds)


def test_plugin_loaded():
    assert not [f for f in openmmnnp.NNPForce.getPluginLoadFailures() if "Reference" in f]
    names = [openmm.Platform.getPlatform(i).getName() for i in range(openmm.Platform.getNumPlatforms())]
    assert "Reference" in names and "CPU" in names


def test_python_argument_types(tmp_path):
    """NumPy integers, pathlib and bytes paths are taken as OpenMM's own methods take them; bools,
    floats, NUL characters and batch indices past the limit are refused with OpenMMException."""
    import pathlib
    import numpy as np
    force = openmmnnp.NNPForce(pathlib.Path(ANI1X))
    assert force.getModelPath() == os.path.abspath(ANI1X)
    assert openmmnnp.NNPForce(os.fsencode(ANI1X)).getNumEnsembleMembers() == 8
    assert openmmnnp.NNPForce.findModel(pathlib.Path(ANI1X)) == os.path.abspath(ANI1X)
    assert force.addAtom(np.int64(0), np.int32(6), np.int16(3)) == 0
    force.setAtomParameters(np.int64(0), np.int64(1), np.int8(1), np.int64(2))
    assert force.getAtomParameters(np.int64(0)) == [1, 1, 2]
    force.setEnsembleMember(np.int64(1))
    for particle, element, batch in [(0.0, 6, 0), (0, 6.0, 0), (0, 6, True), (0, "C", 0), (2**40, 6, 0)]:
        with pytest.raises(openmm.OpenMMException):
            force.addAtom(particle, element, batch)
    with pytest.raises(openmm.OpenMMException, match="NUL"):
        openmmnnp.NNPForce(ANI1X + "\0junk")
    with pytest.raises(openmm.OpenMMException, match="must be a name or a path"):
        openmmnnp.NNPForce(3)
    for bad in (b"\xff\xfe.nnpm", "\udcff.nnpm"):  # not UTF-8: a clear error, not SWIG's TypeError
        with pytest.raises(openmm.OpenMMException, match="is not valid UTF-8"):
            openmmnnp.NNPForce(bad)
        with pytest.raises(openmm.OpenMMException, match="is not valid UTF-8"):
            openmmnnp.NNPForce.findModel(bad)
    # addAtoms with a 2-D array says so
    with pytest.raises(openmm.OpenMMException, match=r"one-dimensional .* shape \(2, 3\)"):
        openmmnnp.NNPForce(ANI1X).addAtoms(np.zeros((2, 3), dtype=int), [1, 1], [0, 0])
    converted = tmp_path / "ani1x.nnpm"
    openmmnnp.NNPForce.convertModel(pathlib.Path(ANI1X), converted)
    assert converted.is_file()
    # batch indices: 0 .. 2^26 - 1 (the count max + 1 can never overflow)
    force.addAtom(2, 6, 2**26 - 1)
    assert force.getNumBatches() == 2**26
    for batch in (2**26, 2**31 - 1):
        with pytest.raises(openmm.OpenMMException, match="is too large"):
            force.addAtom(3, 6, batch)
        with pytest.raises(openmm.OpenMMException, match="is too large"):
            force.setAtomParameters(0, 0, 6, batch)


def test_add_atoms_in_bulk():
    import numpy as np
    one = openmmnnp.NNPForce(ANI1X)
    for p, z, b in [(0, 6, 0), (1, 1, 0), (2, 8, 1)]:
        one.addAtom(p, z, b)
    bulk = openmmnnp.NNPForce(ANI1X)
    assert bulk.addAtoms([0, 1], [app.element.carbon, 1], [0, 0]) == 0
    assert bulk.addAtoms(np.array([2]), np.array([8], dtype=np.int8), np.array([1], dtype=np.uint16)) == 2
    assert [bulk.getAtomParameters(i) for i in range(3)] == [one.getAtomParameters(i) for i in range(3)]
    for args, message in [(([3, 4], [6], [0, 0]), "lengths must be equal"),
                          (([3, 4], [6, 16], [0, 0]), "not covered by model"),
                          (([3, 4], [6, 6], [0, -1]), "is negative"),
                          (([3, 4], [6, 6], [0, 2**26]), "too large"),
                          ((np.array([3.0]), [6], [0]), "must be integers"),
                          (([3, 4], [6, 6], np.array([0, 2**40])), "32-bit range")]:
        with pytest.raises(openmm.OpenMMException, match=message):
            bulk.addAtoms(*args)
        assert bulk.getNumAtoms() == 3  # nothing added by a failed call



@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs at least 2 cores to tell 1 thread from several")
def test_cpu_threads_property():
    """The CPU platform's Threads property sets the NNP evaluation's threads: with Threads=1 the
    process uses no more CPU time than wall time (it used every core before)."""
    import time
    system, _, positions, _, _ = openmmnnp.createSystemFromXYZ(ANI2X, [drug("0030"), drug("0147"), drug("0009")])
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("CPU"),
                             {"Threads": "1"})
    context.setPositions(positions)
    context.getState(getForces=True)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(3):
        context.getState(getEnergy=True, getForces=True)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"\nThreads=1: {cpu:.2f} s CPU time in {wall:.2f} s")
    assert cpu < 1.25 * wall
