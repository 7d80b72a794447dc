"""openmmnnp: ANI neural-network potentials for many molecules at once in OpenMM.

    import openmm, openmmnnp
    force = openmmnnp.NNPForce("ani2x")               # a model name, or a .info / .nnpm path
    force.addAtom(particle, element, batch)      # element: atomic number or openmm.app.Element
    system.addForce(force)
    force.getBatchEnergies(context)              # Quantity, kJ/mol, one value per batch

Integrators: :class:`NNPLangevinIntegrator` and :class:`NNPVerletIntegrator` replay whole steps from
CUDA graphs on the CUDA platform (OpenMM's own kernels elsewhere), e.g.
``NNPLangevinIntegrator(300*kelvin, 1/picosecond, 0.5*femtoseconds)``.

Models by name: :mod:`openmmnnp.models` (``python -m openmmnnp.models``).
Helpers: :func:`createForceFromTopology`, :func:`readXYZ`, :func:`createSystemFromXYZ`,
:class:`BatchEnergyReporter`; the main job is ``python -m openmmnnp.simulate``.
Errors raise :class:`openmm.OpenMMException`.
"""
import operator as _operator
import os as _os

import openmm as _openmm  # loads OpenMM and its plugins first

from .nnpswig import NNPForce, NNPGraphIntegrator, NNPLangevinIntegrator, NNPVerletIntegrator
from .helpers import createForceFromTopology, readXYZ, createSystemFromXYZ, XYZMolecule
from .reporter import BatchEnergyReporter

__all__ = ["NNPForce", "NNPGraphIntegrator", "NNPLangevinIntegrator", "NNPVerletIntegrator", "createForceFromTopology", "readXYZ", "createSystemFromXYZ", "XYZMolecule",
           "BatchEnergyReporter", "pluginLoadFailures"]

_addAtom = NNPForce.addAtom
_setAtomParameters = NNPForce.setAtomParameters


def _integer(value, what):
    """An int from an int or a NumPy integer (as OpenMM's own methods take them); bools and floats refused."""
    if isinstance(value, bool):
        raise _openmm.OpenMMException(f"NNPForce: {what} must be an integer, got {value!r}")
    try:
        number = _operator.index(value)
    except TypeError:
        raise _openmm.OpenMMException(f"NNPForce: {what} must be an integer, got {value!r}") from None
    if not -2**31 <= number < 2**31:
        raise _openmm.OpenMMException(f"NNPForce: {what} {number} is out of range")
    return number


def _atomicNumber(element):
    if hasattr(element, "atomic_number"):
        return element.atomic_number
    try:
        return _integer(element, "element")
    except _openmm.OpenMMException:
        raise _openmm.OpenMMException(f"NNPForce: element must be an atomic number or openmm.app.Element, got {element!r}") from None


