#!/usr/bin/env bash
# The wheels on the GPU machine (no network, no OpenMM, Python 3.12, the CUDA 13 toolkit):
#   scripts/gpu-wheels.sh pack   here: builds the three wheels for Python 3.12 into the ignored folder
#                                .device-wheels/ with OpenMM's own wheels and the drug-like molecules
#                                (the models wheel with ANI-1x and ANI-1ccx only: with ANI-2x it is
#                                71 MB, over the 64 MiB a device call carries);
#   scripts/gpu-wheels.sh test   there (carry .device-wheels): installs the wheels into a new
#                                environment, then ldd -r, selfcheck, the Python CUDA tests, the same
#                                under compute-sanitizer memcheck, and a short main job with ANI-1x;
#                                logs in $OUT/gpu-wheels.tar.gz.
#   scripts/gpu-wheels.sh cpu    there (carry .device-wheels): the CPU platform beside TorchANI 2.9 on the
#                                GPU machine's cores (bench/cpu_vs_torchani.py, ANI-1ccx from the raw
#                                zoo packed beside the wheels), 2 and 16 threads, and TensorNet beside
#                                torchmd-net 2.6.2 (bench/cpu_vs_torchmdnet.py); logs in $OUT/gpu-cpu.tar.gz.
#   scripts/gpu-wheels.sh pack-ani2x   here: ANI-2x alone, byte-shuffled and xz-compressed (47 MB),
#                                into the ignored folder .device-models/ (it does not fit beside the wheels)
#   scripts/gpu-wheels.sh mlmm   there, after a test call on the same machine (.device-wheels stays
#                                there; carry .device-models): the ML/MM example (examples/mlmm.py)
#                                with ANI-2x on CUDA, both integrators, against MM only; logs in
#                                $OUT/gpu-mlmm.tar.gz.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
d="${NNP_DEVICE_WHEELS:-$root/.device-wheels}"  # NNP_DEVICE_WHEELS: a copy left on the GPU machine by an earlier call
say() { printf '\033[1m[gpu-wheels]\033[0m %s\n' "$*"; }

pack() {
  local shared="${NNP_SHARED_DIR:-$root/../shared}" py312="${NNP_PYTHON312:-}" candidate
  # The GPU machine's Python is 3.12: the openmm-nnp wheel must be cp312.
  if [ -z "$py312" ]; then
    for candidate in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3; do
      "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && { py312="$candidate"; break; }
    done
  fi
  [ -n "$py312" ] || { echo "gpu-wheels: no Python 3.12 found (set NNP_PYTHON312)" >&2; exit 1; }
  grep -qx "/.device-wheels/" "$root/.git/info/exclude" 2>/dev/null || echo "/.device-wheels/" >> "$root/.git/info/exclude"
  rm -rf "$d" && mkdir -p "$d/wheels"
  NNP_PYTHON="$py312" NNP_VENV="${NNP_VENV312:-$HOME/.cache/openmm-nnp/venv312}" NNP_WHEEL_BUILD="$root/build-wheel" \
    NNP_MODELS="ani1x;ani1ccx" "$root/scripts/build-wheels.sh" "$d/wheels"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux2014_x86_64 -d "$d/wheels" openmm==8.6.1 openmm-cuda-13==8.6.1 "numpy>=2" pytest iniconfig pluggy packaging pygments
  python3 -m pip wheel -q --no-deps -w "$d/wheels" openmmml==1.8  # pure Python, published as an sdist
  # TorchANI 2.9 (pure Python; the GPU machine has torch) and ANI-1ccx's NeuroChem files for it
  python3 -m pip download -q --no-deps -d "$d/torchani" torchani==2.9
  # torchmd-net 2.6.2's pure-Python sdist, for bench/cpu_vs_torchmdnet.py
  python3 -m pip download -q --no-deps --no-binary :all: -d "$d/torchmdnet" torchmd-net==2.6.2
  tar cf - -C "$shared/models" ani-model-zoo/ani-1ccx_8x.info ani-model-zoo/ani-1ccx_8x | xz -9 > "$d/ani1ccx-zoo.tar.xz"
  tar cf - -C "$shared" molecules/druglike | xz -9 > "$d/molecules.tar.xz"
  du -sh "$d"; ls -l "$d/wheels"
}

pack_ani2x() {
  local m="$root/build/share/openmm-nnp/models/ani2x.nnpm"
  [ -f "$m" ] || { echo "gpu-wheels: $m is missing (scripts/setup.sh builds it)" >&2; exit 1; }
  grep -qx "/.device-models/" "$root/.git/info/exclude" 2>/dev/null || echo "/.device-models/" >> "$root/.git/info/exclude"
  mkdir -p "$root/.device-models"
  python3 -c "
import sys
d = open(sys.argv[1], 'rb').read(); n = len(d) // 4 * 4
sys.stdout.buffer.write(b''.join(d[k:n:4] for k in range(4)) + d[n:])" "$m" | xz -6 -T0 > "$root/.device-models/ani2x.shuf.xz"
  du -sh "$root/.device-models"
}

