"""OpenMM's CPU platform with this plugin (float32 networks) beside TorchANI (float32, its own
NeuroChem loader) on the same cores, in one process: energy and forces of K copies of a 22-atom
drug-like molecule (drugbank-0030; one batch / one conformation each), ANI-1ccx x8 by default;
mean of 20 calls after a warm-up. TorchANI is optional (skipped with a message where absent).
    python bench/cpu_vs_torchani.py [--threads 2] [--model PATH.info] [K ...]   (default K: 1 10)
NNP_SHARED_DIR: the molecules and the model zoo (default ../shared)."""
import argparse
import os
import sys
import tempfile
import time

# NumPy's OpenBLAS threads would spin on the cores being timed (nothing here needs BLAS threads)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import openmm.unit as u  # noqa: E402

import openmmnnp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_platform import time_cpu_platform  # noqa: E402


def main():
    shared = os.environ.get("NNP_SHARED_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared"))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("copies", nargs="*", type=int, default=[1, 10])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--model", default=os.path.join(shared, "models", "ani-model-zoo", "ani-1ccx_8x.info"))
    p.add_argument("--calls", type=int, default=20)
    a = p.parse_args()
    mol = openmmnnp.readXYZ(os.path.join(shared, "molecules", "druglike", "drugbank-0030.xyz"))
    z = [e.atomic_number for e in mol.elements]
    xyz = np.array(mol.positions.value_in_unit(u.angstrom))
    print(f"{len(z)} atoms per copy, {os.path.basename(a.model)}, {a.threads} threads, energy + forces per call, float32")
    try:
        import torch
        from torchani.neurochem import load_model_from_info_file
        torch.set_num_threads(a.threads)
        # TorchANI 2.x reads the .info file's parts under $TORCHANI_DATA_DIR/Neurochem: unless set,
        # a temporary folder whose Neurochem is the model's zoo folder
        if not os.environ.get("TORCHANI_DATA_DIR"):
            data = tempfile.mkdtemp(prefix="torchani-")
            os.symlink(os.path.dirname(os.path.abspath(a.model)), os.path.join(data, "Neurochem"))
            os.environ["TORCHANI_DATA_DIR"] = data
        ani = load_model_from_info_file(a.model)
        print(f"TorchANI from {os.path.dirname(sys.modules['torchani'].__file__)}, torch {torch.__version__}")
    except Exception as e:  # ImportError, or a TorchANI without this loader
        ani = None
        print(f"TorchANI: skipped ({type(e).__name__}: {e})")
    for k in a.copies:
        plugin, e_plugin = time_cpu_platform(a.model, z, xyz, [[30.0 * c, 0, 0] for c in range(k)], a.threads, a.calls)
        line = f"{k:4d} x {len(z)} atoms: plugin CPU platform {plugin:10.0f} µs (E/copy {e_plugin:.4f} kJ/mol)"
        if ani is not None:
            species = torch.tensor([z] * k)
            coords = torch.tensor(np.repeat(xyz[None], k, axis=0), dtype=torch.float32, requires_grad=True)

            def call():
                energies = ani((species, coords)).energies
                forces = -torch.autograd.grad(energies.sum(), coords)[0]
                return energies, forces
            call()
            t = time.perf_counter()
            for _ in range(a.calls):
                energies, forces = call()
            ta = (time.perf_counter() - t) / a.calls * 1e6
            e_ani = float(energies[0]) * 2625.499638755248
            line += f" | TorchANI {ta:10.0f} µs (E/copy {e_ani:.4f} kJ/mol) | TorchANI / plugin {ta / plugin:5.2f}x"
        print(line)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
