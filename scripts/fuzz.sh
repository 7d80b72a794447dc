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
# TensorNet seeds: small converted test checkpoints (those of a build that converted them), covering
# no interaction layer, the activations, the Gaussian basis and SO(3).
tn_dir="${NNP_TENSORNET_MODELS_DIR:-${NNP_BUILD_DIR:-$root/build}/share/openmm-nnp/test-models}"
tn_seeds=()
for f in o3-embedding-only o3-mish o3-ssp so3-gauss-trained so3-tanh; do
  if [ -f "$tn_dir/$f.nnpm" ]; then tn_seeds+=("$tn_dir/$f.nnpm"); fi
done
[ ${#tn_seeds[@]} -gt 0 ] || say "no TensorNet seeds in $tn_dir (build and convert the test checkpoints first)"
"$out/core/fuzz/make_seeds" "$out/seeds" "$shared/models/ani-model-zoo" "${tn_seeds[@]}"
say "fuzzing the model parsers for $seconds s"
"$out/core/fuzz/fuzz_model" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
  -print_final_stats=1 -artifact_prefix="$out/crashes/" "$out/corpus" "$out/seeds" 2>&1 | tail -n 15
say "fuzzer finished with no crash ($(ls "$out/corpus" | wc -l) corpus entries)"
