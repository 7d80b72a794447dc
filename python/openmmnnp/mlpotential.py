"""OpenMM-ML potentials computed by NNPForce: ``MLPotential('ani2x-nnp')``, ``'ani1x-nnp'``, ``'ani1ccx-nnp'``,
``'aceff-1.0-nnp'``, ``'aceff-1.1-nnp'`` (Acellera's TensorNet models) and ``'torchmdnet-nnp'`` (any torchmd-net
TensorNet checkpoint, ``modelPath=``).

Installed with openmm-nnp, these names are registered with OpenMM-ML through its entry-point group
``openmmml.potentials`` (see :mod:`openmmnnp_openmmml`), so that::

    from openmmml import MLPotential
    potential = MLPotential("ani2x-nnp")                         # the model found by name
    system = potential.createSystem(topology)                   # the whole Topology with ANI-2x
    mixed = potential.createMixedSystem(topology, mmSystem, mlAtoms)   # ML/MM

Arguments of ``MLPotential(name, ...)``:
    model       model name or path (.nnpm, .info of the ANI model zoo, a torchmd-net .ckpt or ensemble .zip) to use
                instead of the name's own model ("ani2x" for "ani2x-nnp", "aceff-1.1" for "aceff-1.1-nnp")
    modelPath   the same (OpenMM-ML's torchmdnet potential's name for it); required for "torchmdnet-nnp"
Arguments of ``createSystem`` / ``createMixedSystem`` (passed on to :meth:`addForces`):
    batches     None (default): all selected atoms in one batch, OpenMM-ML's own ANI physics (atoms
                of nearby molecules interact); "molecule" (bonded components), "residue", "chain",
                or a list of batch indices: independent molecules or replicas, each with its energy
                (``NNPForce.getBatchEnergies``)
    modelIndex  one ensemble member instead of the ensemble mean (as OpenMM-ML's "ani2x")
    charge      total charge of the ML atoms (TensorNet models; default 0), or with ``batches`` a list
                with one total charge per batch
Other keyword arguments are accepted and ignored, as OpenMM-ML expects.
"""
import numbers
import os

import openmm
from openmm import app

from .helpers import createForceFromTopology

#: OpenMM-ML names and the model each one finds by name.
MODELS = {"ani1x-nnp": "ani1x", "ani1ccx-nnp": "ani1ccx", "ani2x-nnp": "ani2x", "aceff-1.0-nnp": "aceff-1.0",
          "aceff-1.1-nnp": "aceff-1.1", "torchmdnet-nnp": None}
#: Where the AceFF checkpoints are published (Hugging Face repository, file), as OpenMM-ML downloads them.
PUBLISHED = {"aceff-1.0": ("Acellera/AceFF-1.0", "aceff_v1.0.ckpt"), "aceff-1.1": ("Acellera/AceFF-1.1", "aceff_v1.1.ckpt")}

try:
    from openmmml.mlpotential import MLPotentialImpl as _ImplBase
except ImportError:  # usable without OpenMM-ML too: addForces() is plain OpenMM
    _ImplBase = object


class NNPPotentialImpl(_ImplBase):
    """The MLPotentialImpl of the ``*-nnp`` potentials: one NNPForce per call of addForces()."""

    def __init__(self, name, model=None, modelPath=None, **args):
        if model is None:
            model = modelPath
        if model is None:
            if name not in MODELS:
                raise openmm.OpenMMException(f"openmm-nnp: no potential named {name!r}; known: {', '.join(MODELS)}")
            model = MODELS[name]
            if model is None:
                raise openmm.OpenMMException(f"MLPotential('{name}') needs modelPath= a torchmd-net checkpoint (.ckpt) "
                                             "or a converted .nnpm file")
        from . import NNPForce
        self.name = name
        if isinstance(model, (bytes, os.PathLike)):
            model = os.fsdecode(model)
        if not isinstance(model, str):
            raise openmm.OpenMMException(f"MLPotential('{name}'): model must be a name or a path (str, bytes or "
                                         f"os.PathLike), not {type(model).__name__}")
        try:
            self.model = NNPForce.findModel(model)  # fails now, listing where it looked, if it is missing
        except openmm.OpenMMException as e:
            if str(model) not in PUBLISHED:
                raise
            repo, filename = PUBLISHED[str(model)]
            raise openmm.OpenMMException(
                f"{e}\n{model} is published as {filename} at https://huggingface.co/{repo}; download it and convert "
                f"it once (no PyTorch needed): python -m openmmnnp.models convert {filename} --name {model}") from None
        if not os.path.isfile(self.model):
            raise openmm.OpenMMException(f"MLPotential('{name}'): no model file at {self.model!r}")

    def addForces(self, topology, system, atoms, forceGroup, modelIndex=None, batches=None, charge=0, **args):
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
            if isinstance(modelIndex, bool) or not isinstance(modelIndex, numbers.Integral):
                raise openmm.OpenMMException(f"{caller}: modelIndex must be an integer (an ensemble member), got {modelIndex!r}")
            force.setEnsembleMember(int(modelIndex))
        charges = list(charge) if isinstance(charge, (list, tuple)) else None
        if charges is None:
            if charge != 0 and force.getNumBatches() > 1:
                raise openmm.OpenMMException(f"{caller}: charge={charge!r} with {force.getNumBatches()} batches: give "
                                             "a list with the total charge of each batch")
            charges = [charge] if force.getNumBatches() > 0 else []
        elif len(charges) != force.getNumBatches():
            raise openmm.OpenMMException(f"{caller}: {len(charges)} charges for {force.getNumBatches()} batches")
        for b, q in enumerate(charges):
            force.setBatchCharge(b, q)
        force.setForceGroup(forceGroup)
        system.addForce(force)

    def getMLLongRange(self):
        """ANI and TensorNet are local (cutoffs of a few Å): no long-range term."""
        return False


def createImpl(name, **args):
    return NNPPotentialImpl(name, **args)
