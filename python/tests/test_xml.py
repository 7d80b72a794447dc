"""XML round trip of a System with NNPForce, loaded in a fresh process."""
import subprocess
import sys

import openmm
import pytest
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


def test_copy_deepcopy_pickle():
    """copy.copy, copy.deepcopy and pickle give independent NNPForces with the same atoms, settings
    and energies (the inherited openmm.Force versions gave objects NNPForce's methods refused)."""
    import copy
    import pickle
    system, _, positions, force, _ = openmmnnp.createSystemFromXYZ("ani1x", [drug("0030"), drug("0147")])
    force.setEnsembleMember(2)
    force.setForceGroup(3)
    force.userAttribute = "kept"
    platform = openmm.Platform.getPlatformByName("Reference")

    def energies(f):
        s = openmm.System()
        for i in range(system.getNumParticles()):
            s.addParticle(system.getParticleMass(i))
        s.addForce(f)
        context = openmm.Context(s, openmm.VerletIntegrator(0.001), platform)
        context.setPositions(positions)
        return f.getBatchEnergies(context).value_in_unit(unit.kilojoule_per_mole)

    context = openmm.Context(system, openmm.VerletIntegrator(0.001), platform)
    context.setPositions(positions)
    expected = force.getBatchEnergies(context).value_in_unit(unit.kilojoule_per_mole)
    for duplicate in (copy.copy(force), copy.deepcopy(force), pickle.loads(pickle.dumps(force))):
        assert isinstance(duplicate, openmmnnp.NNPForce) and duplicate is not force
        assert duplicate.getNumAtoms() == force.getNumAtoms() and duplicate.getNumBatches() == 2
        assert duplicate.getEnsembleMember() == 2 and duplicate.getForceGroup() == 3
        assert [duplicate.getAtomParameters(i) for i in range(5)] == [force.getAtomParameters(i) for i in range(5)]
        assert energies(duplicate) == expected
    assert copy.deepcopy(force).userAttribute == "kept"
    duplicate = copy.deepcopy(force)
    duplicate.setAtomParameters(0, 0, 6, 1)
    assert force.getAtomParameters(0)[2] == 0  # independent of the original


def test_xml_atom_count_and_strict_numbers():
    """The XML stores the atom count: a truncated atom list fails instead of loading fewer atoms;
    numbers in attributes are read strictly."""
    import re
    system, _, positions, force, _ = openmmnnp.createSystemFromXYZ("ani1x", [drug("0030"), drug("0147")])
    force.setEmbedModelInXml(False)
    xml = openmm.XmlSerializer.serialize(force)
    assert f'count="{force.getNumAtoms()}"' in xml
    again = openmmnnp.NNPForce.cast(openmm.XmlSerializer.deserialize(xml))
    assert again.getNumAtoms() == force.getNumAtoms()
    atoms = re.findall(r"<Atom [^>]*/>", xml)
    truncated = xml.replace(atoms[-1], "", 1)
    with pytest.raises(openmm.OpenMMException, match=f"announces {force.getNumAtoms()} atoms but holds {force.getNumAtoms() - 1}"):
        openmm.XmlSerializer.deserialize(truncated)
    for bad in (atoms[3].replace('b="0"', 'b="0x"'), atoms[3].replace('b="0"', 'b="99999999999"'),
                atoms[3].replace('b="0"', 'b=""')):
        assert bad != atoms[3]
        with pytest.raises(openmm.OpenMMException, match="is not an integer"):
            openmm.XmlSerializer.deserialize(xml.replace(atoms[3], bad, 1))
    # a file without the count (as written before it was stored) still loads
    old = re.sub(r'(<Atoms) count="[0-9]+"', r"\1", xml)
    assert old != xml and openmmnnp.NNPForce.cast(openmm.XmlSerializer.deserialize(old)).getNumAtoms() == force.getNumAtoms()


def test_xml_strict_booleans():
    """usesPeriodic and modelEmbedded are 0/1 (or false/true); "maybe" or "2" is an error, not a guess."""
    import re
    system, _, positions, force, _ = openmmnnp.createSystemFromXYZ("ani1x", [drug("0030")])
    force.setEmbedModelInXml(False)
    xml = openmm.XmlSerializer.serialize(force)
    for name in ("usesPeriodic", "modelEmbedded"):
        assert re.search(f'{name}="[01]"', xml), name
        for good, value in (("true", True), ("false", False)):
            if name == "modelEmbedded" and value:
                continue  # needs modelData
            edited = re.sub(f'{name}="[01]"', f'{name}="{good}"', xml)
            loaded = openmm.XmlSerializer.deserialize(edited)  # kept: cast() does not own it
            again = openmmnnp.NNPForce.cast(loaded)
            got = again.usesPeriodicBoundaryConditions() if name == "usesPeriodic" else again.getEmbedModelInXml()
            assert got == value
        for bad in ("maybe", "2", "", "yes"):
            edited = re.sub(f'{name}="[01]"', f'{name}="{bad}"', xml)
            with pytest.raises(openmm.OpenMMException, match=f'{name}="{bad}" is not a boolean'):
                openmm.XmlSerializer.deserialize(edited)
