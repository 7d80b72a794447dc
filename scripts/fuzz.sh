#!/usr/bin/env bash
# Builds the libFuzzer target of the model-file parsers (clang, ASan + UBSan) and runs it for a
# bounded time:  scripts/fuzz.sh [SECONDS]   (default 60; 0 skips). Crashes land in build-fuzz/crashes
# (NNP_FUZZ_BUILD_DIR: another build directory).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-60}"
say() { printf '\033[1m[fuzz]\033[0m %s\n' "$*"; }
if [ "$seconds" = "0" ]; then say "skipped (0 seconds)"; exit 0; fi
shared="${NNP_SHARED_DIR:-$root/../shared}"
out="${NNP_FUZZ_BUILD_DIR:-$root/build-fuzz}"
mkdir -p "$out"
CC=clang cmake -S "$root" -B "$out" -DCMAKE_BUILD_TYPE=Debug -DNNP_BUILD_FUZZER=ON -DNNP_BUILD_CUDA=OFF \
  -DNNP_SHARED_DIR="$shared" > "$out/configure.log" 2>&1 || { cat "$out/configure.log"; exit 1; }
cmake --build "$out" --target fuzz_model make_seeds -j "$(nproc)" > "$out/build.log" 2>&1 \
  || { cat "$out/build.log"; exit 1; }
mkdir -p "$out/seeds" "$out/corpus" "$out/crashes"
"$out/core/fuzz/make_seeds" "$out/seeds" "$shared/models/ani-model-zoo"
say "fuzzing the model parsers for $seconds s"
"$out/core/fuzz/fuzz_model" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
  -print_final_stats=1 -artifact_prefix="$out/crashes/" "$out/corpus" "$out/seeds" 2>&1 | tail -n 15
say "fuzzer finished with no crash ($(ls "$out/corpus" | wc -l) corpus entries)"
