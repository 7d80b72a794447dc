"""Converts the TensorNet test checkpoints beside this file into .nnpm files in the folder given
(for the C tests of the CUDA evaluation).   python convert_fixtures.py OUT_DIR"""
import os
import sys

from openmmnnp import torchmdnet

NAMES = ["o3-atomref", "o3-deep", "o3-embedding-only", "so3-lower", "o3-ssp", "so3-tanh", "o3-sigmoid",
         "o3-swish", "o3-mish", "o3-gauss", "so3-gauss-trained",
         "o3-odd", "o3-trained"]

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    here = os.path.dirname(os.path.abspath(__file__))
    os.makedirs(sys.argv[1], exist_ok=True)
    for name in NAMES:
        torchmdnet.convert([os.path.join(here, name + ".ckpt")], os.path.join(sys.argv[1], name + ".nnpm"), out=sys.stdout)
