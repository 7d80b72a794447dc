"""Entry point of openmm-nnp's potentials in OpenMM-ML (group ``openmmml.potentials``).

OpenMM-ML builds this factory with no arguments while ``import openmmml`` runs, for every name that
openmm-nnp registers (ani1x-nnp, ani1ccx-nnp, ani2x-nnp, aceff-1.0-nnp, aceff-1.1-nnp,
torchmdnet-nnp). It therefore imports nothing but the
standard library and never raises: openmmnnp itself is loaded only when a potential is created
(``MLPotential('ani2x-nnp')``). The implementation is :mod:`openmmnnp.mlpotential`.
"""

try:  # the base class, when OpenMM-ML is importable (it always is when OpenMM-ML loads this)
    from openmmml.mlpotential import MLPotentialImplFactory as _FactoryBase
except Exception:
    _FactoryBase = object


class NNPPotentialImplFactory(_FactoryBase):
    """Creates the MLPotentialImpl of openmm-nnp's ``*-nnp`` potentials."""

    def createImpl(self, name, **args):
        from openmmnnp.mlpotential import createImpl
        return createImpl(name, **args)
