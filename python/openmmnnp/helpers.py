"""Building NNPForce systems from OpenMM Topologies and XYZ files."""
import operator
import math
import numbers
import os
from dataclasses import dataclass

import openmm
from openmm import app, unit


def _describe(atom):
    """'atom 12 (CB of ALA 2)': an atom as a user finds it in the Topology."""
    return f"atom {atom.index} ({atom.name} of {atom.residue.name} {atom.residue.id})"


def _chosenAtoms(topology, atoms, caller):
    allAtoms = list(topology.atoms())
    if atoms is None:
        return allAtoms
    chosen = []
    for a in atoms:
        if isinstance(a, app.topology.Atom):
            chosen.append(a)
            continue
        try:
            index = operator.index(a)
        except TypeError:
            raise openmm.OpenMMException(f"{caller}: atoms must be Topology atoms or atom indices, got {a!r}") from None
        if not 0 <= index < len(allAtoms):
            raise openmm.OpenMMException(f"{caller}: atom index {index} is out of range: the Topology has {len(allAtoms)} atoms")
        chosen.append(allAtoms[index])
    if len({atom.index for atom in chosen}) != len(chosen):
        raise openmm.OpenMMException(f"{caller}: an atom is listed twice")
    return chosen


def _batchIndices(topology, chosen, batches, system, caller):
    """One batch index per chosen atom, numbered 0, 1, ... in order of first appearance."""
    if batches is None or (isinstance(batches, str) and batches == "all"):
        return [0] * len(chosen)
    if not isinstance(batches, str):
        if isinstance(batches, (bool, numbers.Number, bytes)):
            raise openmm.OpenMMException(f"{caller}: batches must be 'all', 'chain', 'molecule', 'residue' or a list of "
                                         f"batch indices (one per atom), got {batches!r}")
        try:
            batchOf = list(batches)
        except TypeError:
            raise openmm.OpenMMException(f"{caller}: batches must be 'all', 'chain', 'molecule', 'residue' or a list of "
                                         f"batch indices (one per atom), got a {type(batches).__name__}") from None
        if len(batchOf) != len(chosen):
            raise openmm.OpenMMException(f"{caller}: {len(batchOf)} batch indices for {len(chosen)} atoms")
        for k, b in enumerate(batchOf):
            if isinstance(b, bool) or not isinstance(b, numbers.Integral) or b < 0:
                raise openmm.OpenMMException(f"{caller}: batch index {k} is {b!r}: batch indices are integers >= 0")
        return [int(b) for b in batchOf]
    allAtoms = list(topology.atoms())
    if batches == "chain":
        key = lambda atom: atom.residue.chain.index
    elif batches == "residue":
        key = lambda atom: atom.residue.index
    elif batches == "molecule":
        if len(chosen) > 1 and next(iter(topology.bonds()), None) is None:
            raise openmm.OpenMMException(f"{caller}: batches='molecule' needs the Topology's bonds, and it has none "
                                         "(every atom would be a molecule of its own); add bonds (PDB CONECT records, "
                                         "Topology.createStandardBonds()) or choose batches='all', 'chain', 'residue' or a list")
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
        raise openmm.OpenMMException(f"{caller}: batches must be 'all', 'chain', 'molecule', 'residue' or a list, got {batches!r}")
    # A virtual site (e.g. a link-atom cap that OpenMM-ML adds in a chain of its own, with no bonds)
    # belongs to the molecule of the particle it is built from.
    owner = {}
    if system is not None:
        for atom in chosen:
            if atom.index < system.getNumParticles() and system.isVirtualSite(atom.index):
                owner[atom.index] = allAtoms[system.getVirtualSite(atom.index).getParticle(0)]
    first = {}
    return [first.setdefault(key(owner.get(atom.index, atom)), len(first)) for atom in chosen]


