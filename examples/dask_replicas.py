"""Replicas of drug-like molecule sets as Dask tasks, one OpenMM Context per task and worker.

    python examples/dask_replicas.py [--scheduler ADDRESS] [--platform CUDA] [--replicas R] [--steps N]

Without --scheduler it starts a local cluster of two worker processes on this machine's CPUs; with
the address of a running scheduler (``dask scheduler`` on one host, ``dask worker ADDRESS`` on each
of the others, or dask-cuda's ``dask cuda worker ADDRESS`` for one worker per GPU) the same tasks
spread over the hosts. Each task runs its set with NNPVerletIntegrator (CUDA graphs on CUDA) and
sends back the per-batch energies, which are printed per set, molecule by molecule, with the
spread over the replicas.
"""
import argparse
import os
import statistics

from distributed import Client, LocalCluster

from openmmnnp.distributed import runSets

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scheduler", help="address of a running Dask scheduler (default: a local cluster of 2 workers)")
    p.add_argument("--platform", default="CPU")
    p.add_argument("--model", default="ani2x")
    p.add_argument("--molecules", default=os.path.join(os.environ.get("NNP_SHARED_DIR", os.path.join(HERE, "..", "..", "shared")),
                                                         "molecules", "druglike"))
    p.add_argument("--sets", type=int, default=2, help="molecule sets (default 2)")
    p.add_argument("--per-set", type=int, default=3, help="molecules per set (default 3)")
    p.add_argument("--replicas", type=int, default=2, help="replicas of each set, each with its own seed (default 2)")
    p.add_argument("--steps", type=int, default=100)
    a = p.parse_args()
    files = sorted(f for f in os.listdir(a.molecules) if f.endswith(".xyz"))[:a.sets * a.per_set]
    sets = [[os.path.join(a.molecules, f) for f in files[k * a.per_set:(k + 1) * a.per_set]] for k in range(a.sets)]
    tasks = [s for s in sets for _ in range(a.replicas)]
    seeds = [1 + r for _ in sets for r in range(a.replicas)]
    # CPU workers on one machine share its cores; on CUDA each worker should see one GPU
    properties = {"Threads": "1"} if a.platform == "CPU" and not a.scheduler else {}
    cluster = None if a.scheduler else LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None)
    with Client(a.scheduler or cluster) as client:
        results = runSets(client, tasks, a.model, a.steps, a.platform, properties, seeds=seeds,
                          progress=lambda r, done, total: print(f"[{done}/{total}] task {r.index} done on {r.host}", flush=True))
    if cluster is not None:
        cluster.close()
    for k, s in enumerate(sets):
        replicas = results[k * a.replicas:(k + 1) * a.replicas]
        print(f"set {k}: {a.replicas} replicas x {a.steps} steps")
        for b, path in enumerate(s):
            energies = [r.batchEnergies[b] for r in replicas]
            spread = statistics.pstdev(energies) if len(energies) > 1 else 0.0
            print(f"  {os.path.basename(path):24s} mean {statistics.fmean(energies):16.4f} kJ/mol, spread {spread:8.4f}")


if __name__ == "__main__":
    main()
