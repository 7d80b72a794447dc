#!/usr/bin/env bash
# Sets up everything openmm-nnp needs on a fresh Debian/Ubuntu machine and builds it.
# Idempotent: packages already present are not reinstalled; a second run only rebuilds what changed.
#   NNP_BUILD_DIR   build directory (default: build)
#   NNP_SHARED_DIR  directory holding models/ and molecules/ (default: ../shared beside the clone)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${NNP_BUILD_DIR:-$root/build}"
say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# Debian packages: compiler, CMake, bzip2 (model files), clang + its runtime (fuzzer, sanitizers).
need=()
for pkg in build-essential cmake libbz2-dev clang libclang-rt-14-dev; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  say "installing Debian packages: ${need[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${need[@]}"
else
  say "Debian packages present"
fi

shared="${NNP_SHARED_DIR:-$root/../shared}"
say "configuring $build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DNNP_SHARED_DIR="$shared" > "$build.configure.log" 2>&1 \
  || { cat "$build.configure.log"; exit 1; }
say "building ($(nproc) jobs)"
cmake --build "$build" -j "$(nproc)" > "$build.build.log" 2>&1 || { cat "$build.build.log"; exit 1; }
grep -E "warning" "$build.build.log" || true
say "built libnnp into $build"