def createForceFromTopology(model, topology, atoms=None, batches="chain", periodic=None, system=None):
    """Creates an NNPForce for (some of) the atoms of an OpenMM Topology.

    model     model name ("ani2x", ...) or path (.info of the ANI model zoo, or .nnpm)
    atoms     the atoms to include (Atom objects or indices); default all
    batches   "chain": one batch per chain; "molecule": one batch per bonded molecule (connected
              by the Topology's bonds); "residue": one per residue; "all" (or None): all atoms in one
              batch; or a list of batch indices, one per included atom
    periodic  apply periodic boundary conditions; default: whether the Topology has a box
    system    the System the force is for (optional): its virtual sites join the batch of the
              particle they are built from
    Particles are numbered as in the Topology (the usual createSystem() numbering).
    """
    from . import NNPForce
    caller = "createForceFromTopology"
    chosen = _chosenAtoms(topology, atoms, caller)
    force = NNPForce(model)
    supported = set(force.getSupportedElements())
    for atom in chosen:
        if atom.element is None:
            raise openmm.OpenMMException(f"{caller}: {_describe(atom)} has no element")
        if atom.element.atomic_number not in supported:
            names = ", ".join(app.Element.getByAtomicNumber(z).symbol for z in sorted(supported))
            raise openmm.OpenMMException(f"{caller}: {_describe(atom)} is {atom.element.symbol}, which model "
                                         f"'{force.getModelName()}' does not cover (it has {names})")
    for atom, batch in zip(chosen, _batchIndices(topology, chosen, batches, system, caller)):
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
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise openmm.OpenMMException(f"{path}: cannot read: {e}") from None
    try:
        count = int(lines[0].split()[0])
    except (IndexError, ValueError):
        raise openmm.OpenMMException(f"{path}: the first line must be the number of atoms")
    if count < 1:
        raise openmm.OpenMMException(f"{path}: announces {count} atoms; a molecule needs at least one")
    if len(lines) < count + 2:
        raise openmm.OpenMMException(f"{path}: {count} atoms announced, {max(len(lines) - 2, 0)} lines follow")
    comment = lines[1]
    box = None
    if 'Lattice="' in comment:
        text = comment.split('Lattice="')[1].split('"')[0]
        try:
            values = [float(v) for v in text.split()]
        except ValueError:
            values = []
        if len(values) != 9 or not all(math.isfinite(v) for v in values):
            raise openmm.OpenMMException(f'{path}: Lattice="{text}" must hold 9 finite numbers (the box vectors in Å)')
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
        try:
            xyz = [float(v) * 0.1 for v in fields[1:4]]
        except ValueError:
            raise openmm.OpenMMException(f"{path}: atom line {i + 1} has a coordinate that is not a number") from None
        if not all(math.isfinite(v) for v in xyz):
            raise openmm.OpenMMException(f"{path}: atom line {i + 1} has a coordinate that is not finite ({' '.join(fields[1:4])})")
        positions.append(openmm.Vec3(*xyz))
    seen = {}
    for i, p in enumerate(positions):
        key = (p[0], p[1], p[2])
        if key in seen:
            raise openmm.OpenMMException(f"{path}: atoms {seen[key] + 1} and {i + 1} are at the same position")
        seen[key] = i
    name = os.path.splitext(os.path.basename(path))[0]
    return XYZMolecule(name, elements, positions * unit.nanometer, box)


def createSystemFromXYZ(model, paths, spacing=2.0 * unit.nanometer):
    """Builds a System with one NNPForce from XYZ files, one batch (and one Topology chain) each.

    Molecules are laid out on a grid `spacing` apart (they would not interact anyway: batches never
    do; the spacing only keeps pictures readable). Returns (system, topology, positions, force, molecules).
    """
    from . import NNPForce
    paths = list(paths)
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
        for i, (element, p) in enumerate(zip(mol.elements, xyz)):
            index = system.addParticle(element.mass)
            topology.addAtom(element.symbol, element, residue)
            try:
                force.addAtom(index, element.atomic_number, k)
            except openmm.OpenMMException as e:
                raise openmm.OpenMMException(f"{paths[k]}: atom {i + 1} ({element.symbol}): {e}") from None
            positions.append(p - center + offset)
    system.addForce(force)
    return system, topology, positions * unit.nanometer, force, molecules
