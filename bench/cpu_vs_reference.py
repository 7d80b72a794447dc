"""Energy and forces of N drug-like molecules (one batch each) on OpenMM's Reference platform (double)
and CPU platform (float32 networks), in one process: mean of 5 evaluations after a warm-up.
    python bench/cpu_vs_reference.py [N] [MODEL]   (default 8 molecules, ani2x; NNP_SHARED_DIR: the molecules)"""
import glob
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # NumPy's BLAS threads would spin on the timed cores
import openmm  # noqa: E402

import openmmnnp  # noqa: E402

count = int(sys.argv[1]) if len(sys.argv) > 1 else 8
model = sys.argv[2] if len(sys.argv) > 2 else "ani2x"
shared = os.environ.get("NNP_SHARED_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
files = sorted(glob.glob(os.path.join(shared, "molecules", "druglike", "*.xyz")))[:count]
if not files:
    sys.exit(f"no molecules under {shared}/molecules/druglike: set NNP_SHARED_DIR")
system, topology, positions, force, molecules = openmmnnp.createSystemFromXYZ(model, files)
for name in ("Reference", "CPU"):
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName(name))
    context.setPositions(positions)
    context.getState(getForces=True)
    start = time.perf_counter()
    for _ in range(5):
        context.setPositions(positions)
        state = context.getState(getForces=True, getEnergy=True)
    ms = (time.perf_counter() - start) / 5 * 1e3
    print(f"{name:9} {system.getNumParticles()} atoms: {ms:8.1f} ms per energy + forces, E = {state.getPotentialEnergy()}")
