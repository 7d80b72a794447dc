"""Topology and XYZ helpers, the batch energy reporter, the main job."""
import csv
import io
import os
import signal
import subprocess
import sys
import time

import openmm
import pytest
from openmm import app, unit

import openmmnnp
from conftest import ANI1X, ANI2X, SHARED, drug


def test_read_xyz():
    mol = openmmnnp.readXYZ(drug("0030"))
    assert mol.name == "drugbank-0030" and len(mol.elements) == 22
    assert mol.elements[0] == app.element.carbon and mol.box is None
    assert mol.positions[0][0].value_in_unit(unit.nanometer) == pytest.approx(0.176890)
    cell = openmmnnp.readXYZ(f"{SHARED}/molecules/misc/tight_cell.xyz")
    assert cell.box[0][0].value_in_unit(unit.nanometer) == pytest.approx(1.57)


def test_read_xyz_errors(tmp_path):
    bad = tmp_path / "bad.xyz"
    bad.write_text("3\ncomment\nC 0 0 0\n")
    with pytest.raises(openmm.OpenMMException, match="3 atoms announced, 1 lines follow"):
        openmmnnp.readXYZ(str(bad))
    bad.write_text("0\ncomment\n")
    with pytest.raises(openmm.OpenMMException, match="announces 0 atoms"):
        openmmnnp.readXYZ(str(bad))
    bad.write_text("1\n\nC 0 x 0\n")
    with pytest.raises(openmm.OpenMMException, match="not a number"):
        openmmnnp.readXYZ(str(bad))
    bad.write_text("1\n\nQq 0 0 0\n")
    with pytest.raises(openmm.OpenMMException, match="unknown element 'Qq'"):
        openmmnnp.readXYZ(str(bad))


def test_force_from_topology():
    topology = app.Topology()
    for c in range(2):
        chain = topology.addChain()
        residue = topology.addResidue("MOL", chain)
        atoms = [topology.addAtom(f"A{i}", e, residue) for i, e in enumerate([app.element.carbon, app.element.hydrogen, app.element.oxygen])]
        topology.addBond(atoms[0], atoms[1])  # atom 2 is unbonded: its own molecule
    force = openmmnnp.createForceFromTopology(ANI1X, topology)
    assert [force.getAtomParameters(i)[2] for i in range(6)] == [0, 0, 0, 1, 1, 1]
    assert [force.getAtomParameters(i)[1] for i in range(3)] == [6, 1, 8]
    force = openmmnnp.createForceFromTopology(ANI1X, topology, batches="molecule")
    assert [force.getAtomParameters(i)[2] for i in range(6)] == [0, 0, 1, 2, 2, 3]
    force = openmmnnp.createForceFromTopology(ANI1X, topology, atoms=[3, 4, 5], batches=[7, 7, 2])
    assert [force.getAtomParameters(i) for i in range(3)] == [[3, 6, 7], [4, 1, 7], [5, 8, 2]]
    assert not force.usesPeriodicBoundaryConditions()
    with pytest.raises(openmm.OpenMMException, match="batches must be"):
        openmmnnp.createForceFromTopology(ANI1X, topology, batches="atom")


def test_reporter():
    system, topology, positions, force, _ = openmmnnp.createSystemFromXYZ(ANI2X, [drug("0003"), drug("0001")])
    integrator = openmm.VerletIntegrator(0.0005)
    simulation = app.Simulation(topology, system, integrator, openmm.Platform.getPlatformByName("CPU"))
    simulation.context.setPositions(positions)
    out = io.StringIO()
    simulation.reporters.append(openmmnnp.BatchEnergyReporter(out, 2, force))
    simulation.step(4)
    rows = list(csv.reader(io.StringIO(out.getvalue())))
    assert rows[0] == ["#Step", "Time (ps)", "E0 (kJ/mol)", "E1 (kJ/mol)"]
    assert [r[0] for r in rows[1:]] == ["2", "4"]
    last = [float(v) for v in rows[-1][2:]]
    now = force.getBatchEnergies(simulation.context).value_in_unit(unit.kilojoule_per_mole)
    assert last == pytest.approx(now, abs=1e-5)


