"""A torchmd-net TensorNet model (for example Acellera's AceFF) on two molecules of different total
charge, in one NNPForce: conversion without PyTorch, batch charges, per-batch energies, a few MD
steps and an XML round trip.

    python examples/tensornet_charges.py MODEL.ckpt|MODEL.nnpm
"""
import sys
import tempfile

import numpy as np
import openmm
from openmm import unit

import openmmnnp
from openmmnnp import torchmdnet

source = sys.argv[1]
if source.endswith(".ckpt"):  # convert once; AceFF's units (eV, Å) are the default
    model = tempfile.NamedTemporaryFile(suffix=".nnpm", delete=False).name
    torchmdnet.convert([source], model, out=sys.stdout)
else:
    model = source

# methylammonium (charge +1) and formate (charge -1), positions in Å
molecules = [
    ([6, 7, 1, 1, 1, 1, 1, 1], [[0, 0, 0], [1.49, 0, 0], [-0.37, 1.03, 0], [-0.37, -0.51, 0.89],
                                [-0.37, -0.51, -0.89], [1.85, -0.95, 0], [1.85, 0.47, 0.83], [1.85, 0.47, -0.83]], +1),
    ([6, 8, 8, 1], [[0, 0, 0], [1.25, 0, 0], [-0.62, 1.08, 0], [-0.6, -0.95, 0]], -1),
]
system = openmm.System()
force = openmmnnp.NNPForce(model)
positions = []
masses = {1: 1.008, 6: 12.011, 7: 14.007, 8: 15.999}
for batch, (elements, xyz, charge) in enumerate(molecules):
    for z, r in zip(elements, xyz):
        force.addAtom(system.addParticle(masses[z]), z, batch)
        positions.append(np.array(r) + 6.0 * batch)
    force.setBatchCharge(batch, charge)
system.addForce(force)
print(f"{force.getModelName()}: family {force.getModelFamily()}, cutoff {force.getCutoff()}, "
      f"elements {force.getSupportedElements()}")

integrator = openmm.LangevinMiddleIntegrator(300 * unit.kelvin, 1 / unit.picosecond, 0.5 * unit.femtosecond)
context = openmm.Context(system, integrator, openmm.Platform.getPlatformByName("CPU"))
context.setPositions(np.array(positions) * 0.1)
for b, e in enumerate(force.getBatchEnergies(context)):
    print(f"batch {b} (charge {force.getBatchCharge(b):+d}): {e}")
integrator.step(20)
print("after 20 steps:", context.getState(getEnergy=True).getPotentialEnergy())

again = openmmnnp.NNPForce.cast(openmm.XmlSerializer.deserialize(openmm.XmlSerializer.serialize(force)))
assert [again.getBatchCharge(b) for b in range(2)] == [1, -1]
print("XML round trip keeps the charges")
