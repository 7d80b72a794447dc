"""Makes the TensorNet test fixtures with torchmd-net itself (not run by the tests).

    PYTHONPATH=<torchmd-net checkout> python make_fixtures.py OUT_DIR [--prefix v2-] [--check-only]

For each model below: a seeded random torchmd-net TensorNet (torchmd-net's own create_model, its
weights, LayerNorms and radial-basis buffers perturbed so that no default value hides a mistake),
saved with torch.save in Lightning's checkpoint layout (OUT_DIR/PREFIX+NAME.ckpt), and torchmd-net's
float64 energies per batch and forces for a few systems (OUT_DIR/PREFIX+NAME.json), from
torchmdnet.models.model.load_model of that checkpoint with precision=64. Positions in Å, energies
in the model's unit, forces in its unit per Å.

TRAINED models are instead written by torchmd-net's own training script (torchmdnet.scripts.train,
its defaults for everything not listed: reduce_op add, Lightning's checkpoint with optimizer and
scheduler states, the state dict an OrderedDict with its _metadata) after two epochs on a small
random Custom dataset; they need Lightning, torch_geometric and h5py besides torch.
"""
import argparse
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

# The twelve elements of Acellera's AceFF models.
ACEFF = [1, 5, 6, 7, 8, 9, 14, 15, 16, 17, 35, 53]

BASE = dict(
    model="tensornet", precision=32, rbf_type="expnorm", trainable_rbf=False, activation="silu",
    max_num_neighbors=64, static_shapes=False, box_vecs=None, derivative=True, atom_filter=-1,
    output_model="Scalar", reduce_op="sum", output_mlp_num_layers=0, prior_model=None,
    # training settings a real checkpoint carries and the converter does not need
    lr=5e-4, lr_patience=15, batch_size=16, dataset="Custom", dataset_root="data", energy_weight=1.0,
    force_weight=10.0, train_loss="mse_loss", seed=1, charge=True, spin=False, redirect=False,
    remove_ref_energy=False, standardize=False, load_model=None,
)

MODELS = {
    # name: (seed, hyperparameters, mean, std, atomref: None | "on" | "off")
    "o3-atomref": (11, dict(embedding_dimension=32, num_layers=2, num_rbf=16, cutoff_lower=0.0, cutoff_upper=5.0,
                            max_z=54, equivariance_invariance_group="O(3)"), 0.37, 2.1, "on"),
    "so3-lower": (12, dict(embedding_dimension=16, num_layers=1, num_rbf=8, cutoff_lower=0.6, cutoff_upper=4.0,
                           max_z=36, equivariance_invariance_group="SO(3)"), None, None, None),
    "o3-deep": (13, dict(embedding_dimension=24, num_layers=3, num_rbf=12, cutoff_lower=0.3, cutoff_upper=4.5,
                         max_z=60, equivariance_invariance_group="O(3)", trainable_rbf=True), -1.2, 0.8, "off"),
    "o3-embedding-only": (14, dict(embedding_dimension=16, num_layers=0, num_rbf=8, cutoff_lower=0.0,
                                   cutoff_upper=3.0, max_z=20, equivariance_invariance_group="O(3)"), 0.0, 1.0, None),
    # torchmd-net's other activations, small models
    "o3-ssp": (15, dict(embedding_dimension=12, num_layers=1, num_rbf=8, cutoff_lower=0.2, cutoff_upper=4.0,
                        max_z=54, equivariance_invariance_group="O(3)", activation="ssp"), 0.2, 1.4, "on"),
    "so3-tanh": (16, dict(embedding_dimension=12, num_layers=2, num_rbf=8, cutoff_lower=0.0, cutoff_upper=4.0,
                          max_z=54, equivariance_invariance_group="SO(3)", activation="tanh"), None, None, None),
    "o3-sigmoid": (17, dict(embedding_dimension=12, num_layers=1, num_rbf=8, cutoff_lower=0.0, cutoff_upper=4.0,
                            max_z=54, equivariance_invariance_group="O(3)", activation="sigmoid"), -0.3, 0.9, None),
    "o3-swish": (18, dict(embedding_dimension=12, num_layers=1, num_rbf=8, cutoff_lower=0.0, cutoff_upper=4.0,
                          max_z=54, equivariance_invariance_group="O(3)", activation="swish"), None, None, "on"),
    "o3-mish": (19, dict(embedding_dimension=12, num_layers=1, num_rbf=8, cutoff_lower=0.3, cutoff_upper=4.0,
                         max_z=54, equivariance_invariance_group="O(3)", activation="mish"), None, None, None),
    # the Gaussian radial basis, fixed and trained (its offsets and coefficient perturbed)
    "o3-gauss": (20, dict(embedding_dimension=12, num_layers=2, num_rbf=10, cutoff_lower=0.0, cutoff_upper=4.5,
                          max_z=54, equivariance_invariance_group="O(3)", rbf_type="gauss"), 0.1, 1.2, "on"),
    "so3-gauss-trained": (21, dict(embedding_dimension=12, num_layers=1, num_rbf=8, cutoff_lower=0.4, cutoff_upper=4.0,
                                   max_z=54, equivariance_invariance_group="SO(3)", rbf_type="gauss",
                                   trainable_rbf=True, activation="tanh"), None, None, None),
    # odd sizes (no width a multiple of a SIMD vector) and a deeper Scalar head (two hidden layers)
    "o3-odd": (22, dict(embedding_dimension=7, num_layers=2, num_rbf=5, cutoff_lower=0.0, cutoff_upper=4.2,
                        max_z=54, equivariance_invariance_group="O(3)", output_mlp_num_layers=1), 0.05, 1.3, "on"),
}

