#!/usr/bin/env bash
# Latency of whole models while other processes load the CPU, for one `ampfuse` binary
# (bench/README.md, "Thread contention"): the default model and cifar_resnet20_v2 at batch
# 1, beside no load, two busy-looping processes, and another `ampfuse run` (cifar_resnet20
# at batch 32: an OpenMP job of its own, spinning threads included), each with OpenMP's
# default wait policy and with OMP_WAIT_POLICY=passive. Prints one line per case: load,
# policy, model, median latency of `ampfuse run --repeat 50`, and how many of the 50 runs
# went solo (runtime/team_policy.h; binaries from before it print no count).
#
#   bench/thread_contention.sh [path/to/ampfuse]   (default build/ampfuse)
set -euo pipefail
cd "$(dirname "$0")/.."
AMPFUSE=${1:-build/ampfuse}
CIFAR=models/cifar_resnet20_v2-gluoncv-symbol.json
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; binary: $AMPFUSE"

latency() {  # POLICY ARGS...: the median latency in ms of `ampfuse run ARGS...`
  local policy=$1
  shift
  local env=()
  [ "$policy" = passive ] && env=(OMP_WAIT_POLICY=passive)
  env "${env[@]}" "$AMPFUSE" run "$@" --no-baseline --repeat 50 --json |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.2f ms" % r["run_ms"] + ("  %2d solo" % r["solo_runs"] if "solo_runs" in r else ""))'
}

load=()
stop_load() { for p in "${load[@]}"; do kill "$p" 2>/dev/null || true; done; load=(); }
trap stop_load EXIT

for kind in none busy-loops ampfuse-job; do
  stop_load
  case $kind in
    busy-loops) for i in 1 2; do (while :; do :; done) & load+=($!); done ;;
    ampfuse-job)
      build/ampfuse run "$CIFAR" --shape data=32,3,32,32 --no-baseline --repeat 1000000 >/dev/null 2>&1 &
      load+=($!) ;;
  esac
  sleep 2
  for policy in default passive; do
    printf 'load %-11s %-8s default model  %s\n' "$kind" "$policy" "$(latency "$policy")"
    printf 'load %-11s %-8s cifar_resnet20 %s\n' "$kind" "$policy" "$(latency "$policy" "$CIFAR" --shape data=1,3,32,32)"
  done
done
