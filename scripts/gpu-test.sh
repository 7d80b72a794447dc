#!/usr/bin/env bash
# Builds and tests on the GPU machine (see docs/cuda.md). Expects, in the ignored folder .device/
# (made by scripts/gpu-pack.sh on a development machine): openmm-libs.tar.xz (OpenMM 8.6.1's
# libraries, CUDA platform and headers from the PyPI wheels), molecules.tar.xz, the models as
# byte-shuffled, xz-compressed .nnpm files, and bzlib.h. Writes logs to .device/out and, when $OUT
# is set (the GPU machine's device tool), packs them into $OUT/gpu-test.tar.gz.
#   scripts/gpu-test.sh [build|build-tn|test|sanitize|sanitize-tensornet|sanitize-tensornet-small|sanitize-grid|multidevice|tensornet|cluster-probe|sanitize-large|sanitize-integrators|integrators|show|bench|bench-tensornet|peer-tensornet|drift-tensornet|timeline|bench-integrators|cublas|profile|kernels|stalls|source|utilization|ab-start|ab|ab-check]...
#   (default: build test sanitize)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
d="$root/.device"
# Logs go to .device/out; when the device tool's $OUT is set they also come back as one archive,
# $OUT/gpu-test.tar.gz (the tool returns at most 8 files), whatever way the script ends.
out="$d/out"
rm -rf "$out"
mkdir -p "$out"
if [ -n "${OUT:-}" ] && [ "$OUT" != "$out" ]; then
  trap 'mkdir -p "$OUT" && tar czf "$OUT/gpu-test.tar.gz" -C "$d" out' EXIT
fi
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(build test sanitize)
export OPENMM_DIR="$d/omm/OpenMM.libs"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NNP_SHARED_DIR="$d/shared"
# OpenMM's libraries, the molecules and the models unpacked into .device (every call: carrying
# .device to the GPU machine replaces the folder there, so what an earlier call unpacked is gone).
mkdir -p "$d/omm" "$d/shared/models/ani-model-zoo"
[ -d "$OPENMM_DIR" ] || tar xJf "$d/openmm-libs.tar.xz" -C "$d/omm"
[ -d "$d/shared/molecules" ] || tar xJf "$d/molecules.tar.xz" -C "$d/shared"
cp "$d/LICENSE-ani-model-zoo" "$d/shared/models/ani-model-zoo/LICENSE"
python3 - "$d" <<'PY'
import lzma, os, sys
import numpy as np
d = sys.argv[1]
for src, dst in (("ani1x", "ani-1x_8x.info"), ("ani2x", "ani-2x_8x.info")):
    target = os.path.join(d, "shared/models/ani-model-zoo", dst)  # .nnpm content; libnnp reads it by its magic bytes
    if os.path.exists(target) or not os.path.exists(os.path.join(d, src + ".shuf.xz")):
        continue
    raw = np.frombuffer(lzma.open(os.path.join(d, src + ".shuf.xz")).read(), dtype=np.uint8)
    n = len(raw) // 4 * 4
    open(target, "wb").write(raw[:n].reshape(4, -1).T.copy().tobytes() + raw[n:].tobytes())
    print("model", dst, len(raw), "bytes")