def _path(path, what="model"):
    """A str from a str, bytes or os.PathLike (pathlib.Path) path; an embedded NUL is an error, not a cut."""
    try:
        text = _os.fsdecode(path)
    except TypeError:
        raise _openmm.OpenMMException(f"NNPForce: {what} must be a name or a path (str, bytes or os.PathLike), got {path!r}") from None
    if "\0" in text:
        raise _openmm.OpenMMException(f"NNPForce: {what} {text!r} contains a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8 decode to surrogates, which OpenMM's strings cannot hold
        raise _openmm.OpenMMException(f"NNPForce: {what} {text!r} is not valid UTF-8; openmm-nnp (like OpenMM) takes "
                                      "UTF-8 paths: rename the file or link it under a UTF-8 name") from None
    return text


def addAtom(self, particle, element, batch):
    """Adds an atom: its particle index, its element (atomic number or openmm.app.Element) and its
    batch (molecule/replica index, >= 0). Returns the atom's index in the force."""
    return _addAtom(self, _integer(particle, "particle"), _atomicNumber(element), _integer(batch, "batch"))


def setAtomParameters(self, index, particle, element, batch):
    """Changes an atom; call updateParametersInContext() to apply it to a Context."""
    return _setAtomParameters(self, _integer(index, "atom index"), _integer(particle, "particle"),
                              _atomicNumber(element), _integer(batch, "batch"))


_addAtoms = NNPForce.addAtoms


def _integers(values, what, elements=False):
    """A list of ints from a sequence or NumPy array of integers (or Elements, for elements)."""
    if hasattr(values, "dtype") and hasattr(values, "tolist"):  # NumPy: 1-D integer arrays only
        if getattr(values, "ndim", 1) != 1:
            raise _openmm.OpenMMException(f"NNPForce.addAtoms: {what} must be one-dimensional (one value per atom), "
                                          f"got an array of shape {tuple(values.shape)}")
        if values.dtype.kind not in "iu":
            raise _openmm.OpenMMException(f"NNPForce.addAtoms: {what} must be integers, got an array of {values.dtype}")
        return values.tolist()
    convert = _atomicNumber if elements else (lambda v: _integer(v, what))
    return [convert(v) for v in values]


def addAtoms(self, particles, elements, batches):
    """Adds many atoms at once: sequences (or NumPy arrays) of particle indices, elements (atomic
    numbers or openmm.app.Element) and batches, of equal length; all are checked before any is
    added. Returns the index of the first atom added. Much faster than addAtom in a loop."""
    try:
        return _addAtoms(self, _integers(particles, "particles"), _integers(elements, "elements", True),
                         _integers(batches, "batches"))
    except TypeError as e:
        raise _openmm.OpenMMException(f"NNPForce.addAtoms: {e}") from None


NNPForce.addAtoms = addAtoms
_init = NNPForce.__init__
_findModel = NNPForce.findModel
_convertModel = NNPForce.convertModel


def _fromCheckpoint(path):
    """A torchmd-net checkpoint converted into the per-user cache (once per content), with a warning
    that says so and how to convert it with other units."""
    import hashlib
    import warnings
    from . import models, torchmdnet
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    stem = _os.path.splitext(_os.path.basename(path))[0][:40]
    folder = _os.path.join(models._cacheOrFail(), "converted")
    target = _os.path.join(folder, f"{stem}-{digest}.nnpm")
    if not _os.path.isfile(target):
        models._makeFolder(folder)
        torchmdnet.convert([path], target, name=stem)
        warnings.warn(f"NNPForce: converted the torchmd-net checkpoint {path} into {target} (eV and Å, "
                      "torchmd-net 2.x layout); for other units or a 3.x checkpoint, convert it yourself: "
                      f"python -m openmmnnp.models convert {path} OUT.nnpm --energy-unit ... --layout 3",
                      stacklevel=3)
    return target


def _initForce(self, model):
    """NNPForce(model): a model name ("ani2x") or path (.nnpm, an ANI model zoo .info, or a torchmd-net
    TensorNet .ckpt or ensemble .zip, converted on first use into the per-user cache)."""
    path = _path(model)
    if path.endswith((".ckpt", ".zip")) and _os.path.isfile(path):
        path = _fromCheckpoint(path)
    _init(self, path)


NNPForce.__init__ = _initForce
NNPForce.findModel = staticmethod(lambda nameOrPath: _findModel(_path(nameOrPath)))
def _convertAnyModel(source, destination):
    """NNPForce.convertModel(source, destination): a model (name, .info or .nnpm) into an .nnpm file; a
    torchmd-net TensorNet .ckpt or ensemble .zip through openmmnnp.torchmdnet.convert (eV, Å, 2.x
    layout: call that for other units)."""
    source, destination = _path(source, "source"), _path(destination, "destination")
    if source.endswith((".ckpt", ".zip")) and _os.path.isfile(source):
        from . import torchmdnet
        torchmdnet.convert([source], destination, name=_os.path.splitext(_os.path.basename(source))[0])
        return
    _convertModel(source, destination)


NNPForce.convertModel = staticmethod(_convertAnyModel)
_getAtomParameters = NNPForce.getAtomParameters
_setBatchCharge, _getBatchCharge = NNPForce.setBatchCharge, NNPForce.getBatchCharge
NNPForce.setBatchCharge = lambda self, batch, charge: _setBatchCharge(self, _integer(batch, "batch"),
                                                                      _integer(charge, "charge"))
NNPForce.getBatchCharge = lambda self, batch: _getBatchCharge(self, _integer(batch, "batch"))
_setEnsembleMember = NNPForce.setEnsembleMember
NNPForce.getAtomParameters = lambda self, index: _getAtomParameters(self, _integer(index, "atom index"))
NNPForce.setEnsembleMember = lambda self, member: _setEnsembleMember(self, _integer(member, "ensemble member"))
NNPForce.addAtom = addAtom
NNPForce.setAtomParameters = setAtomParameters


# Copies and pickles go through OpenMM's serialization, as for OpenMM's own forces (the inherited
# openmm.Force versions would give an object that NNPForce's methods cannot read).
def _copy(self):
    duplicate = self._clone()
    duplicate.__dict__.update({key: value for key, value in self.__dict__.items()
                           if key != "this" and not key.startswith("_nnp")})
    return duplicate


def _setstate(self, xml):
    other = NNPForce._deserialize(xml)
    self.this = other.this


NNPForce.__copy__ = _copy
NNPForce.__deepcopy__ = lambda self, memo: _copy(self)
NNPForce.__getstate__ = lambda self: _openmm.XmlSerializer.serialize(self)
NNPForce.__setstate__ = _setstate

NNPForce.getPluginLoadFailures()  # loads the platform libraries now, so platforms report the kernel


def pluginLoadFailures():
    """Failures while loading OpenMM's plugins and this plugin's platform libraries (each once)."""
    failures = list(_openmm.Platform.getPluginLoadFailures()) + list(NNPForce.getPluginLoadFailures())
    return list(dict.fromkeys(failures))
