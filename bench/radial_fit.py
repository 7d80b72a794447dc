"""How closely Chebyshev series of M terms represent a TensorNet checkpoint's radial filters: each
interaction layer's SiLU(L3 SiLU(L2 SiLU(L1 rbf(d)))) · C(d) and the embedding's
dp_q(rbf(d)) · C(d), 3F functions each over [max(cutoff_lower, 0), cutoff_upper]. For each filter
and M, the largest error of the interpolant at M Chebyshev points over 40,001 distances, relative to
each function's largest magnitude (worst function), for the value and for its derivative, with the
series in d and in u = exp(-alpha d) (alpha = 5 / (cutoff_upper - cutoff_lower), the variable of the
expnorm basis). In double precision, NumPy only (no PyTorch):
    python bench/radial_fit.py CHECKPOINT.ckpt [M ...]   (default M: 32 64 96 128 192)
    python bench/radial_fit.py --bench [M ...]           (the benchmark model, bench/make_tensornet_model.py)
"""
import importlib.util
import math
import os
import re
import sys

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))


def load(arg):
    if arg == "--bench":
        sys.path.insert(0, here)
        import make_tensornet_model
        return make_tensornet_model.checkpoint()
    # the converter's reader alone (the package's __init__ needs the built plugin)
    spec = importlib.util.spec_from_file_location("tmd", os.path.join(here, "..", "python", "openmmnnp", "torchmdnet.py"))
    tmd = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tmd)
    return tmd.read_checkpoint(arg)


ACT = {
    "silu": lambda x: x / (1 + np.exp(-x)), "swish": lambda x: x / (1 + np.exp(-x)), "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "ssp": lambda x: np.logaddexp(0, x) - math.log(2),
    "mish": lambda x: x * np.tanh(np.logaddexp(0, x)),
}


def filters(ck):
    """{name: f(d) -> (len(d), 3F)} in double, as torchmd-net 2.x computes them."""
    hp = ck["hyper_parameters"]
    sd = {re.sub(r"^model\.", "", k): np.asarray(v, dtype=np.float64) for k, v in ck["state_dict"].items() if hasattr(v, "shape")}
    act = ACT[hp["activation"]]
    cl, cu = float(hp["cutoff_lower"]), float(hp["cutoff_upper"])
    rm = "representation_model."
    if hp["rbf_type"] == "expnorm":
        means, betas, alpha = sd[rm + "distance_expansion.means"], sd[rm + "distance_expansion.betas"], 5.0 / (cu - cl)

        def rbf(d):
            return (0.5 * (np.cos(d * np.pi / cu) + 1) * (d < cu))[:, None] * np.exp(-betas * (np.exp(alpha * (cl - d[:, None])) - means) ** 2)
    else:
        offset, coeff = sd[rm + "distance_expansion.offset"], sd[rm + "distance_expansion.coeff"]

        def rbf(d):
            return np.exp(coeff * (d[:, None] - offset) ** 2)

    def cut(d):
        if cl > 0:
            return 0.5 * (np.cos(np.pi * (2 * (d - cl) / (cu - cl) + 1)) + 1) * (d < cu) * (d > cl)
        return 0.5 * (np.cos(d * np.pi / cu) + 1) * (d < cu)

    def embedding(d):
        x = rbf(d)
        te = rm + "tensor_embedding."
        parts = [x @ sd[te + f"distance_proj{q}.weight"].T + sd[te + f"distance_proj{q}.bias"] for q in (1, 2, 3)]
        return np.concatenate(parts, axis=1) * cut(d)[:, None]

    def layer(l):
        def f(d):
            x = rbf(d)
            for k in range(3):
                p = f"{rm}layers.{l}.linears_scalar.{k}."
                x = act(x @ sd[p + "weight"].T + sd[p + "bias"])
            return x * cut(d)[:, None]
        return f

    out = {"embedding": embedding}
    for l in range(int(hp["num_layers"])):
        out[f"layer {l}"] = layer(l)
    return out, max(cl, 0.0), cu, 5.0 / (cu - cl)


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    ck = load(sys.argv[1])
    terms = [int(m) for m in sys.argv[2:]] or [32, 64, 96, 128, 192]
    funcs, d0, cu, alpha = filters(ck)
    d = np.linspace(d0, cu, 40001)
    h = d[1] - d[0]
    umin = math.exp(-alpha * (cu - d0))
    to_x = {"d": lambda r: 2 * (r - d0) / (cu - d0) - 1, "u": lambda r: 2 * (np.exp(-alpha * (r - d0)) - umin) / (1 - umin) - 1}
    from_x = {"d": lambda x: d0 + (x + 1) / 2 * (cu - d0), "u": lambda x: d0 - np.log(umin + (x + 1) / 2 * (1 - umin)) / alpha}
    print(f"{sys.argv[1]}: distances {d0:g} to {cu:g}; worst relative error of value / derivative")
    for name, f in funcs.items():
        exact = f(d)
        scale = np.abs(exact).max(axis=0) + 1e-300
        slope = np.gradient(exact, h, axis=0)
        sscale = np.abs(slope).max(axis=0) + 1e-300
        for space in ("d", "u"):
            cells = []
            for m in terms:
                nodes = np.cos(np.pi * (np.arange(m) + 0.5) / m)
                coef = np.polynomial.chebyshev.chebfit(nodes, f(from_x[space](nodes)), m - 1)
                approx = np.polynomial.chebyshev.chebval(to_x[space](d), coef).T
                err = (np.abs(approx - exact).max(axis=0) / scale).max()
                serr = (np.abs(np.gradient(approx, h, axis=0) - slope)[2:-2].max(axis=0) / sscale).max()
                cells.append(f"M {m}: {err:.1e} / {serr:.1e}")
            print(f"  {name:10s} in {space}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