PY
# the random-weight test models (scripts/gpu-pack.sh): random-f128 is the benchmark model
[ -f "$d/tensornet/random-f128.nnpm" ] || xz -dc "$d/tensornet-bench.nnpm.xz" > "$d/tensornet/random-f128.nnpm"
for f in "$d"/tensornet/*.nnpm.xz; do
  [ -f "$f" ] && [ ! -f "${f%.xz}" ] && xz -dc "$f" > "${f%.xz}"
done
# TensorNet's kernels: memcheck of the quick mode on every test model, racecheck on two (o3-atomref,
# and random-f72 for the paths of larger models; random-f128 took over 300 s there).
tn_args() {  # test_tensornet_cuda's arguments (written by core/tests/CMakeLists.txt), one per line
  mapfile -t tn < "${1:-$root}/build-gpu/core/tests/test_tensornet_cuda.args"
}
sanitize_tensornet() {  # $1: racecheck's NNP_TEST_QUICK (default 1; "small": without the 60-molecule system)
  local tn; tn_args
  local rq="${1:-1}"
  NNP_TEST_QUICK=1 timeout "${SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool memcheck --error-exitcode 9 "$root/build-gpu/core/tests/test_tensornet_cuda" "${tn[@]}" > "$out/sanitizer-memcheck-tensornet.log" 2>&1
  echo "compute-sanitizer memcheck on test_tensornet_cuda (quick): exit $? ($(grep -E 'ERROR SUMMARY' "$out/sanitizer-memcheck-tensornet.log" | tail -n 1))"
  NNP_TEST_QUICK="$rq" timeout "${SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool racecheck --error-exitcode 9 "$root/build-gpu/core/tests/test_tensornet_cuda" "$d/tensornet/o3-atomref.nnpm" > "$out/sanitizer-racecheck-tensornet.log" 2>&1
  echo "compute-sanitizer racecheck on test_tensornet_cuda (quick $rq, o3-atomref): exit $? ($(grep -E 'RACECHECK SUMMARY' "$out/sanitizer-racecheck-tensornet.log" | tail -n 1))"
  NNP_TEST_QUICK="$rq" timeout "${SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool racecheck --error-exitcode 9 "$root/build-gpu/core/tests/test_tensornet_cuda" "$d/tensornet/random-f72.nnpm" > "$out/sanitizer-racecheck-tensornet-f72.log" 2>&1
  echo "compute-sanitizer racecheck on test_tensornet_cuda (quick $rq, random-f72): exit $? ($(grep -E 'RACECHECK SUMMARY' "$out/sanitizer-racecheck-tensornet-f72.log" | tail -n 1))"
}
# The variants of "ab": copies of the tree with AB's patches applied, built in the background
# (the current tree's own build is the "build" step).
names=(current); dirs=("$root"); ab_started=0
ab_start() {
  local spec name pf rev dir i
  for spec in ${AB:-}; do
    name="${spec%%:*}"; pf="${spec#*:}"; rev=""; [ "${pf#-}" != "$pf" ] && { rev=-R; pf="${pf#-}"; }
    dir="/tmp/ab-$name"; rm -rf "$dir"; mkdir -p "$dir"
    (cd "$root" && tar cf - --exclude=./build-gpu .) | tar xf - -C "$dir"
    if (cd "$dir" && patch -s $rev -p1 < "$root/$pf"); then names+=("$name"); dirs+=("$dir"); else echo "ab: $pf does not apply; $name left out"; fi
  done
  for i in "${!dirs[@]}"; do
    [ "$i" = 0 ] && continue
    OUT="/tmp/ab-out-$i" "${dirs[$i]}/scripts/gpu-test.sh" build > "/tmp/ab-build-$i.log" 2>&1 &
  done
  ab_started=1
}
for step in "${steps[@]}"; do
  case "$step" in
  build|build-tn)
    # build-tn: only test_tensornet_cuda (libnnp and its test), for a quick check in a short call
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
    rm -f "$root/build-gpu/CMakeCache.txt"
    cmake -S "$root" -B "$root/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNNP_BUILD_PYTHON=OFF \
      -DNNP_SHARED_DIR="$d/shared" -DNNP_TENSORNET_MODELS_DIR="$d/tensornet" -DNNP_MODELS="ani1x;ani2x" -DBZIP2_INCLUDE_DIR="$d/include" \
      -DBZIP2_LIBRARY_RELEASE="$(ls /usr/lib/x86_64-linux-gnu/libbz2.so* /lib/x86_64-linux-gnu/libbz2.so* "$d"/lib/libbz2.so 2>/dev/null | head -n 1)" > "$out/configure.log" 2>&1 \
      || { tail -n 40 "$out/configure.log"; exit 1; }
    cmake --build "$root/build-gpu" -j "$(nproc)" $([ "$step" = build-tn ] && echo --target test_tensornet_cuda) > "$out/build.log" 2>&1 \
      || { grep -E "error" "$out/build.log" | head -n 40; exit 1; }
    echo "build: ok" ;;
  show)
    "$root/build-gpu/platforms/cuda/TestCudaNNPGraph" 2>&1 | tail -n 20
    "$root/build-gpu/core/tests/test_cuda" 2>&1 | grep -vE "^  ok" | tail -n 8 ;;
  graphdebug)
    for p in single mixed double; do
      echo "precision $p:"; NNP_GRAPH_PRECISION=$p "$root/build-gpu/platforms/cuda/TestCudaNNPGraph" 2>&1 | grep -E "moved|eager steps|exception|atom 0: start"
    done ;;
  test)
    timeout "${TEST_TIMEOUT:-1800}" ctest --test-dir "$root/build-gpu" --output-on-failure -j 4 2>&1 | tee "$out/ctest.log" | grep -vE "^  ok:" | tail -n 60 ;;
  sanitize)
    for tool in memcheck racecheck; do
      quick=""; [ "$tool" = racecheck ] && quick=1   # racecheck is slow: one comparison, not the whole test
      env ${quick:+NNP_TEST_QUICK=1} timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 9 "$root/build-gpu/core/tests/test_cuda" > "$out/sanitizer-$tool.log" 2>&1
      echo "compute-sanitizer $tool on test_cuda: exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer-$tool.log" | tail -n 1))"
    done
    # The many-rows GEMMs run only on large systems: racecheck them on the 40-molecule system alone
    # (NNP_TEST_QUICK=large; no cluster kernel runs there, see sanitize-integrators).
    NNP_TEST_QUICK=large timeout 300 compute-sanitizer --tool racecheck --kernel-name kns=k_gemm_big --error-exitcode 9 "$root/build-gpu/core/tests/test_cuda" > "$out/sanitizer-racecheck-big.log" 2>&1
    echo "compute-sanitizer racecheck (k_gemm_big*) on test_cuda (large system): exit $? ($(grep -E 'RACECHECK SUMMARY' "$out/sanitizer-racecheck-big.log" | tail -n 1))"
    sanitize_tensornet ;;
  sanitize-tensornet) sanitize_tensornet ;;
  sanitize-tensornet-small) sanitize_tensornet small ;;
  sanitize-grid)
    # The neighbour search's cell grid (k_tn_grid, k_tn_neighbors) on the batches of over 512 atoms
    # (NNP_TEST_QUICK=grid): memcheck of every kernel, racecheck of those two.
    tn_args
    NNP_TEST_QUICK=grid timeout "${SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool memcheck --error-exitcode 9 "$root/build-gpu/core/tests/test_tensornet_cuda" "$d/tensornet/o3-atomref.nnpm" "$d/tensornet/random-f72.nnpm" > "$out/sanitizer-memcheck-grid.log" 2>&1
    echo "compute-sanitizer memcheck on test_tensornet_cuda (grid): exit $? ($(grep -E 'ERROR SUMMARY' "$out/sanitizer-memcheck-grid.log" | tail -n 1))"
    for k in k_tn_grid k_tn_neighbors; do
      NNP_TEST_QUICK=grid timeout "${SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool racecheck --kernel-name "kns=$k" --error-exitcode 9 "$root/build-gpu/core/tests/test_tensornet_cuda" "$d/tensornet/o3-atomref.nnpm" > "$out/sanitizer-racecheck-$k.log" 2>&1
      echo "compute-sanitizer racecheck ($k) on test_tensornet_cuda (grid): exit $? ($(grep -E 'RACECHECK SUMMARY' "$out/sanitizer-racecheck-$k.log" | tail -n 1))"
    done ;;
  multidevice)
    # NNPForce in a Context on several devices ("0,1", or "0,0" on one GPU) against one device, under
    # memcheck, then the benchmark of 837 x 4 molecules per DeviceIndex list (MULTI_DEVICES, default
    # every GPU prefix, or "0 0,0" on one GPU).
    OPENMM_PLUGIN_DIR="$OPENMM_DIR/lib/plugins" timeout 300 "$root/build-gpu/platforms/cuda/TestCudaNNPMultiDevice" 2>&1 | tee "$out/multidevice.log" | tail -n 14
    OPENMM_PLUGIN_DIR="$OPENMM_DIR/lib/plugins" timeout 300 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
      "$root/build-gpu/platforms/cuda/TestCudaNNPMultiDevice" 4 > "$out/sanitizer-memcheck-multidevice.log" 2>&1
    echo "compute-sanitizer memcheck on TestCudaNNPMultiDevice 4: exit $? ($(grep -E 'ERROR SUMMARY' "$out/sanitizer-memcheck-multidevice.log" | tail -n 1))"
    lists="${MULTI_DEVICES:-}"
    [ -n "$lists" ] || { [ "$(nvidia-smi -L | wc -l)" -gt 1 ] || lists="0 0,0"; }
    OPENMM_PLUGIN_DIR="$OPENMM_DIR/lib/plugins" timeout 400 "$root/build-gpu/bench/bench_devices" "$d/shared" $lists 2>&1 | tee "$out/bench-devices.txt" ;;
  tensornet)
    tn_args
    timeout "${TEST_TIMEOUT:-300}" "$root/build-gpu/core/tests/test_tensornet_cuda" "${tn[@]}" > "$out/tensornet.txt" 2>&1
    echo "test_tensornet_cuda: exit $?"; grep -vE "^  ok" "$out/tensornet.txt" | tail -n 40
    OPENMM_PLUGIN_DIR="$OPENMM_DIR/lib/plugins" timeout 300 "$root/build-gpu/platforms/cuda/TestCudaTensorNet" "$d/tensornet/o3-atomref.nnpm" > "$out/tensornet-openmm.txt" 2>&1
    echo "TestCudaTensorNet: exit $?"; grep -vE "^  ok" "$out/tensornet-openmm.txt" | tail -n 12 ;;
  sanitize-large)
    # The tensor-core GEMMs (many and middle row counts) alone, when device time is short: memcheck of
    # every kernel and racecheck of k_gemm_big* on the 40- and 10-molecule systems (NNP_TEST_QUICK=large).
    NNP_TEST_QUICK=large timeout "${SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool memcheck --error-exitcode 9 "$root/build-gpu/core/tests/test_cuda" > "$out/sanitizer-memcheck-large.log" 2>&1
    echo "compute-sanitizer memcheck on test_cuda (large systems): exit $? ($(grep -E 'ERROR SUMMARY' "$out/sanitizer-memcheck-large.log" | tail -n 1))"
    NNP_TEST_QUICK=large timeout "${SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool racecheck --kernel-name kns=k_gemm_big --error-exitcode 9 "$root/build-gpu/core/tests/test_cuda" > "$out/sanitizer-racecheck-big.log" 2>&1
    echo "compute-sanitizer racecheck (k_gemm_big*) on test_cuda (large systems): exit $? ($(grep -E 'RACECHECK SUMMARY' "$out/sanitizer-racecheck-big.log" | tail -n 1))" ;;
  cublas)
    # cuBLAS on the 837-molecule GEMM shapes (bench/gemm_cublas.cu), for docs/benchmarks.md.
    "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" -O3 -arch=sm_90 "$root/bench/gemm_cublas.cu" -lcublas -o "$root/build-gpu/gemm_cublas" > "$out/cublas-build.log" 2>&1 \
      && timeout 120 "$root/build-gpu/gemm_cublas" 2>&1 | tee "$out/cublas.txt" || echo "cublas: failed ($(tail -n 3 "$out/cublas-build.log"))" ;;
  cluster-probe)
    # bench/tn_cluster_probe.cu: a TensorNet stage's cost as a chain of launches and as a cluster per batch.
    "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" -O3 -arch=sm_90 "$root/bench/tn_cluster_probe.cu" -o "$root/build-gpu/tn_cluster_probe" > "$out/probe-build.log" 2>&1 \
      && timeout 120 "$root/build-gpu/tn_cluster_probe" 2>&1 | tee "$out/cluster-probe.txt" || echo "cluster-probe: failed ($(tail -n 3 "$out/probe-build.log"))" ;;
  sanitize-integrators)
    # The integrators' test (graphs of OpenMM's kernels and ours), without statistics and drift:
    # memcheck on everything, racecheck (shared-memory hazards) on libnnp's kernels (names k_*; the
    # integrators' own kernel uses no shared memory). compute-sanitizer 2025 (CUDA 13.0) fails with
    # "Internal Sanitizer Error: The Sanitizer failed to handle a hardware exception" when racecheck
    # leaves out a kernel that reads distributed shared memory (k_gemm_mma's cluster_fixup;
    # scripts/sanitizer-cluster-repro.cu): the filter keeps every k_* kernel in.
    for tool in memcheck racecheck; do
      filter=""; [ "$tool" = racecheck ] && filter="--kernel-name kns=k_"
      # --report-api-errors no: OpenMM probes its kernel cache with cuModuleLoad, and every miss
      # (CUDA_ERROR_FILE_NOT_FOUND, then it compiles) would count as an error; memory errors still count.
      NNP_TEST_QUICK=1 OPENMM_PLUGIN_DIR="$OPENMM_DIR/lib/plugins" timeout 280 compute-sanitizer --tool "$tool" $filter --report-api-errors no --error-exitcode 9 \
        "$root/build-gpu/platforms/cuda/TestCudaNNPIntegrators" > "$out/sanitizer-integrators-$tool.log" 2>&1
      echo "compute-sanitizer $tool on TestCudaNNPIntegrators: exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer-integrators-$tool.log" | tail -n 1); $(grep -cE 'FAILED' "$out/sanitizer-integrators-$tool.log") failed checks)"
    done ;;
  integrators)
    for p in ${PRECISIONS:-mixed}; do
      echo "precision $p:"; NNP_GRAPH_PRECISION=$p "$root/build-gpu/platforms/cuda/TestCudaNNPIntegrators" > "$out/integrators-$p.log" 2>&1
      echo "  exit $?"; grep -vE "^  ok:" "$out/integrators-$p.log" | tail -n 80
    done ;;
  profile)
    # Nsight Compute on the one-molecule case: the AEV kernels and the few-rows GEMM (needs hardware counters).
    # PROFILE_KERNELS (regex), PROFILE_SKIP and PROFILE_COUNT (matching launches) choose the kernels.
    OPENMM_PLUGIN_DIR="$OPENMM_DIR/lib/plugins" timeout 240 ncu --clock-control none --kernel-name regex:"${PROFILE_KERNELS:-k_aev|k_gemm_skinny}" \
      --launch-skip "${PROFILE_SKIP:-8}" --launch-count "${PROFILE_COUNT:-5}" \
      --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
      "$root/build-gpu/bench/bench_nnp" "$d/shared" ${BENCH_MODEL:+--model=$BENCH_MODEL} 1 > "$out/ncu.txt" 2>&1
    echo "ncu: exit $?"; grep -E "^  [a-z_]+.*\(|Duration|Elapsed Cycles|SM Frequency|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Issued Warp Per|No Eligible|Stall|Local|Hit Rate|Memory Throughput|Mem Busy|Max Bandwidth" "$out/ncu.txt" | head -n "${PROFILE_LINES:-80}" ;;
  ab-start) ab_start ;;
  ab)
    # Variants compared in one call: this tree ("current") and, for each "name:file" of AB, a copy
    # with the patch file applied ("name:-file": reversed). Each is built (in parallel; "ab-start"
    # earlier in the same call starts those builds while other steps run) and checked by test_cuda
    # (with BENCH_MODEL: test_tensornet_cuda, quick), then bench_nnp runs at BENCH_SIZES (default
    # "1 837"; with BENCH_MODEL, that model) for each in turn, AB_ROUNDS times (default 2), so that
    # the variants share the machine's state.
    [ "$ab_started" = 1 ] || ab_start
    wait  # the variants' builds
    for i in "${!dirs[@]}"; do
      if [ ! -x "${dirs[$i]}/build-gpu/bench/bench_nnp" ]; then
        echo "ab ${names[$i]}: build failed ($(grep -m 1 -E "error:" "/tmp/ab-build-$i.log"); log /tmp/ab-build-$i.log)"; continue
      fi
      if [ -n "${BENCH_MODEL:-}" ]; then  # a TensorNet benchmark: its test (quick) on the test checkpoints
        tn_args "${dirs[$i]}"
        echo "ab ${names[$i]}: $(NNP_TEST_QUICK=1 "${dirs[$i]}/build-gpu/core/tests/test_tensornet_cuda" "${tn[@]}" 2>&1 | grep -E "all checks|FAIL|skipped" | head -n 3 | tr '\n' ' ')"
      else
        echo "ab ${names[$i]}: $("${dirs[$i]}/build-gpu/core/tests/test_cuda" 2>&1 | grep -E "all checks|FAIL|skipped" | head -n 3 | tr '\n' ' ')"
      fi
    done
    for r in $(seq "${AB_ROUNDS:-2}"); do
      for i in "${!dirs[@]}"; do
        [ -x "${dirs[$i]}/build-gpu/bench/bench_nnp" ] || continue
        echo "== ${names[$i]} (round $r)"
        # each copy's own OpenMM (two libOpenMMCUDA in one process abort at exit)
        OPENMM_PLUGIN_DIR="${dirs[$i]}/.device/omm/OpenMM.libs/lib/plugins" "${dirs[$i]}/build-gpu/bench/bench_nnp" "$d/shared" ${BENCH_MODEL:+--model=$BENCH_MODEL} ${BENCH_SIZES:-1 837} \
          > "/tmp/ab-bench-$i.log" 2>&1 || { echo "ab ${names[$i]}: bench_nnp exit $?:"; tail -n 5 "/tmp/ab-bench-$i.log"; }
        grep -E "^ +[0-9]+ +[0-9]+ \|" "/tmp/ab-bench-$i.log"
      done
    done ;;
  ab-check)
    # After "ab", what landing a TensorNet variant needs, for each of AB_CHECK's names (default: every
    # variant but "current"): test_tensornet_cuda in full on every test model (its graph replays
    # included), memcheck (NNP_TEST_QUICK=small, random-f128 and o3-atomref) and racecheck (small,
    # o3-atomref, the k_tn_ kernels). Logs: .device/out/ab-check-<name>-*.log.
    for i in "${!dirs[@]}"; do
      name="${names[$i]}"
      if [ -n "${AB_CHECK:-}" ]; then [[ " $AB_CHECK " == *" $name "* ]] || continue; else [ "$i" = 0 ] && continue; fi
      t="${dirs[$i]}/build-gpu/core/tests/test_tensornet_cuda"
      [ -x "$t" ] || { echo "ab-check $name: no build"; continue; }
      tn_args "${dirs[$i]}"
      timeout "${TEST_TIMEOUT:-300}" "$t" "${tn[@]}" > "$out/ab-check-$name-test.log" 2>&1; rc=$?
      echo "ab-check $name: test exit $rc ($(grep -cE 'graph replays.*bit-identical' "$out/ab-check-$name-test.log") graph replays bit-identical; $(grep -E 'all checks|FAIL' "$out/ab-check-$name-test.log" | head -n 3 | tr '\n' ' '))"
      NNP_TEST_QUICK=small timeout "${SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool memcheck --error-exitcode 9 "$t" "$d/tensornet/random-f128.nnpm" \
        "$d/tensornet/o3-atomref.nnpm" > "$out/ab-check-$name-memcheck.log" 2>&1; rc=$?
      echo "ab-check $name: memcheck exit $rc ($(grep -E 'ERROR SUMMARY' "$out/ab-check-$name-memcheck.log" | tail -n 1))"
      NNP_TEST_QUICK=small timeout "${SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool racecheck --kernel-name kns=k_tn_ --error-exitcode 9 "$t" \
        "$d/tensornet/o3-atomref.nnpm" > "$out/ab-check-$name-racecheck.log" 2>&1; rc=$?
      echo "ab-check $name: racecheck exit $rc ($(grep -E 'RACECHECK SUMMARY' "$out/ab-check-$name-racecheck.log" | tail -n 1))"
    done ;;
  source)
    # Nsight Compute with source counters, per CUDA source line (build with CUDAFLAGS=-lineinfo:
    # CUDAFLAGS=-lineinfo scripts/gpu-test.sh build source): each line's share of the kernel's warp
    # samples and instructions and its top stall reasons (scripts/ncu-source-lines.py). SOURCE_KERNELS
    # (regex, default k_aev), SOURCE_SKIP and SOURCE_COUNT (matching launches), SOURCE_SIZE (molecules,
    # default 837); the report and its source page stay in .device/out.
    OPENMM_PLUGIN_DIR="$OPENMM_DIR/lib/plugins" timeout 240 ncu --clock-control none --kernel-name regex:"${SOURCE_KERNELS:-k_aev}" \
      --launch-skip "${SOURCE_SKIP:-30}" --launch-count "${SOURCE_COUNT:-2}" --section SourceCounters --section WarpStateStats \
      --section LaunchStats --section Occupancy --section SpeedOfLight --import-source yes -f -o "$out/source" \
      "$root/build-gpu/bench/bench_nnp" "$d/shared" ${BENCH_MODEL:+--model=$BENCH_MODEL} "${SOURCE_SIZE:-837}" > "$out/source-run.txt" 2>&1
    echo "ncu source: exit $?"
    ncu -i "$out/source.ncu-rep" --page details > "$out/source-details.txt" 2>&1
    grep -E "^  [a-z_ ]+.*\(|Duration|Registers Per|Achieved Occupancy|Issued Warp Per|Warp Cycles Per Issued|Block Limit (Reg|Shared)" "$out/source-details.txt" | head -n 40
    ncu -i "$out/source.ncu-rep" --page source --csv --print-source cuda,sass > "$out/source.csv" 2> "$out/source.err" \
      && python3 "$root/scripts/ncu-source-lines.py" "$out/source.csv" "${SOURCE_LINES:-25}" ;;
  stalls)
    # Nsight Compute: what the warps of one molecule's evaluation wait on, per launch (cycles per
    # issued instruction, by stall reason, top 7), with each launch's time and instruction count.
    # STALL_KERNELS (regex), STALL_SKIP and STALL_COUNT (matching launches; 7 = one evaluation),
    # STALL_SIZE (molecules, default 1). Here and in profile, source, utilization and kernels,
    # BENCH_MODEL runs another model (a TensorNet .nnpm) instead of ANI-2x.
    OPENMM_PLUGIN_DIR="$OPENMM_DIR/lib/plugins" timeout 250 ncu --clock-control none --cache-control none \
      --kernel-name regex:"${STALL_KERNELS:-k_gemm_mma|k_aev}" --launch-skip "${STALL_SKIP:-80}" --launch-count "${STALL_COUNT:-7}" --csv \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,gpu__time_duration.sum,smsp__inst_executed.sum" \
      "$root/build-gpu/bench/bench_nnp" "$d/shared" ${BENCH_MODEL:+--model=$BENCH_MODEL} "${STALL_SIZE:-1}" > "$out/stalls.csv" 2> "$out/stalls.err"
    echo "ncu stalls: exit $?"
    python3 "$root/scripts/ncu-table.py" stalls "$out/stalls.csv"
    ;;
  kernels)
    # Per-kernel GPU times (Nsight Compute, gpu__time_duration) of bench_nnp at each of BENCH_SIZES
    # (default 1): KERNEL_COUNT launches after KERNEL_SKIP, averaged by kernel name; BENCH_MODEL: another model.
    for n in ${BENCH_SIZES:-1}; do
      OPENMM_PLUGIN_DIR="$OPENMM_DIR/lib/plugins" timeout "${KERNEL_TIMEOUT:-300}" ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum \
        --launch-skip "${KERNEL_SKIP:-300}" --launch-count "${KERNEL_COUNT:-100}" --csv \
        "$root/build-gpu/bench/bench_nnp" "$d/shared" ${BENCH_MODEL:+--model=$BENCH_MODEL} "$n" > "$out/kernels-$n.csv" 2> "$out/kernels-$n.err"
      echo "ncu kernels, $n molecule(s): exit $?"
      python3 "$root/scripts/ncu-table.py" kernels "$out/kernels-$n.csv"
    done ;;
  utilization)
    # Nsight Compute: per launch, what each unit is busy with (of its sustained peak): L2 throughput
    # (and bytes per second), the tensor pipe, issue slots, DRAM, and the warps resident. UTIL_KERNELS
    # (regex, default k_gemm_big_h), UTIL_SKIP and UTIL_COUNT (matching launches; 6 = one evaluation's
    # many-row GEMMs), UTIL_SIZE (molecules, default 837).
    OPENMM_PLUGIN_DIR="$OPENMM_DIR/lib/plugins" timeout "${UTIL_TIMEOUT:-300}" ncu --clock-control none \
      --kernel-name regex:"${UTIL_KERNELS:-k_gemm_big_h}" --launch-skip "${UTIL_SKIP:-30}" --launch-count "${UTIL_COUNT:-6}" --csv \
      --metrics gpu__time_duration.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__inst_issued.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active \
      "$root/build-gpu/bench/bench_nnp" "$d/shared" ${BENCH_MODEL:+--model=$BENCH_MODEL} "${UTIL_SIZE:-837}" > "$out/utilization.csv" 2> "$out/utilization.err"
    echo "ncu utilization: exit $?"
    python3 "$root/scripts/ncu-table.py" utilization "$out/utilization.csv"
    ;;
  bench-integrators)
    OPENMM_PLUGIN_DIR="$OPENMM_DIR/lib/plugins" "$root/build-gpu/bench/bench_integrators" "$d/shared" ${BENCH_SIZES:-} 2>&1 | tee "$out/bench-integrators.txt" ;;
  bench-tensornet)
    [ -f "$d/tensornet-bench.nnpm" ] || xz -dc "$d/tensornet-bench.nnpm.xz" > "$d/tensornet-bench.nnpm"
    OPENMM_PLUGIN_DIR="$OPENMM_DIR/lib/plugins" "$root/build-gpu/bench/bench_nnp" "$d/shared" --model="$d/tensornet-bench.nnpm" ${BENCH_SIZES:-1 10 100} 2>&1 | tee "$out/bench-tensornet.txt" ;;
  timeline)
    # where a TensorNet step's time goes: a copy of this tree built with TN_TIMELINE 1 (block 0 of
    # every launch stamps its start and the end of its wait) runs bench_nnp at TIMELINE_SIZES
    # (default "1 10") on BENCH_MODEL (default the AceFF-sized model); scripts/tn-timeline.py sums
    # the launches of a step
    [ -f "$d/tensornet-bench.nnpm" ] || xz -dc "$d/tensornet-bench.nnpm.xz" > "$d/tensornet-bench.nnpm"
    t=/tmp/tn-timeline; rm -rf "$t"; mkdir -p "$t"
    (cd "$root" && tar cf - --exclude=./build-gpu .) | tar xf - -C "$t"
    sed -i 's/^#define TN_TIMELINE 0 /#define TN_TIMELINE 1 /' "$t/core/models/tensornet/cuda/tensornet_cuda.cu"
    OUT=/tmp/tn-timeline-out "$t/scripts/gpu-test.sh" build > "$out/timeline-build.log" 2>&1
    if [ ! -x "$t/build-gpu/bench/bench_nnp" ]; then
      echo "timeline: the TN_TIMELINE 1 build failed ($(grep -m 1 -E "error:" "$out/timeline-build.log"); log timeline-build.log)"; continue
    fi
    OPENMM_PLUGIN_DIR="$t/.device/omm/OpenMM.libs/lib/plugins" "$t/build-gpu/bench/bench_nnp" "$d/shared" \
      --model="${BENCH_MODEL:-$d/tensornet-bench.nnpm}" ${TIMELINE_SIZES:-1 10} > "$out/timeline.txt" 2>&1
    echo "timeline: bench_nnp exit $?"
    python3 "$root/scripts/tn-timeline.py" "$out/timeline.txt" ;;
  drift-tensornet)
    # NVE drift of DRIFT_MOLECULES (default 100) drug-like molecules with the AceFF-sized benchmark model
    [ -f "$d/tensornet-bench.nnpm" ] || xz -dc "$d/tensornet-bench.nnpm.xz" > "$d/tensornet-bench.nnpm"
    OPENMM_PLUGIN_DIR="$OPENMM_DIR/lib/plugins" timeout 500 "$root/build-gpu/platforms/cuda/TestCudaTensorNet" "$d/tensornet-bench.nnpm" \
      "${DRIFT_MOLECULES:-100}" > "$out/drift-tensornet.txt" 2>&1
    echo "TestCudaTensorNet with drift: exit $?"; tail -n 4 "$out/drift-tensornet.txt" ;;
  peer-tensornet)
    # torchmd-net beside the plugin in one call, on the same model (bench/make_tensornet_model.py) and
    # systems: 1, 10, 100 copies of the 22-atom molecule and a 258-water cluster (bench/make_waters.py);
    # then the plugin alone on a periodic box of 1,728 waters and PEER_SIZES drug-like sets (default 100 837).
    [ -f "$d/tensornet-bench.nnpm" ] || xz -dc "$d/tensornet-bench.nnpm.xz" > "$d/tensornet-bench.nnpm"
    w="$d/waters"
    python3 "$root/bench/make_waters.py" "$w" > /dev/null
    m="$d/shared/molecules/druglike/drugbank-0030.xyz"
    peer=("1*$m" "10*$m" "100*$m" "$w/water-cluster-258.xyz")
    t="$d/tmdn"
    if [ ! -d "$t/torchmd_net-2.6.2" ] && ls "$d"/torchmd_net-2.6.2.tar.gz > /dev/null 2>&1; then
      mkdir -p "$t/ase/calculators" && tar xzf "$d/torchmd_net-2.6.2.tar.gz" -C "$t"
      # torchmdnet.calculators imports ase for its ASE calculator only; a stand-in is enough for External
      touch "$t/ase/__init__.py" "$t/ase/calculators/__init__.py"
      printf 'all_changes = []\n\n\nclass Calculator:\n    pass\n' > "$t/ase/calculators/calculator.py"
    fi
    PYTHONPATH="$t/torchmd_net-2.6.2:$t" timeout 400 python3 "$root/bench/torchmdnet_peer.py" "${peer[@]}" 2>&1 | grep -v Warning | tee "$out/peer-torchmdnet.txt"
    PYTHONPATH="$t/torchmd_net-2.6.2:$t" timeout 120 python3 "$root/bench/torchmdnet_precision.py" "$d/shared" 2>&1 | grep -v Warning | tee -a "$out/peer-torchmdnet.txt"
    OPENMM_PLUGIN_DIR="$OPENMM_DIR/lib/plugins" "$root/build-gpu/bench/bench_nnp" "$d/shared" --model="$d/tensornet-bench.nnpm" \
      "${peer[@]}" "$w/water-box-12.xyz" ${PEER_SIZES:-100 837} 2>&1 | tee "$out/peer-plugin.txt" ;;
  bench)
    OPENMM_PLUGIN_DIR="$OPENMM_DIR/lib/plugins" "$root/build-gpu/bench/bench_nnp" "$d/shared" ${BENCH_SIZES:-} 2>&1 | tee "$out/bench.txt" ;;
  esac
done
