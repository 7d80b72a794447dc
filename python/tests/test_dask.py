"""Molecule sets as Dask tasks (openmmnnp.distributed) on a local cluster of 2 CPU worker processes:
the energies equal those of the same sets evaluated here, replicas with one seed repeat and with
two seeds differ, and bad input comes back as a clear openmm.OpenMMException."""
import pytest

distributed = pytest.importorskip("distributed")

import openmm  # noqa: E402
from openmm import unit  # noqa: E402

import openmmnnp  # noqa: E402
from openmmnnp.distributed import evaluateSet, runSets  # noqa: E402

from conftest import ANI1X, drug  # noqa: E402

SETS = [[drug("0001"), drug("0002")], [drug("0003")], [drug("0004"), drug("0006"), drug("0007")]]
PROPERTIES = {"Threads": "1"}


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as c:
        yield c


def local_energies(paths):
    system, _, positions, force, _ = openmmnnp.createSystemFromXYZ(ANI1X, paths)
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("CPU"), PROPERTIES)
    context.setPositions(positions)
    return list(force.getBatchEnergies(context).value_in_unit(unit.kilojoule_per_mole))


def test_two_workers_match_local_evaluation(client):
    assert len(client.scheduler_info()["workers"]) == 2
    seen = []
    results = runSets(client, SETS, ANI1X, platform="CPU", properties=PROPERTIES,
                      progress=lambda r, done, total: seen.append((r.index, done, total)))
    assert [r.index for r in results] == [0, 1, 2]
    assert sorted(i for i, _, _ in seen) == [0, 1, 2] and [d for _, d, _ in seen] == [1, 2, 3]
    for r, paths in zip(results, SETS):
        assert r.paths == paths
        assert r.batchEnergies == local_energies(paths)  # the same arithmetic on the same machine: the same bits
        assert r.potentialEnergy == pytest.approx(sum(r.batchEnergies), rel=1e-12)
    # the batch energies are those of the molecules (not of a set's neighbours): one molecule alone agrees
    assert results[1].batchEnergies[0] == local_energies([drug("0003")])[0]


def test_replicas_with_steps(client):
    sets = [SETS[0]] * 3
    results = runSets(client, sets, ANI1X, steps=10, platform="CPU", properties=PROPERTIES, seeds=[5, 5, 6])
    assert all(r.steps == 10 and r.seconds > 0 for r in results)
    assert results[0].batchEnergies == results[1].batchEnergies  # one seed: one trajectory
    assert results[0].batchEnergies != results[2].batchEnergies
    here = evaluateSet(0, SETS[0], ANI1X, steps=10, platform="CPU", properties=PROPERTIES, seed=5)
    assert here.batchEnergies == results[0].batchEnergies
    start = local_energies(SETS[0])
    assert all(abs(a - b) > 0 for a, b in zip(start, results[0].batchEnergies))  # the steps moved the atoms


def test_errors_name_the_set(client, tmp_path):
    bad = tmp_path / "bad.xyz"
    bad.write_text("1\n\nXx 0 0 0\n")
    with pytest.raises(openmm.OpenMMException, match="set 1 .*bad.xyz") as error:
        runSets(client, [SETS[1], [str(bad)]], ANI1X, platform="CPU", properties=PROPERTIES)
    print(error.value)
    with pytest.raises(openmm.OpenMMException, match="set 0 is empty"):
        runSets(client, [[]], ANI1X)
    with pytest.raises(openmm.OpenMMException, match="2 seeds for 1 sets"):
        runSets(client, [SETS[1]], ANI1X, seeds=[1, 2])
    with pytest.raises(openmm.OpenMMException, match="set 0 .*NoSuchPlatform"):
        runSets(client, [[drug("0001")]], ANI1X, platform="NoSuchPlatform")


def test_example_runs(tmp_path):
    import os
    import subprocess
    import sys
    from conftest import EXAMPLES, SHARED
    env = dict(os.environ, NNP_SHARED_DIR=SHARED)
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, "dask_replicas.py"), "--model", ANI1X, "--per-set", "2",
                          "--steps", "5"], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert sum("done on" in line for line in lines) == 4
    assert sum("kJ/mol, spread" in line for line in lines) == 4
    assert "set 1: 2 replicas x 5 steps" in out.stdout
