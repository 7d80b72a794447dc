"""OpenMM's CPU platform with this plugin's TensorNet beside torchmd-net's own TensorNet on the CPU,
on the same cores, in one process: energy and forces of K copies of the 22-atom drugbank-0030 (one
batch each, 3 nm apart), the seeded AceFF-sized model of bench/make_tensornet_model.py (F = 128,
2 layers, 32 radial functions, 5 Å); mean of CALLS calls after a warm-up. torchmd-net is optional
(skipped with a message where torch or torchmd-net is absent).
    python bench/cpu_vs_torchmdnet.py [--threads 2] [--calls 10] [K ...]   (default K: 1 10)
torchmd-net runs as its users run it on a CPU: External(model, z, device="cpu"), float32, no static
shapes. The plugin's CPU platform reads TensorNet's radial filters from tables and runs its linears on
SIMD, in float64 (docs/models.md); the first evaluation, which makes the tables, is not timed.
NNP_SHARED_DIR: the molecules (default ../shared)."""
import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import openmm.unit as u  # noqa: E402

import openmmnnp  # noqa: E402
from openmmnnp import torchmdnet as converter  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_platform import time_cpu_platform  # noqa: E402
from make_tensornet_model import checkpoint, torchmdnet_model  # noqa: E402

EV = 96.48533212331002  # kJ/mol per eV


def main():
    shared = os.environ.get("NNP_SHARED_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared"))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("copies", nargs="*", type=int, default=[1, 10])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--calls", type=int, default=10)
    a = p.parse_args()
    mol = openmmnnp.readXYZ(os.path.join(shared, "molecules", "druglike", "drugbank-0030.xyz"))
    z = [e.atomic_number for e in mol.elements]
    xyz = np.array(mol.positions.value_in_unit(u.angstrom))
    ck = checkpoint()
    model_path = os.path.join(tempfile.mkdtemp(prefix="tensornet-"), "bench.nnpm")
    with open(os.devnull, "w") as quiet:
        converter.convert([ck], model_path, out=quiet)
    print(f"{len(z)} atoms per copy, TensorNet F 128, 2 layers, 32 RBF, 5 Å; {a.threads} threads, energy + forces per call")
    tmd = None
    try:
        import torch
        from torchmdnet.calculators import External
        torch.set_num_threads(a.threads)
        tmd = torchmdnet_model(ck)
        print(f"torchmd-net from {os.path.dirname(sys.modules['torchmdnet'].__file__)}, torch {torch.__version__}")
    except ImportError as e:
        print(f"torchmd-net: skipped ({e})")
    for k in a.copies:
        offsets = np.array([[30.0 * (c % 10), 30.0 * (c // 10 % 10), 30.0 * (c // 100)] for c in range(k)])
        plugin, e_plugin = time_cpu_platform(model_path, z, xyz, offsets, a.threads, a.calls)
        line = f"{k:4d} x {len(z)} atoms: plugin CPU platform {plugin:10.0f} µs (E/copy {e_plugin:.4f} kJ/mol)"
        if tmd is not None:
            calc = External(tmd, torch.tensor([z] * k, dtype=torch.long), device="cpu")
            pos = torch.tensor((xyz[None] + offsets[:, None]).reshape(-1, 3), dtype=torch.float32)
            calc.calculate(pos)
            t = time.perf_counter()
            for _ in range(a.calls):
                energy, forces = calc.calculate(pos)
            tt = (time.perf_counter() - t) / a.calls * 1e6
            e_tmd = float(energy.reshape(-1)[0]) * EV
            line += f" | torchmd-net {tt:10.0f} µs (E/copy {e_tmd:.4f} kJ/mol) | torchmd-net / plugin {tt / plugin:5.2f}x"
        print(line)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
