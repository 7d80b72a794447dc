"""Building NNPForce systems from OpenMM Topologies and XYZ files."""
import os
from dataclasses import dataclass

import openmm
from openmm import app, unit


def createForceFromTopology(model, topology, atoms=None, batches="chain", periodic=None):
    """Creates an NNPForce for (some of) the atoms of an OpenMM Topology.

    model     path of the model (.info of the ANI model zoo, or .nnpm)
    atoms     the atoms to include (Atom objects or indices); default all
    batches   "chain": one batch per chain; "molecule": one batch per bonded molecule (connected
              by the Topology's bonds); "residue": one per residue; or a list of batch indices, one
              per included atom
    periodic  apply periodic boundary conditions; default: whether the Topology has a box
    Particles are numbered as in the Topology (the usual createSystem() numbering).
    """
    from . import NNPForce
    force = NNPForce(model)
    allAtoms = list(topology.atoms())
    if atoms is None:
        chosen = allAtoms
    else:
        chosen = [allAtoms[a] if isinstance(a, int) else a for a in atoms]
    if isinstance(batches, str):
        if batches == "chain":
            key = lambda atom: atom.residue.chain.index
        elif batches == "residue":
            key = lambda atom: atom.residue.index
        elif batches == "molecule":
            parent = list(range(len(allAtoms)))

            def find(i):
                while parent[i] != i:
                    parent[i] = parent[parent[i]]
                    i = parent[i]
                return i
            for a1, a2 in topology.bonds():
                parent[find(a1.index)] = find(a2.index)
            key = lambda atom: find(atom.index)
        else:
            raise openmm.OpenMMException(f"createForceFromTopology: batches must be 'chain', 'molecule', 'residue' or a list, got {batches!r}")
        numbers = {}
        batchOf = [numbers.setdefault(key(atom), len(numbers)) for atom in chosen]
    else:
        batchOf = list(batches)
        if len(batchOf) != len(chosen):
            raise openmm.OpenMMException(f"createForceFromTopology: {len(batchOf)} batch indices for {len(chosen)} atoms")
    for atom, batch in zip(chosen, batchOf):
        if atom.element is None:
            raise openmm.OpenMMException(f"createForceFromTopology: atom {atom.index} ({atom.name}) has no element")
        force.addAtom(atom.index, atom.element.atomic_number, batch)
    if periodic is None:
        periodic = topology.getPeriodicBoxVectors() is not None
    force.setUsesPeriodicBoundaryConditions(periodic)
    return force


@dataclass
class XYZMolecule:
    """A molecule read from an XYZ file: elements, positions (Quantity, nm) and box (or None)."""
    name: str
    elements: list
    positions: unit.Quantity
    box: object = None


def readXYZ(path):
    """Reads an XYZ file (plain or extended, with Lattice="..." in Å) into an XYZMolecule."""
    with open(path) as f:
        lines = f.read().splitlines()
    try:
        count = int(lines[0].split()[0])
    except (IndexError, ValueError):
        raise openmm.OpenMMException(f"{path}: the first line must be the number of atoms")
    if len(lines) < count + 2:
        raise openmm.OpenMMException(f"{path}: {count} atoms announced, {max(len(lines) - 2, 0)} lines follow")
    comment = lines[1]
    box = None
    if 'Lattice="' in comment:
        values = [float(v) for v in comment.split('Lattice="')[1].split('"')[0].split()]
        if len(values) != 9:
            raise openmm.OpenMMException(f"{path}: Lattice must hold 9 numbers")
        box = [openmm.Vec3(*values[3 * i:3 * i + 3]) * 0.1 for i in range(3)] * unit.nanometer
    elements, positions = [], []
    for i, line in enumerate(lines[2:2 + count]):
        fields = line.split()
        if len(fields) < 4:
            raise openmm.OpenMMException(f"{path}: atom line {i + 1} must be 'symbol x y z'")
        try:
            elements.append(app.Element.getBySymbol(fields[0]))
        except KeyError:
            raise openmm.OpenMMException(f"{path}: atom {i + 1} has unknown element '{fields[0]}'")
        positions.append(openmm.Vec3(*(float(v) * 0.1 for v in fields[1:4])))
    name = os.path.splitext(os.path.basename(path))[0]
    return XYZMolecule(name, elements, positions * unit.nanometer, box)


def createSystemFromXYZ(model, paths, spacing=2.0 * unit.nanometer):
    """Builds a System with one NNPForce from XYZ files, one batch (and one Topology chain) each.

    Molecules are laid out on a grid `spacing` apart (they would not interact anyway: batches never
    do; the spacing only keeps pictures readable). Returns (system, topology, positions, force, molecules).
    """
    from . import NNPForce
    molecules = [readXYZ(p) for p in paths]
    system = openmm.System()
    topology = app.Topology()
    force = NNPForce(model)
    positions = []
    side = max(1, int(round(len(molecules) ** (1 / 3) + 0.5)))
    step = spacing.value_in_unit(unit.nanometer)
    for k, mol in enumerate(molecules):
        chain = topology.addChain(mol.name)
        residue = topology.addResidue(mol.name[:4].upper(), chain)
        offset = openmm.Vec3(k % side, (k // side) % side, k // (side * side)) * step
        xyz = mol.positions.value_in_unit(unit.nanometer)
        center = sum(xyz, openmm.Vec3(0, 0, 0)) / len(xyz)
        for element, p in zip(mol.elements, xyz):
            index = system.addParticle(element.mass)
            topology.addAtom(element.symbol, element, residue)
            force.addAtom(index, element.atomic_number, k)
            positions.append(p - center + offset)
    system.addForce(force)
    return system, topology, positions * unit.nanometer, force, molecules
