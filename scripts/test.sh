#!/usr/bin/env bash
# Sets everything up from nothing and runs all tests. Each run uses a new, empty Python environment
# and new build directories in a temporary folder (removed at the end; pip's download cache is
# reused), so a missing install step fails here rather than on a user's machine:
#   1. scripts/setup.sh into that environment and build: CTest on the release build (the C tests
#      of libnnp, the C++ tests of NNPForce on the Reference and CPU platforms, the C API test,
#      pytest of the Python module against the build tree);
#   2. the C and C++ tests again under AddressSanitizer + UndefinedBehaviorSanitizer (TensorNet's on
#      the test checkpoints that step 1 converted);
#   3. the model-file fuzzer for a bounded time (NNP_FUZZ_SECONDS, default 60; 0 skips it);
#   4. the three wheels built (scripts/build-wheels.sh), installed into another new environment and
#      tested there (scripts/test-wheels.sh): ldd, selfcheck, the Python tests, a short main job.
#   NNP_SHARED_DIR  directory holding models/ and molecules/ (default: ../shared beside the clone)
#   NNP_TEST_DIR    where the temporary folder goes (default: $TMPDIR or /tmp)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { printf '\033[1m[test]\033[0m %s\n' "$*"; }
export NNP_SHARED_DIR="${NNP_SHARED_DIR:-$root/../shared}"
shared="$NNP_SHARED_DIR"
if [ ! -d "$shared/models/ani-model-zoo" ] || [ ! -d "$shared/molecules/druglike" ]; then
  echo "The tests need the ANI model zoo and the drug-like molecules in $shared (models/ani-model-zoo," >&2
  echo "molecules/druglike). Set NNP_SHARED_DIR to the directory that holds them." >&2
  exit 1
fi
work="$(mktemp -d "${NNP_TEST_DIR:-${TMPDIR:-/tmp}}/openmm-nnp-test.XXXXXX")"
# Kept when something fails (logs, builds, fuzzer crashes), removed otherwise.
trap 'status=$?; if [ "$status" -eq 0 ]; then rm -rf "$work"; else echo "[test] failed; logs and builds kept in $work" >&2; fi' EXIT
export NNP_VENV="$work/venv" NNP_BUILD_DIR="$work/build"
say "new environment and build directories in $work"
start=$SECONDS
"$root/scripts/setup.sh"

say "tests (release build)"
ctest --test-dir "$NNP_BUILD_DIR" --output-on-failure -j "$(nproc)"

say "C and C++ tests under AddressSanitizer + UndefinedBehaviorSanitizer"
asan="$work/build-asan"
mkdir -p "$asan"
cmake -S "$root" -B "$asan" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS=-O1 -DCMAKE_CXX_FLAGS=-O1 -DNNP_SANITIZE=ON \
  -DNNP_BUILD_PYTHON=OFF -DPython3_EXECUTABLE="$NNP_VENV/bin/python" -DNNP_SHARED_DIR="$shared" \
  -DNNP_TENSORNET_MODELS_DIR="$NNP_BUILD_DIR/share/openmm-nnp/test-models" > "$asan/configure.log" 2>&1 \
  || { cat "$asan/configure.log"; exit 1; }
cmake --build "$asan" -j "$(nproc)" > "$asan/build.log" 2>&1 || { tail -n 60 "$asan/build.log"; exit 1; }
# OpenMM itself is not instrumented; leaks inside it are not ours to report.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 LSAN_OPTIONS=suppressions="$root/scripts/lsan.supp" \
  UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir "$asan" --output-on-failure -j "$(nproc)"

NNP_FUZZ_BUILD_DIR="$work/build-fuzz" "$root/scripts/fuzz.sh" "${NNP_FUZZ_SECONDS:-60}"

say "wheels: build, install into a new environment, test"
NNP_WHEEL_BUILD="$work/build-wheel" "$root/scripts/build-wheels.sh" "$work/dist"
"$root/scripts/test-wheels.sh" "$work/dist"
say "benchmark: setup time for many replicas on the CPU platform (bench/replica_setup.py)"
NNP_SHARED_DIR="$shared" "$work/venv/bin/python" "$root/bench/replica_setup.py" --replicas 1000 10000 100000 \
  | sed 's/^/  /'
say "all tests passed ($(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s)"