# Installs the carried wheels into a new environment $1 (on the GPU machine).
install_wheels() {
  local venv="$1"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -m venv --system-site-packages "$venv"
  # --no-deps: OpenMM's NVIDIA runtime wheels are not carried; the machine's CUDA 13 toolkit stands in.
  "$venv/bin/pip" install -q --no-index --no-deps "$d"/wheels/*.whl
  "$venv/bin/pip" list 2>/dev/null | grep -iE "^(openmm|numpy|pytest)"
  local site; site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"
  # libOpenMMCUDA's RUNPATH expects openmm-cuda-13's NVIDIA wheels in site-packages/nvidia/cu13/lib.
  if [ ! -e "$site/nvidia/cu13/lib" ]; then
    mkdir -p "$site/nvidia/cu13" && ln -s "${CUDA_HOME:-/usr/local/cuda}/lib64" "$site/nvidia/cu13/lib"
    echo "nvidia/cu13/lib -> ${CUDA_HOME:-/usr/local/cuda}/lib64 (the toolkit's cuFFT and NVRTC)"
  fi
}

mlmm_there() {
  local out="${OUT:-/tmp/out}" tmp status=0
  tmp="$(mktemp -d)"
  mkdir -p "$out" "$tmp/logs" "$tmp/cache/openmm-nnp/models"
  install_wheels "$tmp/venv" > "$tmp/logs/install.log" 2>&1 || { cat "$tmp/logs/install.log"; return 1; }
  xz -dc "$root/.device-models/ani2x.shuf.xz" | python3 -c "
import sys
d = sys.stdin.buffer.read(); n = len(d) // 4 * 4; q = n // 4
out = bytearray(len(d)); out[n:] = d[n:]
for k in range(4): out[k:n:4] = d[k * q:(k + 1) * q]
open(sys.argv[1], 'wb').write(out)" "$tmp/cache/openmm-nnp/models/ani2x.nnpm"
  cd "$tmp"
  export XDG_CACHE_HOME="$tmp/cache"
  unset NNP_MODEL_PATH PYTHONPATH
  local py="$tmp/venv/bin/python"
  "$py" -m openmmnnp.models list > "$tmp/logs/models.log" 2>&1 || status=1
  "$py" "$root/examples/mlmm.py" --platform CUDA --integrator both --compare-mm --steps "${NNP_MLMM_STEPS:-2000}" \
    > "$tmp/logs/mlmm.log" 2>&1 || status=1
  "$py" "$root/examples/mlmm.py" --platform CUDA --integrator both --interpolate --steps "${NNP_MLMM_STEPS:-2000}" \
    > "$tmp/logs/mlmm-interpolate.log" 2>&1 || status=1
  cp -r "$root/python/tests" "$tmp/tests"
  NNP_EXAMPLES_DIR="$root/examples" timeout 400 compute-sanitizer --tool memcheck --error-exitcode 3 "$py" -m pytest -q \
    -p no:cacheprovider "$tmp/tests/test_cuda.py" -k "mlmm" > "$tmp/logs/memcheck-mlmm.log" 2>&1 || status=1
  tar czf "$out/gpu-mlmm.tar.gz" -C "$tmp" logs
  for f in models mlmm mlmm-interpolate memcheck-mlmm; do echo "--- $f"; grep -v "step  " "$tmp/logs/$f.log" | tail -n 14; done
  return $status
}

test_there() {
  local out="${OUT:-/tmp/out}" tmp status=0
  tmp="$(mktemp -d)"
  mkdir -p "$out" "$tmp/logs"
  tar xJf "$d/molecules.tar.xz" -C "$tmp"
  install_wheels "$tmp/venv" > "$tmp/logs/install.log" 2>&1 || status=1
  local py="$tmp/venv/bin/python"
  [ "$status" -eq 0 ] || { cat "$tmp/logs/install.log"; tar czf "$out/gpu-wheels.tar.gz" -C "$tmp" logs; return 1; }
  local site; site="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"
  cd "$tmp"
  export NNP_SHARED_DIR="$tmp" XDG_CACHE_HOME="$tmp/cache" NNP_EXAMPLES_DIR="$root/examples"
  unset NNP_MODEL_PATH PYTHONPATH
  for lib in "$site"/OpenMM.libs/lib/libOpenMMNNP.so "$site"/OpenMM.libs/lib/libnnp.so \
             "$site"/OpenMM.libs/lib/plugins/libOpenMMNNPReference.so "$site"/OpenMM.libs/lib/plugins/libOpenMMNNPCUDA.so; do
    echo "== $lib"; ldd -r "$lib" | grep -E "not found|undefined symbol" || echo "all resolved"
  done > "$tmp/logs/ldd.log" 2>&1
  "$py" -m openmmnnp.selfcheck > "$tmp/logs/selfcheck.log" 2>&1 || status=1
  cp -r "$root/python/tests" "$tmp/tests"
  "$py" -m pytest -v -s -p no:cacheprovider "$tmp/tests/test_cuda.py" > "$tmp/logs/pytest-cuda.log" 2>&1 || status=1
  compute-sanitizer --tool memcheck --error-exitcode 3 "$py" -m pytest -q -p no:cacheprovider \
    "$tmp/tests/test_cuda.py" -k "energies or verlet or xml or reordered" > "$tmp/logs/memcheck.log" 2>&1 || status=1
  mkdir -p "$tmp/hcno"
  for f in "$tmp"/molecules/druglike/*.xyz; do
    awk 'NR > 2 && $1 !~ /^(H|C|N|O)$/ { bad = 1 } END { exit bad }' "$f" && ln -s "$f" "$tmp/hcno/"
  done
  "$py" -m openmmnnp.simulate --model ani1x --molecules "$tmp/hcno" --steps 2000 > "$tmp/logs/main-job.log" 2>&1 || status=1
  tar czf "$out/gpu-wheels.tar.gz" -C "$tmp" logs
  for f in install ldd selfcheck; do echo "--- $f"; tail -n 25 "$tmp/logs/$f.log"; done
  echo "--- pytest-cuda"; grep -E "PASS|FAIL|SKIP|ERROR|passed|failed|against|temperature" "$tmp/logs/pytest-cuda.log" | tail -n 20
  echo "--- memcheck"; tail -n 4 "$tmp/logs/memcheck.log"
  echo "--- main job"; tail -n 8 "$tmp/logs/main-job.log"
  return $status
}

cpu_there() {
  local out="${OUT:-/tmp/out}" tmp status=0
  tmp="$(mktemp -d)"
  mkdir -p "$out" "$tmp/logs" "$tmp/shared/models"
  tar xJf "$d/molecules.tar.xz" -C "$tmp/shared"
  tar xJf "$d/ani1ccx-zoo.tar.xz" -C "$tmp/shared/models"
  # Beside the machine's own torch (a virtual environment would hide it): the wheels in a folder on PYTHONPATH.
  python3 -m pip install -q --no-index --no-deps --target "$tmp/site" "$d"/wheels/openmm-*.whl "$d"/wheels/openmm_nnp-*.whl \
    "$d"/torchani/*.whl > "$tmp/logs/install.log" 2>&1 || { cat "$tmp/logs/install.log"; return 1; }
  local py=python3
  cd "$tmp"
  export NNP_SHARED_DIR="$tmp/shared" XDG_CACHE_HOME="$tmp/cache" PYTHONPATH="$tmp/site"
  unset NNP_MODEL_PATH TORCHANI_DATA_DIR
  { lscpu | grep -E "Model name|^CPU\(s\)|Thread|Flags" | sed -E 's/(Flags:).*(avx512f).*/\1 ... \2 .../'; nproc; } > "$tmp/logs/cpu.txt" 2>&1
  for threads in 2 ${NNP_CPU_THREADS:-16}; do
    echo "== $threads threads"
    taskset -c "0-$((threads - 1))" "$py" "$root/bench/cpu_vs_torchani.py" --threads "$threads" 1 10 2>&1 | grep -v Warning || status=1
  done > "$tmp/logs/cpu-vs-torchani.txt"
  # TensorNet beside torchmd-net (its sdist unpacked; ase only imported by its ASE calculator: a stand-in)
  local t="$tmp/tmdn"
  mkdir -p "$t/ase/calculators" && tar xzf "$d"/torchmdnet/torchmd_net-2.6.2.tar.gz -C "$t"
  touch "$t/ase/__init__.py" "$t/ase/calculators/__init__.py"
  printf 'all_changes = []\n\n\nclass Calculator:\n    pass\n' > "$t/ase/calculators/calculator.py"
  for threads in 2 ${NNP_CPU_THREADS:-16}; do
    echo "== $threads threads"
    PYTHONPATH="$tmp/site:$t/torchmd_net-2.6.2:$t" taskset -c "0-$((threads - 1))" "$py" "$root/bench/cpu_vs_torchmdnet.py" \
      --threads "$threads" 1 10 2>&1 | grep -v Warning || status=1
  done > "$tmp/logs/cpu-vs-torchmdnet.txt"
  tar czf "$out/gpu-cpu.tar.gz" -C "$tmp" logs
  for f in cpu cpu-vs-torchani cpu-vs-torchmdnet; do echo "--- $f"; tail -n 20 "$tmp/logs/$f.txt"; done
  return $status
}

case "${1:-}" in
  pack) pack ;;
  cpu) cpu_there ;;
  pack-ani2x) pack_ani2x ;;
  test) test_there ;;
  mlmm) mlmm_there ;;
  *) echo "usage: scripts/gpu-wheels.sh pack|pack-ani2x|test|mlmm|cpu" >&2; exit 2 ;;
esac
