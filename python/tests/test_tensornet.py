"""TensorNet (torchmd-net) models: conversion without PyTorch, and the CPU evaluation against
torchmd-net's own float64 results (data/tensornet, made by make_fixtures.py), finite differences and
invariances."""
import copy
import io
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import openmm
import pytest
from openmm import app, unit

import openmmnnp
from openmmnnp import torchmdnet

DATA = os.path.join(os.path.dirname(__file__), "data", "tensornet")
MODELS = ["o3-atomref", "so3-lower", "o3-deep", "o3-embedding-only", "o3-ssp", "so3-tanh", "o3-sigmoid",
          "o3-swish", "o3-mish", "o3-gauss", "so3-gauss-trained", "o3-odd", "o3-trained"]
EV = torchmdnet.ENERGY_UNITS["eV"]  # kJ/mol


def ckpt(name):
    return os.path.join(DATA, name + ".ckpt")


def reference(name):
    with open(os.path.join(DATA, name + ".json")) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tensornet")
    out = {}
    for name in MODELS:
        out[name] = str(folder / f"{name}.nnpm")
        torchmdnet.convert([ckpt(name)], out[name])
    return out


def build(model, system_ref, platform="Reference", member=-1):
    system = openmm.System()
    force = openmmnnp.NNPForce(model)
    for z, b in zip(system_ref["atomic_numbers"], system_ref["batch"]):
        force.addAtom(system.addParticle(1.0), z, b)
    for b, q in enumerate(system_ref["charges"]):
        force.setBatchCharge(b, q)
    if system_ref["box"]:
        system.setDefaultPeriodicBoxVectors(*[openmm.Vec3(*v) * 0.1 for v in system_ref["box"]])
        force.setUsesPeriodicBoundaryConditions(True)
    force.setEnsembleMember(member)
    system.addForce(force)
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName(platform))
    context.setPositions(np.array(system_ref["positions"]) * 0.1)
    return context, force


def evaluate(context, force, positions=None):
    """Batch energies (eV) and forces (eV/Å)."""
    if positions is not None:
        context.setPositions(np.asarray(positions) * 0.1)
    state = context.getState(getForces=True, getEnergy=True)
    e = np.array(force.getBatchEnergies(context).value_in_unit(unit.kilojoule_per_mole)) / EV
    f = state.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.angstrom) / EV
    total = state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole) / EV
    assert total == pytest.approx(e.sum(), rel=1e-12, abs=1e-12)
    return e, f


def assert_matches(e, f, er, fr):
    er, fr = np.asarray(er), np.asarray(fr)
    assert np.max(np.abs(e - er) / np.maximum(np.abs(er), 1e-3)) < 1e-8, (e, er)
    assert np.sqrt(np.mean((f - fr) ** 2)) / np.sqrt(np.mean(fr ** 2)) < 1e-7


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("platform", ["Reference", "CPU"])
def test_matches_torchmdnet(converted, name, platform):
    ref = reference(name)
    assert set(ref["systems"]) == {"aceff12", "batches", "cation", "periodic"}
    for sname, s in ref["systems"].items():
        context, force = build(converted[name], s, platform)
        e, f = evaluate(context, force)
        assert_matches(e, f, s["energies"], s["forces"])


def test_all_aceff_elements_and_charges(converted):
    s = reference("o3-atomref")["systems"]["batches"]
    assert set(s["atomic_numbers"]) >= {1, 5, 6, 7, 8, 9, 14, 15, 16, 17, 35, 53}
    assert s["charges"] == [0, 1, -1]
    # the charge matters for an O(3) model: the same atoms neutral give other energies
    neutral = dict(s, charges=[0, 0, 0])
    context, force = build(converted["o3-atomref"], neutral)
    e, _ = evaluate(context, force)
    assert e[0] == pytest.approx(s["energies"][0], rel=1e-10)
    # (the effect is small for these random weights, ~3e-5 eV, yet 1000 times the agreement above)
    assert abs(e[1] - s["energies"][1]) > 1e-6 and abs(e[2] - s["energies"][2]) > 1e-6