# name: (seed, the training configuration's model entries)
TRAINED = {
    "o3-trained": (23, dict(embedding_dimension=16, num_layers=2, num_rbf=8, cutoff_upper=4.0, standardize=True)),
}


def cluster(rng, zs, spacing=1.25, jitter=0.3):
    """Atoms on a jittered cubic grid: no two closer than spacing - 2 jitter."""
    n = len(zs)
    side = math.ceil(n ** (1 / 3))
    sites = [(a, b, c) for a in range(side) for b in range(side) for c in range(side)]
    rng.shuffle(sites)
    pos = np.array(sites[:n], dtype=np.float64) * spacing + rng.uniform(-jitter, jitter, (n, 3))
    return pos - pos.mean(0)


def systems(max_z, cutoff, rng):
    """Named systems: atomic numbers, positions (Å), batch per atom, charge per batch, box or None."""
    def allowed(zs):
        return [z if z < max_z else max(a for a in ACEFF if a < max_z) for z in zs]
    m12 = allowed(ACEFF)
    mA = allowed([6, 6, 8, 7, 1, 1, 1, 1, 1])
    mB = allowed([16, 8, 8, 1, 17, 9])
    out = {}
    p12, pA, pB = cluster(rng, m12), cluster(rng, mA), cluster(rng, mB)
    out["aceff12"] = (m12, p12, [0] * len(m12), [0], None)
    # three molecules as three batches, overlapping in space, charges 0, +1, -1
    z = m12 + mA + mB
    pos = np.vstack([p12, pA + 0.31, pB - 0.27])
    batch = [0] * len(m12) + [1] * len(mA) + [2] * len(mB)
    out["batches"] = (z, pos, batch, [0, 1, -1], None)
    out["cation"] = (mA, pA.copy(), [0] * len(mA), [1], None)
    # periodic: a cubic box a little over twice the cutoff, atoms spread through it
    L = 2 * cutoff + 0.4
    zp = allowed([8, 1, 1] * 6 + [6, 7])
    pp = rng.uniform(0, L, (len(zp), 3))
    for _ in range(200):  # push apart atoms closer than 1 Å (minimum image)
        moved = False
        for i in range(len(zp)):
            for j in range(i):
                d = pp[i] - pp[j]
                d -= L * np.round(d / L)
                r = np.linalg.norm(d)
                if r < 1.0:
                    pp[i] += (1.0 - r + 0.05) * d / max(r, 1e-6)
                    moved = True
        pp %= L
        if not moved:
            break
    out["periodic"] = (zp, pp, [0] * len(zp), [0], (np.eye(3) * L).tolist())
    return out


