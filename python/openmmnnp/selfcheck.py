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
    cuda_missing = "CUDA" not in [p.getName() for p in platforms]
    # Without OpenMM's CUDA platform (no GPU driver), the NNP CUDA library cannot load either: expected.
    real = [f for f in ours if not (cuda_missing and "NNPCUDA" in f)]
    print("NNP plugin: " + ("some platform libraries failed to load" if real else "all usable platform libraries loaded"))
    return 1 if real else 0


if __name__ == "__main__":
    sys.exit(main())
