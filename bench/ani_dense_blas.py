"""ANI-2x's dense layers as OpenBLAS float32 GEMMs (NumPy's bundled OpenBLAS, one thread), for the
atoms of the first N drug-like molecules (as bench_cpu_simd picks them): per member (8) and element,
the forward products of every layer and the backward products down to dE/dAEV, the first layer over
the AEV features that the molecules' elements can fill, as libnnp multiplies them (16 radial per
element present, 32 angular per pair of them), or with --all-features over all 1,008. The number to set beside the dense share of libnnp's own float32 CPU
evaluation (docs/benchmarks.md, "CPU platform"); activations are not timed.
    OPENBLAS_NUM_THREADS=1 python bench/ani_dense_blas.py [N (8)] [--repeat 20] [--all-features]
NNP_SHARED_DIR: the molecules (default ../shared)."""
import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

# ANI-2x's layer widths per element (the model zoo's ANN-<El>.nnf-l<k>.wparam sizes); input: 1,008
WIDTHS = {"H": [256, 192, 160, 1], "C": [224, 192, 160, 1], "N": [192, 160, 128, 1], "O": [192, 160, 128, 1],
          "S": [160, 128, 96, 1], "F": [160, 128, 96, 1], "Cl": [160, 128, 96, 1]}
AEV, MEMBERS = 1008, 8


def main():
    shared = os.environ.get("NNP_SHARED_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared"))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("count", nargs="?", type=int, default=8)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--all-features", action="store_true")
    a = p.parse_args()
    counts, molecules = {}, 0
    for k in range(1, 10000):
        path = os.path.join(shared, "molecules", "druglike", f"drugbank-{k:04d}.xyz")
        if molecules == a.count:
            break
        if not os.path.exists(path):
            continue
        with open(path) as f:
            n = int(f.readline())
            f.readline()
            for _ in range(n):
                el = f.readline().split()[0]
                counts[el] = counts.get(el, 0) + 1
        molecules += 1
    e = len(counts)
    k1 = AEV if a.all_features else 16 * e + 32 * e * (e + 1) // 2
    rng = np.random.default_rng(0)
    jobs, flops = [], 0
    for el, n in counts.items():
        sizes = [k1] + WIDTHS[el]
        for _ in range(MEMBERS):
            ws = [rng.standard_normal((o, i), dtype=np.float32) for i, o in zip(sizes, sizes[1:])]
            x = rng.standard_normal((k1, n), dtype=np.float32)
            jobs.append((ws, x))
            flops += 2 * 2 * n * sum(i * o for i, o in zip(sizes, sizes[1:]))  # forward and backward
    def run():
        for ws, x in jobs:
            h = x
            for w in ws:  # forward
                h = w @ h
            g = np.ones_like(h)
            for w in reversed(ws):  # backward: dE/d(input) of each layer
                g = w.T @ g
    run()
    t = time.perf_counter()
    for _ in range(a.repeat):
        run()
    dt = (time.perf_counter() - t) / a.repeat
    atoms = sum(counts.values())
    print(f"{molecules} molecules, {atoms} atoms ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}), "
          f"ANI-2x x{MEMBERS}, first layer over {k1} features: OpenBLAS float32 forward + backward GEMMs {dt * 1e3:.2f} ms, "
          f"{flops / dt / 1e9:.1f} GFLOP/s ({np.__version__}, OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']})")


if __name__ == "__main__":
    main()
