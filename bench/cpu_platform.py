"""The plugin's side of the CPU benchmarks beside a Python peer (bench/cpu_vs_torchani.py,
bench/cpu_vs_torchmdnet.py): energy and forces of copies of one molecule on OpenMM's CPU platform."""
import time

import numpy as np
import openmm
import openmm.unit as u

import openmmnnp


def time_cpu_platform(model_path, z, xyz, offsets, threads, calls):
    """Copies of the molecule (atomic numbers z, positions xyz in Å), copy c moved by offsets[c] (Å)
    and in batch c, with model_path on the CPU platform with this many threads: mean µs per
    energy + forces over calls (after a warm-up) and the energy per copy (kJ/mol)."""
    system = openmm.System()
    force = openmmnnp.NNPForce(model_path)
    positions = []
    for c in range(len(offsets)):
        for i, zi in enumerate(z):
            force.addAtom(system.addParticle(1.0), zi, c)
            positions.append(openmm.Vec3(*((np.asarray(xyz[i]) + offsets[c]) / 10)))
    system.addForce(force)
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("CPU"),
                             {"Threads": str(threads)})
    context.setPositions(positions)
    context.getState(getForces=True)
    t = time.perf_counter()
    for _ in range(calls):
        context.setPositions(positions)
        state = context.getState(getForces=True, getEnergy=True)
    us = (time.perf_counter() - t) / calls * 1e6
    return us, state.getPotentialEnergy().value_in_unit(u.kilojoule_per_mole) / len(offsets)
