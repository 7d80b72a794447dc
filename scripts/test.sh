#!/usr/bin/env bash
# Sets everything up and runs all tests:
#   1. the C tests (CTest) on a release build;
#   2. the same tests on an AddressSanitizer + UndefinedBehaviorSanitizer build;
#   3. the model-file fuzzer for a bounded time (NNP_FUZZ_SECONDS, default 60; 0 skips it).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { printf '\033[1m[test]\033[0m %s\n' "$*"; }
"$root/scripts/setup.sh"
shared="${NNP_SHARED_DIR:-$root/../shared}"
if [ ! -d "$shared/models/ani-model-zoo" ] || [ ! -d "$shared/molecules/druglike" ]; then
  echo "The tests need the ANI model zoo and the drug-like molecules in $shared (models/ani-model-zoo," >&2
  echo "molecules/druglike). Set NNP_SHARED_DIR to the directory that holds them." >&2
  exit 1
fi

say "C tests (release build)"
ctest --test-dir "$root/build" --output-on-failure -j "$(nproc)"

say "C tests under AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S "$root" -B "$root/build-asan" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS=-O1 -DNNP_SANITIZE=ON \
  -DNNP_SHARED_DIR="$shared" > "$root/build-asan.configure.log"
cmake --build "$root/build-asan" -j "$(nproc)" > "$root/build-asan.build.log" 2>&1 \
  || { cat "$root/build-asan.build.log"; exit 1; }
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$root/build-asan" --output-on-failure -j "$(nproc)"

"$root/scripts/fuzz.sh" "${NNP_FUZZ_SECONDS:-60}"
