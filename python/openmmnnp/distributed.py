"""Many molecule sets or replicas beyond one machine, through Dask distributed.

Each set of XYZ files becomes one task: a worker builds the System (one batch per molecule,
:func:`openmmnnp.createSystemFromXYZ`), runs it in its own Context and sends back the per-batch
energies. One Context per task and worker: give each worker one GPU (dask-cuda's
``LocalCUDACluster``, or ``CUDA_VISIBLE_DEVICES`` per worker) and the tasks use it as device 0.

    properties = {}
    if a.platform == "CPU" and not a.scheduler:  # the local workers share this machine's cores
        properties["Threads"] = str(max(1, (os.cpu_count() or 1) // a.workers))
    from distributed import Client, LocalCluster
    from openmmnnp.distributed import runSets
    with LocalCluster(n_workers=2, threads_per_worker=1) as cluster, Client(cluster) as client:
        results = runSets(client, [["a.xyz", "b.xyz"], ["c.xyz"]], "ani2x", steps=1000)
    results[0].batchEnergies          # kJ/mol, one per molecule of the first set, in file order

``python -m openmmnnp.distributed`` (or examples/dask_replicas.py) runs this from the command line.
Errors on a worker come back as :class:`openmm.OpenMMException` naming the set.
"""
import argparse
import dataclasses
import glob
import os
import socket
import sys
import time

import openmm
from openmm import unit

__all__ = ["SetResult", "evaluateSet", "runSets", "main"]


@dataclasses.dataclass
class SetResult:
    """What one set's task sends back."""
    index: int                # the set's position in the list given to runSets
    paths: list               # its XYZ files, one batch each, in batch order
    batchEnergies: list       # kJ/mol after the steps, one per batch
    potentialEnergy: float    # kJ/mol, the sum
    steps: int
    seconds: float            # the worker's wall time for the steps (0 without steps)
    platform: str
    host: str                 # the worker's host name and process id


def evaluateSet(index, paths, model, steps=0, platform="CPU", properties=None, timestep=0.5, temperature=300.0, seed=1):
    """Runs one set in a new Context: `steps` Verlet steps of `timestep` fs (NNPVerletIntegrator, which
    replays CUDA graphs on CUDA) from velocities at `temperature` K drawn with `seed`, then the
    per-batch energies. Deterministic for the same inputs, platform and machine."""
    from . import NNPVerletIntegrator, createSystemFromXYZ
    try:
        system, _, positions, force, _ = createSystemFromXYZ(model, paths)
        integrator = NNPVerletIntegrator(timestep * unit.femtoseconds)
        context = openmm.Context(system, integrator, openmm.Platform.getPlatformByName(platform), dict(properties or {}))
        context.setPositions(positions)
        seconds = 0.0
        if steps > 0:
            context.setVelocitiesToTemperature(temperature * unit.kelvin, seed)
            start = time.perf_counter()
            integrator.step(steps)
            context.getState(getPositions=True)  # waits for the device
            seconds = time.perf_counter() - start
        energies = force.getBatchEnergies(context).value_in_unit(unit.kilojoule_per_mole)
        potential = context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
    except Exception as e:
        raise openmm.OpenMMException(f"set {index} ({len(paths)} molecules, first {paths[0] if paths else '-'}): {e}") from None
    return SetResult(index, list(paths), list(energies), potential, steps, seconds, platform,
                     f"{socket.gethostname()}:{os.getpid()}")


def runSets(client, sets, model, steps=0, platform="CPU", properties=None, progress=None, seeds=None, **options):
    """Submits one task per set (a list of XYZ paths) to the Dask `client` and returns their
    SetResults in the order of `sets`. `seeds`: one velocity seed per set (default 1 for all; give
    replicas of a set different seeds); other options go to evaluateSet. `progress(result, done,
    total)` is called as each one arrives. A failure is raised (as openmm.OpenMMException) after the
    remaining tasks are cancelled."""
    sets = [list(s) for s in sets]
    if not sets:
        return []
    for k, s in enumerate(sets):
        if not s:
            raise openmm.OpenMMException(f"set {k} is empty: each set needs at least one XYZ file")
    if seeds is not None and len(seeds) != len(sets):
        raise openmm.OpenMMException(f"{len(seeds)} seeds for {len(sets)} sets")
    from distributed import as_completed
    futures = [client.submit(evaluateSet, k, s, model, steps, platform, properties, pure=False,
                             seed=1 if seeds is None else seeds[k], **options)
               for k, s in enumerate(sets)]
    results = [None] * len(sets)
    done = 0
    try:
        for future in as_completed(futures):
            result = future.result()
            results[result.index] = result
            done += 1
            if progress is not None:
                progress(result, done, len(sets))
    except BaseException:
        client.cancel(futures)
        raise
    return results


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m openmmnnp.distributed",
                                description="Molecule sets (or replicas of one set) as Dask tasks, one Context each; "
                                            "prints each set's per-batch energies.")
    p.add_argument("--molecules", required=True, help="a folder of .xyz files (or one .xyz file)")
    p.add_argument("--model", default="ani2x", help="model name or path (default ani2x)")
    p.add_argument("--sets", type=int, default=2, help="split the molecules into this many sets (default 2)")
    p.add_argument("--replicas", type=int, default=1, help="run every set this many times with different seeds (default 1)")
    p.add_argument("--limit", type=int, default=0, help="use only the first N molecules (default all)")
    p.add_argument("--steps", type=int, default=0, help="Verlet steps per task before the energies (default 0)")
    p.add_argument("--platform", default="CPU", help="OpenMM platform on the workers (default CPU)")
    p.add_argument("--scheduler", default=None, help="address of a running Dask scheduler (default: a local cluster)")
    p.add_argument("--workers", type=int, default=2, help="workers of the local cluster (default 2)")
    a = p.parse_args(argv)
    paths = sorted(glob.glob(os.path.join(a.molecules, "*.xyz"))) if os.path.isdir(a.molecules) else [a.molecules]
    if a.limit > 0:
        paths = paths[:a.limit]
    if not paths:
        p.error(f"no .xyz files in {a.molecules}")
    if a.sets < 1 or a.replicas < 1:
        p.error("--sets and --replicas must be at least 1")
    count = min(a.sets, len(paths))
    chunks = [paths[k * len(paths) // count:(k + 1) * len(paths) // count] for k in range(count)]
    sets = [c for c in chunks for _ in range(a.replicas)]
    from distributed import Client, LocalCluster
    cluster = None if a.scheduler else LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True,
                                                     dashboard_address=None)
    with Client(a.scheduler or cluster) as client:
        print(f"{len(paths)} molecules in {len(sets)} tasks ({count} sets x {a.replicas} replicas) on "
              f"{len(client.scheduler_info()['workers'])} workers, {a.platform}, {a.steps} steps each", flush=True)

        def progress(r, done, total):
            rate = f", {r.steps / r.seconds:.1f} steps/s" if r.seconds > 0 else ""
            print(f"  [{done}/{total}] task {r.index}: {len(r.paths)} molecules, E = {r.potentialEnergy:.4f} kJ/mol "
                  f"on {r.host}{rate}", flush=True)
        results = runSets(client, sets, a.model, a.steps, a.platform, properties, progress=progress,
                          seeds=[1 + r for _ in range(count) for r in range(a.replicas)])
    if cluster is not None:
        cluster.close()
    print("task  batch  molecule                           energy (kJ/mol)")
    for r in results:
        for b, (path, e) in enumerate(zip(r.paths, r.batchEnergies)):
            print(f"{r.index:4d}  {b:5d}  {os.path.basename(path):32s} {e:18.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
