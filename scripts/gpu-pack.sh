#!/usr/bin/env bash
# Packs what the GPU machine needs into the ignored folder .device/ (it has no network and no
# OpenMM): OpenMM 8.6.1's libraries, CUDA platform and headers (from the PyPI wheels for Python
# 3.12), libbz2 and its header, the drug-like molecules, and ANI-1x/ANI-2x converted to .nnpm,
# byte-shuffled and xz-compressed (the raw zoo does not fit the 64 MiB a device call carries).
# It builds the nnp-convert it needs from this tree (C only) and works in a copy without .git.
# Then: scripts/gpu-test.sh [build test sanitize bench] on the GPU machine, carrying .device.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
shared="${NNP_SHARED_DIR:-$root/../shared}"
d="$root/.device"
if [ -d "$root/.git" ]; then  # a copy without .git (an export, a tarball) packs the same
  grep -qx "/.device/" "$root/.git/info/exclude" 2>/dev/null || echo "/.device/" >> "$root/.git/info/exclude"
fi
mkdir -p "$d/include" "$d/lib"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_34_x86_64 -d "$tmp" openmm==8.6.1 openmm-cuda-13==8.6.1
(cd "$tmp" && for w in *.whl; do unzip -q -o "$w" 'OpenMM.libs/*'; done)
mkdir -p "$tmp/keep/OpenMM.libs/lib/plugins"
cp -r "$tmp/OpenMM.libs/include" "$tmp/keep/OpenMM.libs/"
cp "$tmp/OpenMM.libs/lib/libOpenMM.so" "$tmp/keep/OpenMM.libs/lib/"
cp "$tmp"/OpenMM.libs/lib/plugins/{libOpenMMCPU.so,libOpenMMPME.so,libOpenMMCUDA.so} "$tmp/keep/OpenMM.libs/lib/plugins/"
tar cf - -C "$tmp/keep" OpenMM.libs | xz -9 -T0 > "$d/openmm-libs.tar.xz"
cp /usr/include/bzlib.h "$d/include/"
cp -L /lib/x86_64-linux-gnu/libbz2.so.1.0 "$d/lib/libbz2.so.1.0" && ln -sf libbz2.so.1.0 "$d/lib/libbz2.so"
tar cf - -C "$shared" molecules/druglike molecules/misc | xz -9 > "$d/molecules.tar.xz"
# nnp-convert from this tree, built here (C only: no OpenMM, no CUDA, no prior build needed).
cmake -S "$root" -B "$tmp/convert" -DCMAKE_BUILD_TYPE=Release -DNNP_BUILD_OPENMM=OFF -DNNP_BUILD_CUDA=OFF \
  -DNNP_MODEL_ZOO= > "$tmp/convert.log" 2>&1 && cmake --build "$tmp/convert" --target nnp-convert -j "$(nproc)" \
  >> "$tmp/convert.log" 2>&1 || { tail -n 30 "$tmp/convert.log"; exit 1; }
cp "$shared/models/ani-model-zoo/LICENSE" "$d/LICENSE-ani-model-zoo"  # the build installs it beside the models
for m in ani1x:ani-1x_8x ani2x:ani-2x_8x; do
  "$tmp/convert/core/nnp-convert" "$shared/models/ani-model-zoo/${m#*:}.info" "$tmp/${m%%:*}.nnpm" > /dev/null
  python3 -c "
import sys
d = open(sys.argv[1], 'rb').read(); n = len(d) // 4 * 4
open(sys.argv[2], 'wb').write(b''.join(d[k:n:4] for k in range(4)) + d[n:])" "$tmp/${m%%:*}.nnpm" "$tmp/${m%%:*}.shuf"
  xz -6 -T0 -c "$tmp/${m%%:*}.shuf" > "$d/${m%%:*}.shuf.xz"
done
# The TensorNet test checkpoints as .nnpm (the GPU machine has no OpenMM Python to convert them):
# the converter of this tree's Python module (NNP_BUILD_DIR, default build/, after scripts/setup.sh).
pybuild="${NNP_BUILD_DIR:-$root/build}/python"
pyexe="${NNP_VENV:-$HOME/.cache/openmm-nnp/venv}/bin/python"
if [ -d "$pybuild/openmmnnp" ] && [ -x "$pyexe" ]; then
  PYTHONPATH="$pybuild" "$pyexe" "$root/python/tests/data/tensornet/convert_fixtures.py" "$d/tensornet" > /dev/null
  # the test models compressed, so that .device stays within what travels to the GPU machine (64 MiB
  # with the tree); random-f128 is the benchmark model below (the same generator and seed), so only
  # that travels (scripts/gpu-test.sh unpacks them all)
  rm -f "$d/tensornet/random-f128.nnpm"
  for f in "$d"/tensornet/*.nnpm; do xz -6 -T0 -f "$f"; done
  # an AceFF-sized TensorNet with random weights for the benchmarks (xz: the double weights come from floats)
  PYTHONPATH="$pybuild" "$pyexe" "$root/bench/make_tensornet_model.py" "$tmp/tensornet-bench.nnpm" > /dev/null
  xz -6 -T0 -c "$tmp/tensornet-bench.nnpm" > "$d/tensornet-bench.nnpm.xz"
else
  echo "gpu-pack: no built Python module at $pybuild (run scripts/setup.sh): the TensorNet CUDA test will lack its models" >&2
fi
# torchmd-net 2.6.2's pure-Python sdist, for the side-by-side benchmark (bench/torchmdnet_peer.py)
python3 -m pip download -q --no-deps --no-binary :all: -d "$d" torchmd-net==2.6.2
du -sh "$d"