def test_batch_equals_molecules_alone(converted):
    s = reference("o3-deep")["systems"]["batches"]
    context, force = build(converted["o3-deep"], s)
    e, f = evaluate(context, force)
    batch = np.array(s["batch"])
    for b in range(3):
        idx = np.flatnonzero(batch == b)
        alone = dict(s, atomic_numbers=[s["atomic_numbers"][i] for i in idx], batch=[0] * len(idx),
                     positions=[s["positions"][i] for i in idx], charges=[s["charges"][b]])
        c1, f1 = build(converted["o3-deep"], alone)
        e1, g1 = evaluate(c1, f1)
        assert e1[0] == pytest.approx(e[b], rel=1e-12)
        assert np.allclose(g1, f[idx], rtol=0, atol=1e-12)


def test_ensemble_mean_and_members(tmp_path):
    out = str(tmp_path / "ensemble.nnpm")
    infos = torchmdnet.convert([ckpt("o3-atomref"), ckpt("o3-deep")], out, name="pair")
    assert [i["layers"] for i in infos] == [2, 3]
    a, b = reference("o3-atomref")["systems"]["cation"], reference("o3-deep")["systems"]["cation"]
    assert a["positions"] != b["positions"]  # each fixture has its own geometry: use a's
    context, force = build(out, a)
    assert force.getNumEnsembleMembers() == 2 and force.getModelName() == "pair"
    e, f = evaluate(context, force)
    members = []
    for m in (0, 1):
        c, fm = build(out, a, member=m)
        members.append(evaluate(c, fm))
    assert_matches(members[0][0], members[0][1], a["energies"], a["forces"])
    assert e[0] == pytest.approx((members[0][0][0] + members[1][0][0]) / 2, rel=1e-12)
    assert np.allclose(f, (members[0][1] + members[1][1]) / 2, rtol=0, atol=1e-12)


def test_ensemble_archive(tmp_path, monkeypatch):
    """torchmd-net's ensemble archive (a zip of .ckpt files): its members in name order, the same model
    file as the checkpoints given one by one; NNPForce converts it on first use; bad archives refused."""
    archive = tmp_path / "ens.zip"
    with zipfile.ZipFile(archive, "w") as z:  # written out of name order
        z.write(ckpt("o3-deep"), "2-deep.ckpt")
        z.write(ckpt("o3-atomref"), "1-atomref.ckpt")
        z.writestr("README.txt", "not a member")
        z.writestr("sub/3-ignored.ckpt", b"torchmd-net reads the top level only")
    listed, zipped = str(tmp_path / "listed.nnpm"), str(tmp_path / "zipped.nnpm")
    torchmdnet.convert([ckpt("o3-atomref"), ckpt("o3-deep")], listed, name="pair")
    infos = torchmdnet.convert([str(archive)], zipped, name="pair")
    assert [i["layers"] for i in infos] == [2, 3]
    assert open(zipped, "rb").read() == open(listed, "rb").read()
    a = reference("o3-atomref")["systems"]["cation"]
    e_listed, f_listed = evaluate(*build(listed, a))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.warns(UserWarning, match="converted the torchmd-net checkpoint"):
        context, force = build(str(archive), a)
    assert list((tmp_path / "cache" / "openmm-nnp" / "models" / "converted").glob("ens-*.nnpm"))
    assert force.getNumEnsembleMembers() == 2 and force.getModelName() == "ens"
    e, f = evaluate(context, force)
    assert np.array_equal(e, e_listed) and np.array_equal(f, f_listed)

    empty = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("notes.txt", "no checkpoints")
    with pytest.raises(openmm.OpenMMException, match="nor a torchmd-net ensemble"):
        torchmdnet.convert([str(empty)], str(tmp_path / "out.nnpm"))
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as z:
        z.write(ckpt("o3-atomref"), "a.ckpt")
        z.writestr("b.ckpt", b"not a zip")
    with pytest.raises(openmm.OpenMMException, match=r"bad\.zip:b\.ckpt: not a readable PyTorch checkpoint"):
        torchmdnet.convert([str(bad)], str(tmp_path / "out.nnpm"))
    assert not (tmp_path / "out.nnpm").exists()


