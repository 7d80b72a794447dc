"""OpenMM-ML potentials computed by NNPForce: ``MLPotential('ani2x-nnp')``, ``'ani1x-nnp'``, ``'ani1ccx-nnp'``.

Installed with openmm-nnp, these names are registered with OpenMM-ML through its entry-point group
``openmmml.potentials`` (see :mod:`openmmnnp_openmmml`), so that::

    from openmmml import MLPotential
    potential = MLPotential("ani2x-nnp")                         # the model found by name
    system = potential.createSystem(topology)                   # the whole Topology with ANI-2x
    mixed = potential.createMixedSystem(topology, mmSystem, mlAtoms)   # ML/MM

Arguments of ``MLPotential(name, ...)``:
    model       model name or path (.nnpm, or .info of the ANI model zoo) to use instead of the
                name's own model ("ani2x" for "ani2x-nnp")
Arguments of ``createSystem`` / ``createMixedSystem`` (passed on to :meth:`addForces`):
    batches     None (default): all selected atoms in one batch, OpenMM-ML's own ANI physics (atoms
                of nearby molecules interact); "molecule" (bonded components), "residue", "chain",
                or a list of batch indices: independent molecules or replicas, each with its energy
                (``NNPForce.getBatchEnergies``)
    modelIndex  one ensemble member instead of the ensemble mean (as OpenMM-ML's "ani2x")
Other keyword arguments are accepted and ignored, as OpenMM-ML expects.
"""
import openmm
from openmm import app

from .helpers import createForceFromTopology

#: OpenMM-ML names and the model each one finds by name.
MODELS = {"ani1x-nnp": "ani1x", "ani1ccx-nnp": "ani1ccx", "ani2x-nnp": "ani2x"}

try:
    from openmmml.mlpotential import MLPotentialImpl as _ImplBase
except ImportError:  # usable without OpenMM-ML too: addForces() is plain OpenMM
    _ImplBase = object


class NNPPotentialImpl(_ImplBase):
    """The MLPotentialImpl of the ``*-nnp`` potentials: one NNPForce per call of addForces()."""

    def __init__(self, name, model=None, **args):
        if model is None:
            if name not in MODELS:
                raise openmm.OpenMMException(f"openmm-nnp: no potential named {name!r}; known: {', '.join(MODELS)}")
            model = MODELS[name]
        from . import NNPForce
        self.name = name
        self.model = NNPForce.findModel(str(model))  # fails now, listing where it looked, if it is missing

    def addForces(self, topology, system, atoms, forceGroup, modelIndex=None, batches=None, **args):
        """Adds an NNPForce for `atoms` (all atoms when None) of `topology` to `system`, in
        `forceGroup`; periodic when the System or the Topology is."""
        caller = f"MLPotential('{self.name}')"
        if atoms is not None:
            atoms = list(atoms)
        periodic = topology.getPeriodicBoxVectors() is not None or system.usesPeriodicBoundaryConditions()
        try:
            force = createForceFromTopology(self.model, topology, atoms, batches, periodic, system)
        except openmm.OpenMMException as e:
            raise openmm.OpenMMException(str(e).replace("createForceFromTopology", caller, 1)) from None
        if modelIndex is not None:
            force.setEnsembleMember(int(modelIndex))
        force.setForceGroup(forceGroup)
        system.addForce(force)

    def getMLLongRange(self):
        """ANI is local (cutoff 5.2 Å for ANI-1x/1ccx, 5.1 Å for ANI-2x): no long-range term."""
        return False


def createImpl(name, **args):
    return NNPPotentialImpl(name, **args)
