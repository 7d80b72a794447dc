"""torchmd-net's own speed on the systems of the TensorNet benchmark, the peer column beside
bench_nnp (optional: where torchmd-net or a CUDA torch is missing it says so and exits 0).

The model is the seeded AceFF-sized TensorNet that bench/make_tensornet_model.py writes for the
plugin (F = 128, 2 layers, 32 radial functions, 5 Å), loaded into torchmd-net's own TensorNet
(create_model, static shapes); each system is timed with torchmd-net's External calculator,
use_cuda_graph=True, float32, energy and forces per call, as a torchmd-net user runs it.
    python bench/torchmdnet_peer.py SYSTEM...   (torchmd-net on PYTHONPATH)
SYSTEM: K*PATH.xyz (K copies of a molecule, one batch each) or PATH.xyz (one batch). External takes
equal-size batches only, so the peer runs copies of one molecule, not the mixed drug-like set."""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tensornet_model import checkpoint, torchmdnet_model  # noqa: E402  (numpy only until called)

SYMBOLS = {"H": 1, "C": 6, "N": 7, "O": 8, "F": 9, "S": 16, "Cl": 17}


def read_xyz(path):
    with open(path) as f:
        lines = f.read().splitlines()
    n = int(lines[0])
    z, pos = [], []
    for line in lines[2:2 + n]:
        s, x, y, w = line.split()[:4]
        z.append(SYMBOLS[s])
        pos.append([float(x), float(y), float(w)])
    return z, np.array(pos)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    try:
        import torch
        from torchmdnet.calculators import External
    except ImportError as e:
        print(f"torchmd-net peer: skipped ({e})")
        return
    if not torch.cuda.is_available():
        print("torchmd-net peer: skipped (no CUDA device for torch)")
        return
    import torchmdnet
    ck = checkpoint()

    def make_model(neighbors):
        """torchmd-net's TensorNet with the benchmark's weights; static shapes of `neighbors` per atom."""
        return torchmdnet_model(ck, 32, neighbors, static_shapes=True).cuda()

    print(f"torchmd-net {getattr(torchmdnet, '__version__', 'from ' + os.path.dirname(torchmdnet.__file__))}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name()}; External(use_cuda_graph=True), float32, energy + forces per call")
    print(f"{'batches':>9} {'atoms':>7} | {'µs/call':>10} | system (neighbours per atom: the static shapes)")
    for token in sys.argv[1:]:
        copies, path = (int(token.split("*")[0]), token.split("*", 1)[1]) if "*" in token else (1, token)
        z, pos = read_xyz(path)
        emb = torch.tensor([z] * copies, dtype=torch.long)
        # copies 3 nm apart on a grid, as bench_nnp places them (batches do not interact either way)
        offsets = np.array([[30.0 * (k % 10), 30.0 * (k // 10 % 10), 30.0 * (k // 100)] for k in range(copies)])
        xyz = torch.tensor((pos[None, :, :] + offsets[:, None, :]).reshape(-1, 3), dtype=torch.float32, device="cuda")
        # the static shapes: the most neighbours any atom has within the cutoff, rounded up to 8
        d = np.linalg.norm(pos[:, None, :] - pos[None, :, :], axis=-1)
        neighbors = int(np.ceil(((d < ck["hyper_parameters"]["cutoff_upper"]).sum(1).max()) / 8) * 8)
        calc = External(make_model(neighbors), emb, device="cuda", use_cuda_graph=True)
        for _ in range(3):
            calc.calculate(xyz)
        torch.cuda.synchronize()
        calls = 200 if len(z) * copies < 2000 else 50
        t = time.perf_counter()
        for _ in range(calls):
            energy, forces = calc.calculate(xyz)
        torch.cuda.synchronize()
        us = (time.perf_counter() - t) / calls * 1e6
        print(f"{copies:>9} {len(z) * copies:>7} | {us:>10.1f} | {token} ({neighbors}; energy of batch 0: {float(energy.reshape(-1)[0]):.6f} eV)")
        sys.stdout.flush()
        del calc
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
