#!/usr/bin/env bash
# The CUDA backend on a machine with a GPU, in one go (docs/cuda.md): configure and build
# the release binaries it needs, run the CUDA tests (NVRTC/ptxas builds and the device
# tests: the cases and the differential fuzzer's kernels against the reference, and whole
# plans through the executor), `ampfuse run --device cuda` of the default model and
# of a real one, then the bandwidth benchmark. Everything lands in the folder given as $1
# (default bench/results/). Budget: under 8 minutes with 16 cores; each step has its own
# timeout.
#
#   bench/gpu_check.sh [results-dir]
#
# On a GPU machine that cannot build ampfuse (no LLVM 19 or oneDNN there), build here and
# carry the binaries: bench/gpu_bundle.sh BUILD DIR packs them with every library they load,
# and AMPFUSE_GPU_BUILD=DIR/build-gpu bench/gpu_check.sh runs them.
#
# Exit status: 0 when every step passed, 1 when one failed, 2 when there is no usable GPU
# (the results still say why and what ran).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-bench/results}"
BUILD="${AMPFUSE_GPU_BUILD:-build-gpu}"
JOBS="$(nproc)"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
SUMMARY="$OUT/summary.md"
status=0
start=$(date +%s)

step() {  # step NAME TIMEOUT_S COMMAND...: runs, logs to $OUT/NAME.log, records the outcome
  local name=$1 limit=$2
  shift 2
  local t0=$(date +%s)
  echo "== $name"
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  local secs=$(( $(date +%s) - t0 ))
  echo "| $name | $([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc)") | ${secs} s | \`$name.log\` |" >>"$SUMMARY"
  tail -n 25 "$OUT/$name.log"
  [ $rc -eq 0 ] || status=1
  return $rc
}

{
  echo "# ampfuse CUDA check, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "host: $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'nvidia-smi not available')"
  echo
  echo "| step | result | time | log |"
  echo "|---|---|---|---|"
} >"$SUMMARY"

# A build made elsewhere (bench/gpu_bundle.sh: for a GPU machine without LLVM 19 and oneDNN
# to build with) is used as it is.
if [ -f "$BUILD/prebuilt.txt" ]; then
  echo "| build | prebuilt: $(head -n 1 "$BUILD/prebuilt.txt") | | |" >>"$SUMMARY"
else
  step configure 20 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DAMPFUSE_BUILD_BENCH=ON || { cat "$SUMMARY"; exit 1; }
  step build 230 cmake --build "$BUILD" -j "$JOBS" --target ampfuse_cuda_tests ampfuse_cuda_bandwidth ampfuse || { cat "$SUMMARY"; exit 1; }
fi

# Step limits add up to 8 minutes. The NVRTC build of every fuzzer kernel (CudaNvrtcFuzz,
# minutes of CPU) is left to CI, which runs it on every commit; the device fuzz runs 500
# graphs (AMPFUSE_FUZZ_GRAPHS is per shard of 4: 125), its kernels compiled 16 to an NVRTC
# program on all cores. Run ampfuse_cuda_tests by hand without the variable for all 2000.
step cuda_tests 140 env AMPFUSE_FUZZ_GRAPHS="${AMPFUSE_FUZZ_GRAPHS:-125}" "$BUILD/ampfuse_cuda_tests" \
  --gtest_filter='Cuda*:-*CudaNvrtcFuzz*' --gtest_output="xml:$OUT/cuda_tests.xml"
if grep -q "no CUDA driver\|no CUDA device" "$OUT/cuda_tests.log"; then
  echo >>"$SUMMARY"
  echo "No usable GPU: $(grep -m1 -o 'no CUDA [a-z]*.*' "$OUT/cuda_tests.log"); the device tests skipped." >>"$SUMMARY"
  [ $status -eq 0 ] && status=2
  echo "results in $OUT (summary.md)"
  cat "$SUMMARY"
  exit $status
fi
# Whole models on the GPU (engine/execution/executor.h): the report's latency, error vs the f32
# CPU run, plan, and host round trips. External ops run on the host.
step run_default 15 "$BUILD/ampfuse" run --device cuda --repeat 20 --shape data=8,3,32,32
step run_default_bf16 15 "$BUILD/ampfuse" run --device cuda --amp bf16 --repeat 20 --shape data=8,3,32,32
RESNET=models/cifar_resnet20_v2-gluoncv-symbol.json
if [ -f "$RESNET" ]; then
  step run_resnet20 20 "$BUILD/ampfuse" run "$RESNET" --shape data=1,3,32,32 --device cuda --repeat 20 \
    --save-outputs "$OUT/resnet20_outputs"
else
  echo "| run_resnet20 | skipped: $RESNET not here | | |" >>"$SUMMARY"
fi
# CUBINs from the disk kernel cache (runtime/disk_cache.h): a new process on an empty cache
# directory compiles with NVRTC and stores the CUBINs; a second new process must load every
# kernel from disk, run it on the GPU and give the same outputs, bit for bit.
CACHE="$OUT/kernel-cache"
rm -rf "$CACHE" "$OUT/disk_cold" "$OUT/disk_warm"
disk_run() {  # NAME: one process on $CACHE, its JSON report in $OUT/NAME.json
  AMPFUSE_CACHE_DIR="$CACHE" "$BUILD/ampfuse" run --device cuda --shape data=8,3,32,32 --no-baseline --repeat 3 --json \
    --save-outputs "$OUT/$1" >"$OUT/$1.json"
}
disk_check() {
  disk_run disk_cold && disk_run disk_warm || return 1
  local field
  for field in kernels_cold kernels_disk compile_cold_ms; do
    echo "$field: cold process $(grep -o "\"$field\": *[0-9.]*" "$OUT/disk_cold.json" | grep -o '[0-9.]*$')," \
      "warm process $(grep -o "\"$field\": *[0-9.]*" "$OUT/disk_warm.json" | grep -o '[0-9.]*$')"
  done
  grep -q '"kernels_cold": *0[,}]' "$OUT/disk_warm.json" || { echo "the warm process compiled kernels"; return 1; }
  grep -q '"kernels_disk": *[1-9]' "$OUT/disk_warm.json" || { echo "the warm process loaded nothing from disk"; return 1; }
  diff -r "$OUT/disk_cold" "$OUT/disk_warm" && echo "outputs identical"
}
export OUT BUILD CACHE
step disk_cache 60 bash -c "$(declare -f disk_run disk_check); disk_check"
step bandwidth 40 "$BUILD/ampfuse_cuda_bandwidth" "$OUT/bandwidth.csv"
{
  echo
  echo "## Bandwidth"
  echo
  echo '```'
  cat "$OUT/bandwidth.log"
  echo '```'
  echo
  for r in run_default run_default_bf16 run_resnet20 disk_cache; do
    [ -f "$OUT/$r.log" ] || continue
    echo "## $r"
    echo
    echo '```'
    cat "$OUT/$r.log"
    echo '```'
    echo
  done
  echo "## CUDA tests (summary lines)"
  echo
  echo '```'
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|^  ' "$OUT/cuda_tests.log" | head -80
  echo '```'
  echo
  echo "total: $(( $(date +%s) - start )) s"
} >>"$SUMMARY"
echo "results in $OUT (summary.md)"
exit $status
