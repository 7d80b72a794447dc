"""XML round trip of a System with NNPForce, loaded in a fresh process."""
import subprocess
import sys

import openmm
from openmm import unit

import openmmnnp
from conftest import ANI2X, drug

CHILD = r"""
import sys, openmm, openmmnnp
system = openmm.XmlSerializer.deserialize(open(sys.argv[1]).read())
positions = [openmm.Vec3(*map(float, line.split())) for line in open(sys.argv[2])]
force = openmmnnp.NNPForce.cast(system.getForce(0))
context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))
context.setPositions(positions)
state = context.getState(getEnergy=True, groups={3})
print(repr(state.getPotentialEnergy()._value), force.getName(), force.getForceGroup(), force.getEnsembleMember(),
      *[repr(e) for e in force.getBatchEnergies(context)._value])
"""


def test_xml_round_trip_in_fresh_process(tmp_path):
    system, _, positions, force, _ = openmmnnp.createSystemFromXYZ(ANI2X, [drug("0001"), drug("0030")])
    force.setForceGroup(3)
    force.setName("ani")
    force.setEnsembleMember(5)
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(positions)
    energy = context.getState(getEnergy=True, groups={3}).getPotentialEnergy()._value
    batches = force.getBatchEnergies(context)._value
    xml = tmp_path / "system.xml"
    xml.write_text(openmm.XmlSerializer.serialize(system))
    assert "NNPForce" in xml.read_text() and "modelData" in xml.read_text()
    pos = tmp_path / "positions.txt"
    pos.write_text("\n".join(" ".join(repr(c) for c in p) for p in positions.value_in_unit(unit.nanometer)))
    result = subprocess.run([sys.executable, "-c", CHILD, str(xml), str(pos)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    fields = result.stdout.split()
    assert float(fields[0]) == energy  # identical, not just close
    assert fields[1:4] == ["ani", "3", "5"]
    assert [float(v) for v in fields[4:]] == batches
