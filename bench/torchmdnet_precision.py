"""torchmd-net's own float32 error on the TensorNet benchmark model: the yardstick for the plugin's
float32 accuracy on a model of AceFF's size (optional: where torchmd-net or a CUDA torch is missing it
says so and exits 0).

The seeded AceFF-sized model of bench/make_tensornet_model.py, loaded into torchmd-net's TensorNet
twice, precision=32 and precision=64, evaluated on the system of TestCudaTensorNet: drugbank-0001,
-0030 and -0147, one batch each with charges +1, 0, -1, 30 Å apart. Prints float32 against float64:
the worst batch's energy difference over the mean |batch energy| and the forces' relative RMS
difference, the measures TestCudaTensorNet prints for the plugin (mixed against Reference).
    python bench/torchmdnet_precision.py SHARED_DIR   (torchmd-net on PYTHONPATH)"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tensornet_model import checkpoint  # noqa: E402  (numpy only)
from torchmdnet_peer import read_xyz  # noqa: E402

MOLECULES = ["drugbank-0001", "drugbank-0030", "drugbank-0147"]
CHARGES = [1.0, 0.0, -1.0]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    try:
        import torch
        from torchmdnet.models.model import create_model
    except ImportError as e:
        print(f"torchmd-net precision: skipped ({e})")
        return
    if not torch.cuda.is_available():
        print("torchmd-net precision: skipped (no CUDA device for torch)")
        return
    z, pos, batch = [], [], []
    for k, name in enumerate(MOLECULES):
        zk, pk = read_xyz(os.path.join(sys.argv[1], "molecules", "druglike", name + ".xyz"))
        z += zk
        pos.append(pk + np.array([30.0 * k, 0.0, 0.0]))
        batch += [k] * len(zk)
    pos = np.concatenate(pos)
    ck = checkpoint()
    state = {k[len("model."):]: torch.from_numpy(np.asarray(v)) for k, v in ck["state_dict"].items()}
    results = {}
    for precision, dtype in ((32, torch.float32), (64, torch.float64)):
        args = dict(ck["hyper_parameters"], precision=precision, trainable_rbf=False, max_z=54, max_num_neighbors=64,
                    static_shapes=False, box_vecs=None, derivative=True, atom_filter=-1, output_mlp_num_layers=0)
        torch.manual_seed(0)
        model = create_model(args)
        missing, unexpected = model.load_state_dict(state, strict=False)
        missing = [k for k in missing if k not in ("mean", "std") and not k.endswith("distance.box")]
        if missing or unexpected:
            sys.exit(f"torchmd-net precision: the model does not fit: missing {missing}, unexpected {unexpected}")
        model = model.cuda().eval()
        energy, forces = model(torch.tensor(z, dtype=torch.long, device="cuda"),
                               torch.tensor(pos, dtype=dtype, device="cuda"),
                               torch.tensor(batch, dtype=torch.long, device="cuda"),
                               q=torch.tensor(CHARGES, dtype=dtype, device="cuda"))
        results[precision] = (energy.detach().double().reshape(-1).cpu().numpy(), forces.detach().double().cpu().numpy())
    (e32, f32), (e64, f64) = results[32], results[64]
    worst = np.max(np.abs(e32 - e64)) / np.mean(np.abs(e64))
    frms = np.sqrt(np.sum((f32 - f64) ** 2) / np.sum(f64 ** 2))
    print(f"torchmd-net float32 against float64 ({len(z)} atoms, charges +1/0/-1): batch energies {e64.tolist()} eV, "
          f"worst batch {worst:.3g} of the mean |batch energy|, forces rel RMS {frms:.3g}")


if __name__ == "__main__":
    main()