def test_reporter_paths_and_arguments(tmp_path):
    """A pathlib.Path is a path; a path that cannot be opened, a bad interval or a bad file argument is
    a clear error at construction (nothing printed later from __del__)."""
    system, topology, positions, force, _ = openmmnnp.createSystemFromXYZ(ANI2X, [drug("0003")])
    simulation = app.Simulation(topology, system, openmm.VerletIntegrator(0.0005),
                                openmm.Platform.getPlatformByName("CPU"))
    simulation.context.setPositions(positions)
    path = tmp_path / "energies.csv"
    simulation.reporters.append(openmmnnp.BatchEnergyReporter(path, 1, force))
    simulation.step(2)
    del simulation.reporters[:]
    rows = list(csv.reader(open(path)))
    assert [r[0] for r in rows] == ["#Step", "1", "2"]
    with pytest.raises(OSError, match="BatchEnergyReporter: cannot write"):
        openmmnnp.BatchEnergyReporter(tmp_path / "absent" / "e.csv", 1, force)
    for interval in (0, -3, 1.5, True, "10"):
        with pytest.raises(ValueError, match="positive integer"):
            openmmnnp.BatchEnergyReporter(io.StringIO(), interval, force)
    with pytest.raises(TypeError, match="path or an open file"):
        openmmnnp.BatchEnergyReporter(42, 1, force)


