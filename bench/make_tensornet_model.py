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



def torchmdnet_model(ck, precision=32, neighbors=64, static_shapes=False):
    """torchmd-net's own TensorNet (create_model; torch and torchmd-net imported here) with the weights
    of checkpoint() ck, in eval mode on the CPU: precision 32 or 64, neighbors per atom at most (the
    static shapes' size when static_shapes). Exits with a message if the weights do not fit."""
    import torch
    from torchmdnet.models.model import create_model
    state = {k[len("model."):]: torch.from_numpy(np.asarray(v)) for k, v in ck["state_dict"].items()}
    args = dict(ck["hyper_parameters"], precision=precision, trainable_rbf=False, max_z=54, max_num_neighbors=neighbors,
                static_shapes=static_shapes, box_vecs=None, derivative=True, atom_filter=-1, output_mlp_num_layers=0)
    torch.manual_seed(0)
    model = create_model(args)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if k not in ("mean", "std") and not k.endswith("distance.box")]  # buffers, not weights
    if missing or unexpected:
        sys.exit(f"the benchmark model does not fit torchmd-net's TensorNet: missing {missing}, unexpected {unexpected}")
    return model.eval()

if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    layers = int(sys.argv[2]) if len(sys.argv) == 3 else 2
    from openmmnnp import torchmdnet  # here: bench/torchmdnet_peer.py imports checkpoint() without openmmnnp

    torchmdnet.convert([checkpoint(layers=layers)], sys.argv[1], out=sys.stdout)
