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
import openmm as _openmm  # loads OpenMM and its plugins first

from .nnpswig import NNPForce, NNPGraphIntegrator, NNPLangevinIntegrator, NNPVerletIntegrator
from .helpers import createForceFromTopology, readXYZ, createSystemFromXYZ, XYZMolecule
from .reporter import BatchEnergyReporter

__all__ = ["NNPForce", "NNPGraphIntegrator", "NNPLangevinIntegrator", "NNPVerletIntegrator", "createForceFromTopology", "readXYZ", "createSystemFromXYZ", "XYZMolecule",
           "BatchEnergyReporter", "pluginLoadFailures"]

_addAtom = NNPForce.addAtom
_setAtomParameters = NNPForce.setAtomParameters


def _atomicNumber(element):
    number = getattr(element, "atomic_number", element)
    if isinstance(number, bool) or not isinstance(number, int):
        raise _openmm.OpenMMException(f"NNPForce: element must be an atomic number or openmm.app.Element, got {element!r}")
    return number


def addAtom(self, particle, element, batch):
    """Adds an atom: its particle index, its element (atomic number or openmm.app.Element) and its
    batch (molecule/replica index, >= 0). Returns the atom's index in the force."""
    return _addAtom(self, particle, _atomicNumber(element), batch)


def setAtomParameters(self, index, particle, element, batch):
    """Changes an atom; call updateParametersInContext() to apply it to a Context."""
    return _setAtomParameters(self, index, particle, _atomicNumber(element), batch)


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
