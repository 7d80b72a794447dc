"""NNPLangevinIntegrator and NNPVerletIntegrator from Python: units, OpenMM equivalence on the CPU
platforms, Simulation with reporters, XML, errors."""
import io

import openmm
import pytest
from openmm import app, unit

import openmmnnp
from conftest import ANI1X, drug


def _system():
    system, topology, positions, force, _ = openmmnnp.createSystemFromXYZ(ANI1X, [drug("0030"), drug("0147")])
    return system, topology, positions


def _run(system, positions, integrator, platform, steps):
    context = openmm.Context(system, integrator, platform)
    context.setPositions(positions)
    context.setVelocitiesToTemperature(300 * unit.kelvin, 17)
    integrator.step(steps)
    state = context.getState(getPositions=True, getVelocities=True)
    return state.getPositions(asNumpy=True), state.getVelocities(asNumpy=True), context.getStepCount(), state.getTime()


def test_units_and_settings():
    integrator = openmmnnp.NNPLangevinIntegrator(310 * unit.kelvin, 2 / unit.picosecond, 0.5 * unit.femtoseconds)
    assert integrator.getTemperature() == 310 * unit.kelvin
    assert integrator.getFriction() == 2 / unit.picosecond
    assert abs(integrator.getStepSize().value_in_unit(unit.picosecond) - 0.0005) < 1e-18
    assert integrator.getStepsPerGraph() == 20 and integrator.getUseGraphs()
    integrator.setTemperature(250)  # plain numbers are K
    assert integrator.getTemperature() == 250 * unit.kelvin
    assert integrator.isStochastic() and not openmmnnp.NNPVerletIntegrator(0.001).isStochastic()


def test_errors():
    with pytest.raises(openmm.OpenMMException, match="temperature must be finite"):
        openmmnnp.NNPLangevinIntegrator(-1, 1, 0.001)
    for bad in (float("nan"), float("inf"), 0.0, -0.001):
        with pytest.raises(openmm.OpenMMException, match="step size must be finite and > 0"):
            openmmnnp.NNPVerletIntegrator(bad)
        with pytest.raises(openmm.OpenMMException, match="step size must be finite and > 0"):
            openmmnnp.NNPLangevinIntegrator(300, 1, bad)
    integrator = openmmnnp.NNPVerletIntegrator(0.001)
    with pytest.raises(openmm.OpenMMException, match="step size must be finite and > 0"):
        integrator.setStepSize(float("nan"))
    assert integrator.getStepSize() == 0.001 * unit.picosecond
    with pytest.raises(openmm.OpenMMException, match="at least 1"):
        integrator.setStepsPerGraph(0)
    with pytest.raises(openmm.OpenMMException, match="not bound to a context"):
        integrator.step(1)
    with pytest.raises(openmm.OpenMMException, match="not an NNP integrator"):
        openmmnnp.NNPGraphIntegrator.cast(openmm.VerletIntegrator(0.001))


def test_same_trajectories_as_openmm(platform):
    system, _, positions = _system()
    mine = _run(system, positions, openmmnnp.NNPVerletIntegrator(0.5 * unit.femtoseconds), platform, 12)
    theirs = _run(system, positions, openmm.VerletIntegrator(0.5 * unit.femtoseconds), platform, 12)
    assert (mine[0] == theirs[0]).all() and (mine[1] == theirs[1]).all() and mine[2:] == theirs[2:] == (12, mine[3])
    a = openmmnnp.NNPLangevinIntegrator(300, 5, 0.0005)
    b = openmm.LangevinMiddleIntegrator(300, 5, 0.0005)
    a.setRandomNumberSeed(2024)
    b.setRandomNumberSeed(2024)
    mine = _run(system, positions, a, platform, 12)
    theirs = _run(system, positions, b, platform, 12)
    assert (mine[0] == theirs[0]).all() and (mine[1] == theirs[1]).all()


def test_simulation_with_state_data_reporter():
    system, topology, positions = _system()
    integrator = openmmnnp.NNPLangevinIntegrator(300 * unit.kelvin, 1 / unit.picosecond, 0.5 * unit.femtoseconds)
    simulation = app.Simulation(topology, system, integrator, openmm.Platform.getPlatformByName("CPU"))
    simulation.context.setPositions(positions)
    out = io.StringIO()
    simulation.reporters.append(app.StateDataReporter(out, 5, step=True, time=True, potentialEnergy=True,
                                                      temperature=True))
    simulation.step(23)
    lines = out.getvalue().strip().splitlines()
    assert lines[0].startswith('#"Step"')
    assert [int(line.split(",")[0]) for line in lines[1:]] == [5, 10, 15, 20]
    assert simulation.currentStep == 23
    assert abs(simulation.context.getState().getTime().value_in_unit(unit.picosecond) - 23 * 0.0005) < 1e-12
    assert all(float(line.split(",")[3]) > 0 for line in lines[1:])  # temperature


def test_xml_round_trip():
    integrator = openmmnnp.NNPLangevinIntegrator(320, 3, 0.001)
    integrator.setRandomNumberSeed(9)
    integrator.setStepsPerGraph(11)
    xml = openmm.XmlSerializer.serialize(integrator)
    assert 'type="NNPLangevinIntegrator"' in xml
    copy = openmmnnp.NNPLangevinIntegrator.cast(openmm.XmlSerializer.deserialize(xml))
    assert copy.getTemperature() == 320 * unit.kelvin and copy.getFriction() == 3 / unit.picosecond
    assert copy.getRandomNumberSeed() == 9 and copy.getStepsPerGraph() == 11
    verlet = openmmnnp.NNPVerletIntegrator.cast(openmm.XmlSerializer.deserialize(
        openmm.XmlSerializer.serialize(openmmnnp.NNPVerletIntegrator(0.002))))
    assert verlet.getStepSize() == 0.002 * unit.picosecond
