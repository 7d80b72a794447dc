"""Converts the TensorNet test checkpoints beside this file into .nnpm files in the folder given
(for the C tests of the CPU and CUDA evaluations), and writes two models of seeded random weights
at sizes the checkpoints do not reach: AceFF's (F = 128, 32 radial functions: the channel linears'
k in several chunks, the row GEMMs' k above 128) and F = 72 (no tile or chunk size divides it),
and an ensemble of two checkpoints unlike in every size (F, layers, radial functions, cutoffs, max_z).
    python convert_fixtures.py OUT_DIR"""
import importlib.util
import os
import sys

from openmmnnp import torchmdnet

NAMES = ["o3-atomref", "o3-deep", "o3-embedding-only", "so3-lower", "o3-ssp", "so3-tanh", "o3-sigmoid",
         "o3-swish", "o3-mish", "o3-gauss", "so3-gauss-trained",
         "o3-odd", "o3-trained"]
# bench/make_tensornet_model.py's checkpoint() arguments
RANDOM = {"random-f128": dict(F=128, layers=2, R=32, cutoff=5.0, seed=7),
          "random-f72": dict(F=72, layers=2, R=20, cutoff=4.5, seed=11)}
# ensembles: name -> members (checkpoints above), evaluated as their mean
ENSEMBLES = {"ens-mixed": ["o3-atomref", "o3-deep"]}


def random_checkpoint(**kw):
    root = os.path.dirname(os.path.abspath(__file__))
    for _ in range(4):  # python/tests/data/tensornet -> the repository
        root = os.path.dirname(root)
    spec = importlib.util.spec_from_file_location("make_tensornet_model", os.path.join(root, "bench", "make_tensornet_model.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.checkpoint(**kw)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    here = os.path.dirname(os.path.abspath(__file__))
    os.makedirs(sys.argv[1], exist_ok=True)
    for name in NAMES:
        torchmdnet.convert([os.path.join(here, name + ".ckpt")], os.path.join(sys.argv[1], name + ".nnpm"), out=sys.stdout)
    for name, kw in RANDOM.items():
        torchmdnet.convert([random_checkpoint(**kw)], os.path.join(sys.argv[1], name + ".nnpm"), out=sys.stdout)
    for name, members in ENSEMBLES.items():
        torchmdnet.convert([os.path.join(here, m + ".ckpt") for m in members], os.path.join(sys.argv[1], name + ".nnpm"),
                           name=name, out=sys.stdout)
