#!/usr/bin/env bash
# Latency of whole models while other processes load the CPU, for one `ampfuse` binary:
# the default model and cifar_resnet20_v2 at batch 1, with 0, 1 and 2 busy-looping
# processes beside them, with OpenMP's default wait policy and with OMP_WAIT_POLICY=passive.
# Prints one line per case: load, policy, model, median latency of `ampfuse run`.
#
#   bench/thread_contention.sh [path/to/ampfuse]   (default build/ampfuse)
set -euo pipefail
cd "$(dirname "$0")/.."
AMPFUSE=${1:-build/ampfuse}
CIFAR=models/cifar_resnet20_v2-gluoncv-symbol.json
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; binary: $AMPFUSE"

latency() {  # prints the median latency in ms of `ampfuse run ARGS...`
  "$AMPFUSE" run "$@" --no-baseline --repeat 20 --json | python3 -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["run_ms"])'
}

busy=()
stop_busy() { for p in "${busy[@]}"; do kill "$p" 2>/dev/null || true; done; busy=(); }
trap stop_busy EXIT

for load in 0 1 2; do
  stop_busy
  for ((i = 0; i < load; ++i)); do (while :; do :; done) & busy+=($!); done
  sleep 1
  for policy in default passive; do
    env=()
    [ "$policy" = passive ] && env=(OMP_WAIT_POLICY=passive)
    printf 'load %d  %-8s default model  %8s ms\n' "$load" "$policy" "$(env "${env[@]}" bash -c "$(declare -f latency); AMPFUSE=$AMPFUSE latency")"
    printf 'load %d  %-8s cifar_resnet20 %8s ms\n' "$load" "$policy" \
      "$(env "${env[@]}" bash -c "$(declare -f latency); AMPFUSE=$AMPFUSE latency $CIFAR --shape data=1,3,32,32")"
  done
done