def test_main_job_runs():
    result = subprocess.run([sys.executable, "-m", "openmmnnp.simulate", "--count", "2", "--steps", "4",
                             "--minimize", "2", "--platform", "CPU"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "2 molecules" in result.stdout and "drugbank-0002" in result.stdout
    assert "ns/day" in result.stdout and "molecule-steps/s" in result.stdout
    missing = subprocess.run([sys.executable, "-m", "openmmnnp.simulate", "--model", "/nonexistent.info"],
                             capture_output=True, text=True)
    assert missing.returncode != 0 and "Pass --model NAME or --model PATH" in missing.stderr
    unknown = subprocess.run([sys.executable, "-m", "openmmnnp.simulate", "--model", "ani9z"],
                             capture_output=True, text=True)
    assert unknown.returncode != 0 and "model 'ani9z' not found" in unknown.stderr
    assert "pip install openmm-nnp-models" in unknown.stderr and "Traceback" not in unknown.stderr


def simulate(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "openmmnnp.simulate", *args], capture_output=True, text=True,
                          timeout=600, **kwargs)


@pytest.mark.parametrize("args, message", [
    (["--count", "-3"], "--count must be at least 1, got -3"),
    (["--count", "0"], "--count must be at least 1, got 0"),
    (["--steps", "-5"], "--steps must be at least 1, got -5"),
    (["--minimize", "-1"], "--minimize must be at least 0"),
    (["--timestep", "0"], "--timestep must be a finite number > 0, got 0.0"),
    (["--timestep", "nan"], "--timestep must be a finite number > 0"),
    (["--temperature", "-1"], "--temperature must be a finite number >= 0"),
    (["--friction", "inf"], "--friction must be a finite number >= 0"),
    (["--energies-interval", "0"], "--energies-interval must be at least 1"),
    (["--energies", "/nonexistent-folder/e.csv"], "cannot write --energies '/nonexistent-folder/e.csv'"),
    (["--seed", "2147483648"], "--seed must be in 0 .. 2147483647, got 2147483648"),
    (["--seed", "-1"], "--seed must be in 0 .. 2147483647, got -1"),
])
def test_main_job_refuses_bad_arguments(args, message):
    result = simulate(*args)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_main_job_energies_every_row(tmp_path):
    """--steps 150 with rows every 40 steps: rows at 40, 80, 120 and the last step, none lost."""
    out = tmp_path / "energies.csv"
    result = simulate("--count", "2", "--steps", "150", "--minimize", "0", "--platform", "CPU", "--model", "ani1x",
                      "--energies", str(out), "--energies-interval", "40")
    assert result.returncode == 0, result.stderr
    rows = list(csv.reader(out.open()))
    assert rows[0] == ["step", "drugbank-0001", "drugbank-0002"]
    assert [r[0] for r in rows[1:]] == ["40", "80", "120", "150"]
    assert all(len(r) == 3 for r in rows)


def test_main_job_empty_molecule(tmp_path):
    (tmp_path / "empty.xyz").write_text("0\nno atoms\n")
    result = simulate("--molecules", str(tmp_path), "--platform", "Reference")
    assert result.returncode != 0 and "announces 0 atoms" in result.stderr and "Traceback" not in result.stderr


def test_force_from_topology_errors():
    topology = app.Topology()
    residue = topology.addResidue("MOL", topology.addChain())
    for e in (app.element.carbon, app.element.hydrogen):
        topology.addAtom(e.symbol, e, residue)
    for atoms, message in [([0, 5], "atom index 5 is out of range: the Topology has 2 atoms"),
                           ([0, -1], "atom index -1 is out of range"),
                           (["C"], "atoms must be Topology atoms or atom indices"),
                           ([0, 0], "an atom is listed twice")]:
        with pytest.raises(openmm.OpenMMException, match=message):
            openmmnnp.createForceFromTopology(ANI1X, topology, atoms=atoms)
    with pytest.raises(openmm.OpenMMException, match="batches='molecule' needs the Topology's bonds"):
        openmmnnp.createForceFromTopology(ANI1X, topology, batches="molecule")
    import numpy as np
    force = openmmnnp.createForceFromTopology(ANI1X, topology, atoms=np.array([1, 0]), batches="all")
    assert [force.getAtomParameters(i) for i in range(2)] == [[1, 1, 0], [0, 6, 0]]


def test_main_job_unwritable_energies_and_no_empty_csv(tmp_path):
    """A CSV that opens but cannot be written (/dev/full) ends the run with a message before the
    minimisation; a run that ends before any row (model not found) leaves no CSV of its own."""
    if os.path.exists("/dev/full"):
        result = simulate("--count", "1", "--steps", "2", "--minimize", "1", "--platform", "Reference", "--model", "ani1x",
                          "--energies", "/dev/full")
        assert result.returncode != 0 and "cannot write --energies '/dev/full'" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and "minimised" not in result.stdout
    out = tmp_path / "e.csv"
    result = simulate("--model", "ani9z", "--energies", str(out))
    assert result.returncode != 0 and not out.exists()


def test_main_job_progress_line():
    """The progress line shows the mean energy per molecule from the start and the temperature."""
    result = simulate("--count", "2", "--steps", "20", "--minimize", "0", "--platform", "CPU", "--model", "ani1x")
    assert result.returncode == 0, result.stderr
    line = [l for l in result.stderr.replace("\r", "\n").splitlines() if l.startswith("step")][-1]
    assert "E/molecule" in line and "(from the start)" in line and " K " in line, line
    temperature = float(line.split(" T ")[1].split()[0])
    assert 0 < temperature < 2000


def test_main_job_interrupt_during_minimisation(tmp_path):
    """Ctrl-C during a long minimisation stops the run within seconds, with a message, and removes
    the CSV it created before writing any row."""
    out = tmp_path / "e.csv"
    proc = subprocess.Popen([sys.executable, "-m", "openmmnnp.simulate", "--count", "4", "--minimize", "100000",
                             "--platform", "Reference", "--model", "ani1x", "--energies", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # the System is built: the minimisation starts now
    assert line.startswith("openmmnnp:"), line
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    t = time.perf_counter()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "interrupted" in err and "Traceback" not in err, err
    assert time.perf_counter() - t < 10
    assert not out.exists()


@pytest.mark.parametrize("text, message", [
    ('2\nLattice="1 0 0 0 a 0 0 0 1"\nC 0 0 0\nH 1 0 0\n', 'must hold 9 finite numbers'),
    ('2\nLattice="1 0 0 0 1 0 0 0 inf"\nC 0 0 0\nH 1 0 0\n', 'must hold 9 finite numbers'),
    ("2\nx\nC 0 0 nan\nH 1 0 0\n", "atom line 1 has a coordinate that is not finite (0 0 nan)"),
    ("2\nx\nC 0 0 0\nH 1 inf 0\n", "atom line 2 has a coordinate that is not finite"),
    ("2\nx\nC 0 0 0\nH 0 0 0\n", "atoms 1 and 2 are at the same position"),
    ("2\nx\nC 0 0 0\nBr 1.9 0 0\n", "atom 2 (Br): NNPForce: element Br"),
])
def test_xyz_errors_name_the_file(tmp_path, text, message):
    path = tmp_path / "mol.xyz"
    path.write_text(text)
    with pytest.raises(openmm.OpenMMException) as e:
        openmmnnp.createSystemFromXYZ("ani1x", [str(path)])
    assert str(e.value).startswith(str(path)) and message in str(e.value), str(e.value)
