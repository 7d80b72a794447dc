#!/usr/bin/env bash
# Sets everything up and runs all tests:
#   1. CTest on the release build: the C tests of libnnp, the C++ tests of NNPForce on the Reference
#      and CPU platforms, the C API test, pytest of the Python module;
#   2. the C and C++ tests again under AddressSanitizer + UndefinedBehaviorSanitizer;
#   3. the model-file fuzzer for a bounded time (NNP_FUZZ_SECONDS, default 60; 0 skips it).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { printf '\033[1m[test]\033[0m %s\n' "$*"; }
"$root/scripts/setup.sh"
shared="${NNP_SHARED_DIR:-$root/../shared}"
venv="${NNP_VENV:-$HOME/.cache/openmm-nnp/venv}"
if [ ! -d "$shared/models/ani-model-zoo" ] || [ ! -d "$shared/molecules/druglike" ]; then
  echo "The tests need the ANI model zoo and the drug-like molecules in $shared (models/ani-model-zoo," >&2
  echo "molecules/druglike). Set NNP_SHARED_DIR to the directory that holds them." >&2
  exit 1
fi

say "tests (release build)"
ctest --test-dir "${NNP_BUILD_DIR:-$root/build}" --output-on-failure -j "$(nproc)"

say "C and C++ tests under AddressSanitizer + UndefinedBehaviorSanitizer"
asan="$root/build-asan"
mkdir -p "$asan"
cmake -S "$root" -B "$asan" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS=-O1 -DCMAKE_CXX_FLAGS=-O1 -DNNP_SANITIZE=ON \
  -DNNP_BUILD_PYTHON=OFF -DPython3_EXECUTABLE="$venv/bin/python" -DNNP_SHARED_DIR="$shared" > "$asan/configure.log" 2>&1 \
  || { cat "$asan/configure.log"; exit 1; }
cmake --build "$asan" -j "$(nproc)" > "$asan/build.log" 2>&1 || { tail -n 60 "$asan/build.log"; exit 1; }
# OpenMM itself is not instrumented; leaks inside it are not ours to report.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 LSAN_OPTIONS=suppressions="$root/scripts/lsan.supp" \
  UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir "$asan" --output-on-failure -j "$(nproc)"

"$root/scripts/fuzz.sh" "${NNP_FUZZ_SECONDS:-60}"
