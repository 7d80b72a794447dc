"""torchmd-net's own float32 error on the TensorNet benchmark model: the yardstick for the plugin's
float32 accuracy on a model of AceFF's size (optional: where torchmd-net is missing it says so and
exits 0).

The seeded AceFF-sized model of bench/make_tensornet_model.py, loaded into torchmd-net's TensorNet
twice, precision=32 and precision=64, evaluated on the system of TestCudaTensorNet: drugbank-0001,
-0030 and -0147, one batch each with charges +1, 0, -1, 30 Å apart. Prints float32 against float64:
the worst batch's energy difference over the mean |batch energy| and the forces' relative RMS
difference, the measures TestCudaTensorNet prints for the plugin (mixed against Reference). On the
GPU where torch has one, else on the CPU. With FIRST COUNT: instead COUNT drug-like molecules from
number FIRST on, charges cycling -1, 0, +1, 30 Å apart: the systems of core/tests/tensornet_systems.h
(make_system), whose float32 batch errors test_tensornet_cuda prints for the plugin (against its CPU
evaluation in float64).
    python bench/torchmdnet_precision.py SHARED_DIR [FIRST COUNT]   (torchmd-net on PYTHONPATH)"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tensornet_model import checkpoint, torchmdnet_model  # noqa: E402
from torchmdnet_peer import read_xyz  # noqa: E402

MOLECULES = ["drugbank-0001", "drugbank-0030", "drugbank-0147"]
CHARGES = [1.0, 0.0, -1.0]


def systems(shared):
    """The molecules' file names and charges: the default system, or make_system's (FIRST COUNT)."""
    if len(sys.argv) == 2:
        return MOLECULES, CHARGES
    try:
        first, count = int(sys.argv[2]), int(sys.argv[3])
    except ValueError:
        sys.exit(f"FIRST and COUNT must be whole numbers, not {sys.argv[2]!r} {sys.argv[3]!r}\n{__doc__}")
    if first < 0 or count < 1:
        sys.exit(f"FIRST must be at least 0 and COUNT at least 1, not {first} {count}")
    names = []
    for k in range(first, first + 4000):
        if len(names) == count:
            break
        if os.path.exists(os.path.join(shared, "molecules", "druglike", f"drugbank-{k:04d}.xyz")):
            names.append(f"drugbank-{k:04d}")
    if len(names) < count:
        sys.exit(f"found {len(names)} of {count} drug-like molecules from number {first} on")
    return names, [float(b % 3 - 1) for b in range(count)]


def main():
    if len(sys.argv) not in (2, 4):
        sys.exit(__doc__)
    molecules, charges = systems(sys.argv[1])
    try:
        import torch
        import torchmdnet  # noqa: F401  (only whether it is there)
    except ImportError as e:
        print(f"torchmd-net precision: skipped ({e})")
        return
    device = "cuda" if torch.cuda.is_available() else "cpu"
    z, pos, batch = [], [], []
    for k, name in enumerate(molecules):
        zk, pk = read_xyz(os.path.join(sys.argv[1], "molecules", "druglike", name + ".xyz"))
        z += zk
        pos.append(pk + np.array([30.0 * k, 0.0, 0.0]))
        batch += [k] * len(zk)
    pos = np.concatenate(pos)
    ck = checkpoint()
    results = {}
    for precision, dtype in ((32, torch.float32), (64, torch.float64)):
        model = torchmdnet_model(ck, precision).to(device)
        energy, forces = model(torch.tensor(z, dtype=torch.long, device=device),
                               torch.tensor(pos, dtype=dtype, device=device),
                               torch.tensor(batch, dtype=torch.long, device=device),
                               q=torch.tensor(charges, dtype=dtype, device=device))
        results[precision] = (energy.detach().double().reshape(-1).cpu().numpy(), forces.detach().double().cpu().numpy())
    (e32, f32), (e64, f64) = results[32], results[64]
    worst = np.max(np.abs(e32 - e64)) / np.mean(np.abs(e64))
    frms = np.sqrt(np.sum((f32 - f64) ** 2) / np.sum(f64 ** 2))
    print(f"torchmd-net float32 against float64 ({len(z)} atoms in {len(molecules)} batches, charges {charges}, {device}): "
          f"batch energies {e64.tolist()} eV, "
          f"worst batch {worst:.3g} of the mean |batch energy|, forces rel RMS {frms:.3g}")


if __name__ == "__main__":
    main()
