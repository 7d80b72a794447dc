"""Writes a TensorNet model of AceFF's size with seeded random weights (F = 128, 32 radial functions,
cutoff 5 Å, elements up to iodine, a 128 → 64 → 1 head) for the CUDA benchmarks: the speed does
not depend on the weights' values. No PyTorch: the converter takes the checkpoint as a dict.
    python bench/make_tensornet_model.py OUT.nnpm [LAYERS]   (default 2 layers)"""
import sys

import numpy as np


def checkpoint(F=128, layers=2, R=32, max_z=54, cutoff=5.0, seed=7):
    rng = np.random.default_rng(seed)
    sd = {}

    def w(key, *shape, scale=None):
        fan_in = shape[-1] if len(shape) > 1 else 1
        sd["model." + key] = (rng.standard_normal(shape) * (scale or 1 / np.sqrt(fan_in))).astype(np.float32)

    def lin(key, o, i, bias=True):
        w(key + ".weight", o, i)
        if bias:
            w(key + ".bias", o, scale=0.1)

    rm, te = "representation_model.", "representation_model.tensor_embedding."
    start, end = np.exp(-cutoff), 1.0
    sd["model." + rm + "distance_expansion.means"] = np.linspace(start, end, R).astype(np.float32)
    sd["model." + rm + "distance_expansion.betas"] = np.full(R, (2 / R * (end - start)) ** -2, np.float32)
    w(te + "emb.weight", max_z, F, scale=1.0)
    lin(te + "emb2", F, 2 * F)
    for k in (1, 2, 3):
        lin(te + f"distance_proj{k}", F, R)
    for k in range(3):
        lin(te + f"linears_tensor.{k}", F, F, bias=False)
    lin(te + "linears_scalar.0", 2 * F, F)
    lin(te + "linears_scalar.1", 3 * F, 2 * F)
    sd["model." + te + "init_norm.weight"] = np.ones(F, np.float32)
    sd["model." + te + "init_norm.bias"] = np.zeros(F, np.float32)
    for l in range(layers):
        p = f"{rm}layers.{l}."
        lin(p + "linears_scalar.0", F, R)
        lin(p + "linears_scalar.1", 2 * F, F)
        lin(p + "linears_scalar.2", 3 * F, 2 * F)
        for k in range(6):
            lin(p + f"linears_tensor.{k}", F, F, bias=False)
    sd["model." + rm + "out_norm.weight"] = np.ones(3 * F, np.float32)
    sd["model." + rm + "out_norm.bias"] = np.zeros(3 * F, np.float32)
    lin(rm + "linear", F, 3 * F)
    lin("output_model.output_network.layers.0", F // 2, F)
    lin("output_model.output_network.layers.2", 1, F // 2)
    hp = dict(model="tensornet", rbf_type="expnorm", activation="silu", output_model="Scalar", reduce_op="sum",
              equivariance_invariance_group="O(3)", embedding_dimension=F, num_layers=layers, num_rbf=R,
              cutoff_lower=0.0, cutoff_upper=cutoff, prior_model=None)
    return {"state_dict": sd, "hyper_parameters": hp}


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    layers = int(sys.argv[2]) if len(sys.argv) == 3 else 2
    from openmmnnp import torchmdnet  # here: bench/torchmdnet_peer.py imports checkpoint() without openmmnnp

    torchmdnet.convert([checkpoint(layers=layers)], sys.argv[1], out=sys.stdout)
