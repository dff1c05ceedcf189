#!/usr/bin/env bash
# The CUDA backend on a machine with a GPU, in one go (docs/cuda.md): configure and build
# the release binaries it needs, run the CUDA tests (NVRTC/ptxas builds and the device
# tests: the cases and the differential fuzzer's kernels against the reference), then the
# bandwidth benchmark. Everything lands in the folder given as $1 (default bench/results/).
# Budget: under 8 minutes with 16 cores; each step has its own timeout.
#
#   bench/gpu_check.sh [results-dir]
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

step configure 30 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DAMPFUSE_BUILD_BENCH=ON || { cat "$SUMMARY"; exit 1; }
step build 250 cmake --build "$BUILD" -j "$JOBS" --target ampfuse_cuda_tests ampfuse_cuda_bandwidth || { cat "$SUMMARY"; exit 1; }

# Step limits add up to 8 minutes. The NVRTC build of every fuzzer kernel (CudaNvrtcFuzz,
# minutes of CPU) is left to CI, which runs it on every commit; the device fuzz runs 500
# graphs (AMPFUSE_FUZZ_GRAPHS is per shard of 4: 125), its kernels compiled 16 to an NVRTC
# program on all cores. Run ampfuse_cuda_tests by hand without the variable for all 2000.
step cuda_tests 150 env AMPFUSE_FUZZ_GRAPHS="${AMPFUSE_FUZZ_GRAPHS:-125}" "$BUILD/ampfuse_cuda_tests" \
  --gtest_filter='Cuda*:-*CudaNvrtcFuzz*' --gtest_output="xml:$OUT/cuda_tests.xml"
if grep -q "no CUDA driver\|no CUDA device" "$OUT/cuda_tests.log"; then
  echo >>"$SUMMARY"
  echo "No usable GPU: $(grep -m1 -o 'no CUDA [a-z]*.*' "$OUT/cuda_tests.log"); the device tests skipped." >>"$SUMMARY"
  [ $status -eq 0 ] && status=2
fi
step bandwidth 50 "$BUILD/ampfuse_cuda_bandwidth" "$OUT/bandwidth.csv"
{
  echo
  echo "## Bandwidth"
  echo
  echo '```'
  cat "$OUT/bandwidth.log"
  echo '```'
  echo
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