def perturb(model, rng_torch):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.25 * torch.randn(p.shape, generator=rng_torch))
            elif "norm" in name and name.endswith("bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=rng_torch))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=rng_torch))
            elif "means" in name or "betas" in name or "offset" in name or "coeff" in name:
                p.mul_(1 + 0.05 * torch.randn(p.shape, generator=rng_torch))
        for name, b in model.named_buffers():
            if name.endswith("means") or name.endswith("betas"):
                b.mul_(1 + 0.05 * torch.randn(b.shape, generator=rng_torch))


def make(name, spec, out_dir, prefix):
    from torchmdnet.models.model import create_model
    from torchmdnet import priors
    seed, hp, mean, std, atomref = spec
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    args = dict(BASE)
    args.update(hp)
    prior = None
    if atomref is not None:
        args["prior_model"] = "Atomref"
        args["prior_args"] = {"max_z": args["max_z"], "enable": atomref == "on"}
        prior = priors.Atomref(max_z=args["max_z"], enable=atomref == "on")
        with torch.no_grad():
            prior.atomref.weight.copy_(torch.randn(args["max_z"], 1, generator=gen))
    model = create_model(dict(args), prior_model=prior,
                         mean=None if mean is None else torch.tensor(mean),
                         std=None if std is None else torch.tensor(std))
    perturb(model, gen)
    try:
        from lightning.fabric.utilities.data import AttributeDict
        hparams = AttributeDict(args)
    except ImportError:
        hparams = dict(args)
    state = {"model." + k: v for k, v in model.state_dict().items()}
    try:
        import lightning
        written_by = lightning.__version__
    except ImportError:  # Lightning itself is not needed to write the layout
        written_by = "none (torch.save)"
    ckpt = {"epoch": 3, "global_step": 120, "pytorch-lightning_version": written_by,
            "state_dict": state, "hyper_parameters": hparams, "loops": {}, "callbacks": {},
            "optimizer_states": [], "lr_schedulers": []}
    path = os.path.join(out_dir, prefix + name + ".ckpt")
    torch.save(ckpt, path)
    reference(name, path, hp, args, seed, out_dir, prefix)


def train(name, spec, out_dir, prefix):
    """A checkpoint written by torchmd-net's training script (TRAINED), and its reference."""
    import yaml
    seed, entries = spec
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as work:
        z = np.array([6, 1, 1, 1, 8, 1, 7, 1, 1, 16, 9, 17], dtype=np.int64)
        pos = cluster(rng, list(z))[None] + rng.normal(scale=0.1, size=(40, len(z), 3))
        np.save(os.path.join(work, "coords.npy"), pos.astype(np.float32))
        np.save(os.path.join(work, "embed.npy"), z)
        np.save(os.path.join(work, "energy.npy"), rng.normal(size=(40, 1)).astype(np.float32))
        np.save(os.path.join(work, "forces.npy"), rng.normal(size=(40, len(z), 3)).astype(np.float32))
        conf = dict(model="tensornet", dataset="Custom", coord_files=os.path.join(work, "coords.npy"),
                    embed_files=os.path.join(work, "embed.npy"), energy_files=os.path.join(work, "energy.npy"),
                    force_files=os.path.join(work, "forces.npy"), num_epochs=2, save_interval=1, batch_size=8,
                    inference_batch_size=8, train_size=0.8, val_size=0.1, test_size=0.1, num_workers=0, ngpus=1,
                    log_dir=os.path.join(work, "log"), seed=seed, **entries)
        with open(os.path.join(work, "conf.yaml"), "w") as f:
            yaml.safe_dump(conf, f)
        subprocess.run([sys.executable, "-m", "torchmdnet.scripts.train", "--conf", os.path.join(work, "conf.yaml")],
                       check=True, cwd=work, stdout=subprocess.DEVNULL)
        last = sorted(glob.glob(os.path.join(work, "log", "epoch=1-*.ckpt")))
        assert len(last) == 1, last
        path = os.path.join(out_dir, prefix + name + ".ckpt")
        shutil.copyfile(last[0], path)
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    args = dict(ckpt["hyper_parameters"])
    assert args["reduce_op"] == "add" and hasattr(ckpt["state_dict"], "_metadata") and ckpt["optimizer_states"]
    reference(name, path, entries, args, seed, out_dir, prefix)


def reference(name, path, hp, args, seed, out_dir, prefix):
    """torchmd-net's float64 energies and forces of the checkpoint at path on the test systems."""
    from torchmdnet.models.model import load_model
    ref = load_model(path, precision=64, derivative=True)
    ref.eval()
    rng = np.random.default_rng(seed)
    out = {"model": name, "torchmdnet": sys.modules["torchmdnet"].__file__, "hyperparameters": hp,
           "systems": {}}
    for sname, (z, pos, batch, charges, box) in systems(args["max_z"], args["cutoff_upper"], rng).items():
        zt = torch.tensor(z, dtype=torch.long)
        pt = torch.tensor(pos, dtype=torch.float64)
        bt = torch.tensor(batch, dtype=torch.long)
        qt = torch.tensor(charges, dtype=torch.float64)
        boxt = None if box is None else torch.tensor(box, dtype=torch.float64)
        y, neg_dy = ref(zt, pt, bt, box=boxt, q=qt)
        out["systems"][sname] = {
            "atomic_numbers": z, "positions": pos.tolist(), "batch": batch, "charges": charges, "box": box,
            "energies": y.detach().reshape(-1).tolist(), "forces": neg_dy.detach().tolist()}
        print(f"{prefix}{name} {sname}: {len(z)} atoms, energies {y.detach().reshape(-1).tolist()}")
    if "periodic" in out["systems"]:  # the box must matter
        s = out["systems"]["periodic"]
        y0, _ = ref(torch.tensor(s["atomic_numbers"]), torch.tensor(s["positions"], dtype=torch.float64),
                    torch.zeros(len(s["atomic_numbers"]), dtype=torch.long), q=torch.zeros(1, dtype=torch.float64))
        print(f"  periodic {s['energies'][0]!r} vs not periodic {float(y0)!r}")
        assert abs(float(y0) - s["energies"][0]) > 1e-6, "the box made no difference"
    with open(os.path.join(out_dir, prefix + name + ".json"), "w") as f:
        json.dump(out, f, indent=0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    p.add_argument("--prefix", default="")
    p.add_argument("--only", nargs="*")
    a = p.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    torch.set_num_threads(4)
    for name, spec in MODELS.items():
        if a.only and name not in a.only:
            continue
        make(name, spec, a.out_dir, a.prefix)
    for name, spec in TRAINED.items():
        if a.only and name not in a.only:
            continue
        train(name, spec, a.out_dir, a.prefix)


if __name__ == "__main__":
    main()