def test_main_job_with_a_checkpoint(tmp_path):
    """The main job (python -m openmmnnp.simulate) on a torchmd-net checkpoint: converted into the cache
    on first use, two drug-like molecules on the CPU platform, their energies printed."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    result = subprocess.run([sys.executable, "-m", "openmmnnp.simulate", "--model", ckpt("o3-atomref"), "--count", "2",
                             "--steps", "4", "--minimize", "2", "--platform", "CPU"], capture_output=True, text=True,
                            timeout=600, env=env)
    assert result.returncode == 0, result.stderr
    assert "drugbank-0002" in result.stdout and "molecule-steps/s" in result.stdout
    assert list((tmp_path / "cache" / "openmm-nnp" / "models" / "converted").glob("o3-atomref-*.nnpm"))


def test_convert_model_takes_checkpoints(tmp_path):
    """NNPForce.convertModel converts a torchmd-net checkpoint as torchmdnet.convert does."""
    direct, via = str(tmp_path / "direct.nnpm"), str(tmp_path / "via.nnpm")
    torchmdnet.convert([ckpt("so3-lower")], direct, name="so3-lower")
    openmmnnp.NNPForce.convertModel(ckpt("so3-lower"), via)
    assert open(via, "rb").read() == open(direct, "rb").read()


def test_converted_name_is_listed(tmp_path):
    """A checkpoint converted with --name into the cache is found by that name and listed by
    python -m openmmnnp.models (list)."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    models = [sys.executable, "-m", "openmmnnp.models"]
    done = subprocess.run(models + ["convert", ckpt("so3-lower"), "--name", "my-tensornet"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    path = tmp_path / "cache" / "openmm-nnp" / "models" / "my-tensornet.nnpm"
    listing = subprocess.run(models + ["list"], capture_output=True, text=True, env=env, timeout=120)
    assert listing.returncode == 0, listing.stderr
    assert f"my-tensornet {path}" in listing.stdout and "ani2x" in listing.stdout


def test_atomref_option(tmp_path):
    """--atomref on adds a disabled Atomref prior's reference energies (o3-deep), off drops an enabled
    one (o3-atomref): batch energies move by the sum of the checkpoint's atomref weights over each
    batch's atoms, forces do not move; on without the prior is refused."""
    for name, mode, sign in (("o3-deep", "on", 1), ("o3-atomref", "off", -1)):
        weights = torchmdnet.read_checkpoint(ckpt(name))["state_dict"]["model.prior_model.0.atomref.weight"][:, 0]
        s = reference(name)["systems"]["cation"]
        plain, changed = str(tmp_path / f"{name}.nnpm"), str(tmp_path / f"{name}-{mode}.nnpm")
        torchmdnet.convert([ckpt(name)], plain)
        torchmdnet.convert([ckpt(name)], changed, atomref=mode)
        e0, f0 = evaluate(*build(plain, s))
        e1, f1 = evaluate(*build(changed, s))
        shift = np.zeros(len(e0))
        for z, b in zip(s["atomic_numbers"], s["batch"]):
            shift[b] += weights[z]
        assert np.abs(shift).max() > 1e-3  # the weights are not zero: the test can fail
        assert np.allclose(e1 - e0, sign * shift, rtol=1e-12, atol=1e-12)
        assert np.array_equal(f1, f0)
    with pytest.raises(openmm.OpenMMException, match="no Atomref prior"):
        torchmdnet.convert([ckpt("so3-lower")], str(tmp_path / "x.nnpm"), atomref="on")
    with pytest.raises(openmm.OpenMMException, match="use auto, on or off"):
        torchmdnet.convert([ckpt("o3-deep")], str(tmp_path / "x.nnpm"), atomref="yes")


@pytest.mark.parametrize("name", ["o3-atomref", "so3-lower", "o3-deep", "o3-ssp", "so3-tanh", "o3-sigmoid", "o3-mish",
                                  "o3-gauss", "so3-gauss-trained", "o3-odd", "o3-trained"])
def test_finite_differences(converted, name):
    s = reference(name)["systems"]["aceff12" if name != "so3-lower" else "cation"]
    context, force = build(converted[name], s)
    pos = np.array(s["positions"])
    _, f = evaluate(context, force)
    h = 1e-5
    rng = np.random.default_rng(3)
    for i in rng.choice(len(pos), 4, replace=False):
        for k in range(3):
            p, m = pos.copy(), pos.copy()
            p[i, k] += h
            m[i, k] -= h
            ep, _ = evaluate(context, force, p)
            em, _ = evaluate(context, force, m)
            fd = -(ep.sum() - em.sum()) / (2 * h)
            assert fd == pytest.approx(f[i, k], rel=1e-6, abs=1e-8)


def rotation(seed):
    q = np.random.default_rng(seed).normal(size=4)
    a, b, c, d = q / np.linalg.norm(q)
    return np.array([[a*a+b*b-c*c-d*d, 2*(b*c-a*d), 2*(b*d+a*c)],
                     [2*(b*c+a*d), a*a-b*b+c*c-d*d, 2*(c*d-a*b)],
                     [2*(b*d-a*c), 2*(c*d+a*b), a*a-b*b-c*c+d*d]])


@pytest.mark.parametrize("name", ["o3-atomref", "so3-lower"])
def test_invariances(converted, name):
    s = reference(name)["systems"]["aceff12"]
    context, force = build(converted[name], s)
    pos = np.array(s["positions"])
    e, f = evaluate(context, force)
    R = rotation(7)
    er, fr = evaluate(context, force, pos @ R.T + np.array([3.0, -1.5, 0.25]))
    assert er[0] == pytest.approx(e[0], rel=1e-11)
    assert np.allclose(fr, f @ R.T, rtol=0, atol=1e-10)
    # inversion: invariant for O(3); an SO(3) model need not be (its B = 2 Y M is not symmetric)
    ei, fi = evaluate(context, force, -pos)
    if name.startswith("o3"):
        assert ei[0] == pytest.approx(e[0], rel=1e-11)
        assert np.allclose(fi, -f, rtol=0, atol=1e-10)
    # permutation of the atoms
    perm = np.random.default_rng(5).permutation(len(pos))
    permuted = dict(s, atomic_numbers=[s["atomic_numbers"][i] for i in perm], positions=pos[perm].tolist())
    c2, f2 = build(converted[name], permuted)
    ep, fp = evaluate(c2, f2)
    assert ep[0] == pytest.approx(e[0], rel=1e-12)
    assert np.allclose(fp, f[perm], rtol=0, atol=1e-11)


def test_smooth_at_the_cutoffs(converted):
    # two atoms: the energy is continuous and the force vanishes at the upper cutoff; with a lower
    # cutoff (so3-lower, 0.6 Å) the pair enters smoothly there as well
    for name, cu in (("o3-atomref", 5.0), ("so3-lower", 4.0)):
        s = {"atomic_numbers": [6, 8], "batch": [0, 0], "charges": [0], "box": None, "positions": [[0, 0, 0], [1, 0, 0]]}
        context, force = build(converted[name], s)
        far, _ = evaluate(context, force, [[0, 0, 0], [cu + 0.5, 0, 0]])
        for d in (cu - 1e-4, cu - 1e-6):
            e, f = evaluate(context, force, [[0, 0, 0], [d, 0, 0]])
            assert abs(e[0] - far[0]) < 1e-5 and np.max(np.abs(f)) < 1e-3
        e, f = evaluate(context, force, [[0, 0, 0], [cu - 0.5, 0, 0]])
        assert abs(e[0] - far[0]) > 1e-6  # the pair does interact inside


def test_thread_count_does_not_change_results(converted):
    s = reference("o3-deep")["systems"]["batches"]
    results = []
    for threads in ("1", "3"):
        system = openmm.System()
        force = openmmnnp.NNPForce(converted["o3-deep"])
        for z, b in zip(s["atomic_numbers"], s["batch"]):
            force.addAtom(system.addParticle(1.0), z, b)
        system.addForce(force)
        platform = openmm.Platform.getPlatformByName("CPU")
        context = openmm.Context(system, openmm.VerletIntegrator(0.001), platform, {"Threads": threads})
        results.append(evaluate(context, force, s["positions"]))
    assert np.array_equal(results[0][0], results[1][0]) and np.array_equal(results[0][1], results[1][1])


def test_units_recorded_in_the_file(tmp_path):
    s = reference("so3-lower")["systems"]["cation"]
    out = str(tmp_path / "kcal.nnpm")
    torchmdnet.convert([ckpt("so3-lower")], out, energy_unit="kcal/mol", length_unit="nm")
    # the same numbers read as kcal/mol and nm: positions given in nm·10 per Å
    scaled = dict(s, positions=(np.array(s["positions"]) * 10).tolist())
    context, force = build(out, scaled)
    e, f = evaluate(context, force)
    assert e[0] * EV / 4.184 == pytest.approx(s["energies"][0], rel=1e-12)
    assert np.allclose(f * EV / 4.184 * 10, s["forces"], rtol=1e-10, atol=1e-14)


def test_torchmdnet_3_layout(tmp_path):
    # A 3.x checkpoint stores the last radial linears in blocks [3][F]; made here from the 2.x one with
    # torchmd-net 3.x's own remix (weights.view(F, 3, in).transpose(0, 1)), it converts to the same model.
    v2 = torchmdnet.read_checkpoint(ckpt("o3-deep"))
    v3 = copy.deepcopy(v2)
    for key, value in v3["state_dict"].items():
        if key.endswith("tensor_embedding.linears_scalar.1.weight") or \
                (".layers." in key and key.endswith("linears_scalar.2.weight")):
            a = value
            v3["state_dict"][key] = a.reshape((a.shape[0] // 3, 3) + a.shape[1:]).swapaxes(0, 1).reshape(a.shape)
        elif key.endswith("tensor_embedding.linears_scalar.1.bias"):
            v3["state_dict"][key] = value.reshape(-1, 3).T.reshape(-1)
    for key, value in list(v3["state_dict"].items()):
        if ".layers." in key and key.endswith("linears_scalar.2.bias"):
            v3["state_dict"][key] = value.reshape(-1, 3).T.reshape(-1)
    s = reference("o3-deep")["systems"]["aceff12"]
    out3, wrong = str(tmp_path / "v3.nnpm"), str(tmp_path / "wrong.nnpm")
    assert torchmdnet.convert([v3], out3, layout="3")[0]["layout"] == 3
    torchmdnet.convert([v3], wrong)  # auto: read as 2.x, which it is not
    e, f = evaluate(*build(out3, s))
    assert_matches(e, f, s["energies"], s["forces"])
    ew, _ = evaluate(*build(wrong, s))
    assert abs(ew[0] - s["energies"][0]) > 1e-6
    # what auto says of its choice: assumed without check_errors, certain with it (torchmd-net <= 2.6.1)
    assert "assumed: give --layout 3" in torchmdnet.convert([v3], wrong)[0]["layout_why"]
    old = copy.deepcopy(v2)
    old["hyper_parameters"]["check_errors"] = True
    printed = io.StringIO()
    assert torchmdnet.convert([old], wrong, out=printed)[0]["layout"] == 2
    assert "2.x layout of linears_scalar (check_errors marks torchmd-net <= 2.6.1)" in printed.getvalue()


def test_nve_energy_is_conserved():
    # Verlet, 0.25 fs, 400 steps of a 12-atom molecule with every AceFF element
    s = reference("o3-atomref")["systems"]["aceff12"]
    system = openmm.System()
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.nnpm")
        torchmdnet.convert([ckpt("o3-atomref")], path)
        force = openmmnnp.NNPForce(path)
    masses = {1: 1.008, 5: 10.81, 6: 12.011, 7: 14.007, 8: 15.999, 9: 18.998, 14: 28.085, 15: 30.974,
              16: 32.06, 17: 35.45, 35: 79.904, 53: 126.9}
    for z in s["atomic_numbers"]:
        force.addAtom(system.addParticle(masses[z]), z, 0)
    system.addForce(force)
    integrator = openmm.VerletIntegrator(0.00025)
    context = openmm.Context(system, integrator, openmm.Platform.getPlatformByName("CPU"))
    context.setPositions(np.array(s["positions"]) * 0.1)
    context.setVelocitiesToTemperature(300, 1)
    def total():
        st = context.getState(getEnergy=True)
        return (st.getPotentialEnergy() + st.getKineticEnergy()).value_in_unit(unit.kilojoule_per_mole)
    start = total()
    kinetic = context.getState(getEnergy=True).getKineticEnergy().value_in_unit(unit.kilojoule_per_mole)
    energies = []
    for _ in range(8):
        integrator.step(50)
        energies.append(total())
    drift = max(abs(e - start) for e in energies)
    assert drift < 0.02 * kinetic, (start, energies, kinetic)


# --------------------------------------------------------------------------- bad input

def rewrite(source, target, replace):
    """A copy of a checkpoint zip with some members replaced (name → bytes) or dropped (→ None)."""
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w") as zout:
        for item in zin.infolist():
            key = item.filename.split("/", 1)[1]
            if key in replace:
                if replace[key] is not None:
                    zout.writestr(item, replace[key])
            else:
                zout.writestr(item, zin.read(item.filename))


def test_hostile_checkpoints(tmp_path):
    good = ckpt("so3-lower")
    marker = tmp_path / "executed"
    cases = {}
    data = open(good, "rb").read()
    (tmp_path / "truncated.ckpt").write_bytes(data[: len(data) // 2])
    cases["truncated.ckpt"] = "not a readable PyTorch checkpoint"
    evil = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."
    rewrite(good, tmp_path / "evil.ckpt", {"data.pkl": evil})
    cases["evil.ckpt"] = "os.system"
    evil2 = b"cbuiltins\neval\n(S'1'\ntR."
    rewrite(good, tmp_path / "eval.ckpt", {"data.pkl": evil2})
    cases["eval.ckpt"] = "builtins.eval"
    rewrite(good, tmp_path / "nodata.ckpt", {"data/0": None})
    cases["nodata.ckpt"] = "missing from the archive"
    (tmp_path / "text.ckpt").write_text("not a zip")
    cases["text.ckpt"] = "not a readable PyTorch checkpoint"
    for name, message in cases.items():
        with pytest.raises(openmm.OpenMMException, match=message):
            torchmdnet.convert([str(tmp_path / name)], str(tmp_path / "out.nnpm"))
        assert not (tmp_path / "out.nnpm").exists()
    assert not marker.exists()

    base = torchmdnet.read_checkpoint(good)

    def refused(change, message):
        c = copy.deepcopy(base)
        change(c)
        with pytest.raises(openmm.OpenMMException, match=message):
            torchmdnet.convert([c], str(tmp_path / "out.nnpm"))

    refused(lambda c: c["hyper_parameters"].update(model="equivariant-transformer"), "model = 'equivariant-transformer'")
    refused(lambda c: c["hyper_parameters"].update(rbf_type="gauss"), "lacks representation_model.distance_expansion.coeff")
    refused(lambda c: c["hyper_parameters"].update(rbf_type="bessel"), "rbf_type = 'bessel'")
    refused(lambda c: c["hyper_parameters"].update(activation="relu"), "activation = 'relu'")
    refused(lambda c: c["hyper_parameters"].update(prior_model="ZBL"), "ZBL")
    refused(lambda c: c["hyper_parameters"].update(reduce_op="mean"), "reduce_op = 'mean'")
    # torchmd-net's default reduction, add, is its sum (torchmdnet.models.utils.scatter): the same model
    outputs = {}
    for op in ("sum", "add"):
        c = copy.deepcopy(base)
        c["hyper_parameters"]["reduce_op"] = op
        torchmdnet.convert([c], str(tmp_path / f"{op}.nnpm"))
        outputs[op] = (tmp_path / f"{op}.nnpm").read_bytes()
    assert outputs["add"] == outputs["sum"]
    refused(lambda c: c["hyper_parameters"].pop("num_rbf"), "lack 'num_rbf'")
    key = "model.representation_model.layers.0.linears_tensor.3.weight"
    refused(lambda c: c["state_dict"].pop(key), "lacks representation_model.layers.0.linears_tensor.3.weight")
    refused(lambda c: c["state_dict"].update({key: np.zeros((3, 3), np.float32)}), r"shape \(3, 3\), expected \(16, 16\)")
    def nan(c):
        c["state_dict"][key] = c["state_dict"][key].copy()
        c["state_dict"][key][0, 0] = np.nan
    refused(nan, "non-finite")
    emb = "model.representation_model.tensor_embedding.emb.weight"
    refused(lambda c: c["state_dict"].update({emb: 7}), "emb.weight is not a floating-point tensor")
    refused(lambda c: c["state_dict"].update({emb: np.zeros(5, np.float32)}), r"emb.weight has 1 dimension\(s\), expected 2")
    refused(lambda c: c["state_dict"].update({emb: np.zeros((5, 16), np.int64)}), "not a floating-point tensor")
    head = "model.output_model.output_network.layers.0.weight"
    refused(lambda c: c["state_dict"].update({head: "weights"}), "layers.0.weight is not a floating-point tensor")
    refused(lambda c: c["state_dict"].update({"model.extra.weight": np.zeros(2, np.float32)}), "extra.weight")
    refused(lambda c: c["state_dict"].update({"model.representation_model.distance.box": np.eye(3) * 20}),
            "built-in periodic box")
    with pytest.raises(openmm.OpenMMException, match="energy unit"):
        torchmdnet.convert([good], str(tmp_path / "out.nnpm"), energy_unit="Ry")


def test_charges_api_and_errors(converted, tmp_path):
    force = openmmnnp.NNPForce(converted["o3-atomref"])
    assert force.getModelFamily() == "tensornet"
    assert force.getBatchCharge(5) == 0
    force.setBatchCharge(5, -2)
    assert force.getBatchCharge(5) == -2
    with pytest.raises(openmm.OpenMMException, match="not in -1000..1000"):
        force.setBatchCharge(0, 5000)
    with pytest.raises(openmm.OpenMMException, match="batch -1"):
        force.setBatchCharge(-1, 0)
    with pytest.raises(openmm.OpenMMException, match="integer"):
        force.setBatchCharge(0, 0.5)
    # elements beyond the embedding are refused (so3-lower: 36 rows, up to Kr)
    small = openmmnnp.NNPForce(converted["so3-lower"])
    assert max(small.getSupportedElements()) == 35
    with pytest.raises(openmm.OpenMMException):
        small.addAtom(0, 53, 0)
    # ANI describes neutral molecules only
    from conftest import ANI1X
    ani = openmmnnp.NNPForce(ANI1X)
    assert ani.getModelFamily() == "ani"
    with pytest.raises(openmm.OpenMMException, match="neutral molecules only"):
        ani.setBatchCharge(0, 1)
    ani.setBatchCharge(0, 0)


def test_xml_round_trip_and_changed_charges(converted):
    s = reference("o3-atomref")["systems"]["batches"]
    context, force = build(converted["o3-atomref"], s)
    e, _ = evaluate(context, force)
    copy_ = openmmnnp.NNPForce.cast(openmm.XmlSerializer.deserialize(openmm.XmlSerializer.serialize(force)))
    assert [copy_.getBatchCharge(b) for b in range(3)] == [0, 1, -1]
    # a changed charge reaches the Context through updateParametersInContext
    force.setBatchCharge(1, 0)
    force.setBatchCharge(2, 0)
    force.updateParametersInContext(context)
    e0, _ = evaluate(context, force)
    neutral = dict(s, charges=[0, 0, 0])
    en, _ = evaluate(*build(converted["o3-atomref"], neutral))
    assert np.array_equal(e0, en) and e0[0] == e[0] and e0[1] != e[1]


def test_checkpoint_path_converts_on_the_fly(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.warns(UserWarning, match="converted the torchmd-net checkpoint"):
        force = openmmnnp.NNPForce(ckpt("so3-lower"))
    assert force.getModelFamily() == "tensornet"
    assert os.path.dirname(force.getModelPath()) == str(tmp_path / "openmm-nnp" / "models" / "converted")


# --------------------------------------------------------------------------- OpenMM-ML

def topology_of(s):
    top = app.Topology()
    chain = top.addChain()
    for b in sorted(set(s["batch"])):
        residue = top.addResidue("MOL", chain)
        for z, bb in zip(s["atomic_numbers"], s["batch"]):
            if bb == b:
                top.addAtom(app.Element.getByAtomicNumber(z).symbol, app.Element.getByAtomicNumber(z), residue)
    return top


def test_openmmml_aceff_names(tmp_path, monkeypatch):
    from openmmml import MLPotential
    folder = tmp_path / "models"
    folder.mkdir()
    monkeypatch.setenv("NNP_MODEL_PATH", str(folder))
    with pytest.raises(openmm.OpenMMException, match=r"aceff_v1.0.ckpt at https://huggingface.co/Acellera/AceFF-1.0.*"
                       r"python -m openmmnnp.models convert aceff_v1.0.ckpt --name aceff-1.0"):
        MLPotential("aceff-1.0-nnp")
    torchmdnet.convert([ckpt("o3-atomref")], str(folder / "aceff-1.0.nnpm"), name="aceff-1.0")
    s = reference("o3-atomref")["systems"]["cation"]
    top = topology_of(s)
    potential = MLPotential("aceff-1.0-nnp")
    system = potential.createSystem(top, charge=1)
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))
    context.setPositions(np.array(s["positions"]) * 0.1)
    state = context.getState(getEnergy=True, getForces=True)
    e = state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole) / EV
    f = state.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.angstrom) / EV
    assert_matches(np.array([e]), f, s["energies"], s["forces"])
    # createMixedSystem: the ML atoms by TensorNet, the rest of the MM System kept
    mm = openmm.System()
    for _ in s["atomic_numbers"]:
        mm.addParticle(1.0)
    mixed = potential.createMixedSystem(top, mm, range(len(s["atomic_numbers"])), charge=1)
    forces = [f for f in mixed.getForces() if f.getName() == "NNPForce" or "NNP" in type(f).__name__]
    assert forces
    # several batches: a list of charges
    b = reference("o3-atomref")["systems"]["batches"]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    pot = MLPotential("torchmdnet-nnp", modelPath=ckpt("o3-atomref"))
    with pytest.warns(UserWarning, match="converted the torchmd-net checkpoint"):
        system = pot.createSystem(topology_of(b), batches="residue", charge=b["charges"])
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("CPU"))
    context.setPositions(np.array(b["positions"]) * 0.1)
    e = context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole) / EV
    assert e == pytest.approx(sum(b["energies"]), rel=1e-9)
    with pytest.raises(openmm.OpenMMException, match="give a list"):
        pot.createSystem(topology_of(b), batches="residue", charge=1)
    with pytest.raises(openmm.OpenMMException, match="needs modelPath"):
        MLPotential("torchmdnet-nnp")


def test_example_runs():
    from conftest import EXAMPLES
    result = subprocess.run([sys.executable, os.path.join(EXAMPLES, "tensornet_charges.py"), ckpt("o3-atomref")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "batch 0 (charge +1)" in result.stdout and "batch 1 (charge -1)" in result.stdout
    assert "XML round trip keeps the charges" in result.stdout
