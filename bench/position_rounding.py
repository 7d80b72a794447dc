"""What rounding positions to float32 alone does to a model's energy and forces: the System of
TestCudaTensorNet (drugbank-0001, -0030, -0147, one batch each, charges +1, 0, -1, 3 nm apart),
evaluated exactly on OpenMM's Reference platform (double) at its positions and at the same positions
rounded to float32 in nm, as OpenMM's posq holds them in single and mixed precision; the molecules
also shifted by 3 and 6 nm (larger coordinates, coarser float32 steps) and shifted back in double.
    python bench/position_rounding.py MODEL   (NNP_SHARED_DIR: the molecules; default ../shared)"""
import os
import sys

import numpy as np
import openmm
from openmm import unit

import openmmnnp

if len(sys.argv) != 2:
    sys.exit(__doc__)
shared = os.environ.get("NNP_SHARED_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared"))
files = [os.path.join(shared, "molecules", "druglike", f"drugbank-{k}.xyz") for k in ("0001", "0030", "0147")]
system, _, positions, force, _ = openmmnnp.createSystemFromXYZ(sys.argv[1], files, spacing=3.0 * unit.nanometer)
for b in range(3):
    force.setBatchCharge(b, 1 - b)
pos = np.array(positions.value_in_unit(unit.nanometer))
context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))


def evaluate(p):
    context.setPositions(p * unit.nanometer)
    state = context.getState(getEnergy=True, getForces=True)
    return state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole), np.array(state.getForces(asNumpy=True))


e0, f0 = evaluate(pos)
print(f"{system.getNumParticles()} atoms, energy {e0:.10g} kJ/mol at the exact positions")
for shift in (0.0, 3.0, 6.0):
    rounded = (pos + shift).astype(np.float32).astype(np.float64) - shift
    e1, f1 = evaluate(rounded)
    rms = np.sqrt(((f1 - f0) ** 2).sum() / (f0 ** 2).sum())
    print(f"coordinates up to {np.abs(pos + shift).max():.2f} nm, rounded to float32: energy {abs(e1 - e0) / abs(e0):.3g} relative, "
          f"forces {rms:.3g} relative RMS")
