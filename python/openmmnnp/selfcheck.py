"""Self-check: versions, platforms, and every plugin load failure.   python -m openmmnnp.selfcheck"""
import sys

import openmm


def main():
    import openmmnnp
    print(f"OpenMM {openmm.__version__} from {openmm.version.openmm_library_path}")
    print(f"openmmnnp from {openmmnnp.__file__}")
    platforms = [openmm.Platform.getPlatform(i) for i in range(openmm.Platform.getNumPlatforms())]
    print("platforms: " + ", ".join(f"{p.getName()} (NNPForce: {'yes' if p.supportsKernels(['CalcNNPForce']) else 'no'})"
                                    for p in platforms))
    failures = openmmnnp.pluginLoadFailures()
    for failure in failures:
        print(f"plugin load failure: {failure}")
    ours = [f for f in failures if "NNP" in f]
    # Without a GPU driver (libcuda.so.1) neither OpenMM's CUDA platform nor this plugin's CUDA
    # library can load: expected on a machine without an NVIDIA GPU, and not a fault of the install.
    no_driver = [f for f in ours if "NNPCUDA" in f and "libcuda.so.1" in f]
    real = [f for f in ours if f not in no_driver]
    if no_driver:
        print("NNP CUDA plugin: not loaded, no NVIDIA driver (libcuda.so.1) on this machine")
    print("NNP plugin: " + ("some platform libraries failed to load" if real else "all usable platform libraries loaded"))
    return 1 if real else 0


if __name__ == "__main__":
    sys.exit(main())
