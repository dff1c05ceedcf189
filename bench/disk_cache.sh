#!/usr/bin/env bash
# Whole-model compile time in a new process, cold (empty disk cache) against warm (the disk
# cache an earlier process filled), for ResNet-152 and the transformer encoder layer, f32 and
# bf16 AMP (bench/README.md, "Disk kernel cache"). Each case: one `ampfuse run` on an empty
# AMPFUSE_CACHE_DIR, then RUNS more on the same directory, each a new process; prints the
# first compile's time (plan.compile_cold_ms: passes and planning, or the plan loaded from
# the disk cache; kernels lowered and compiled or loaded; oneDNN primitives; the memory plan)
# and where its kernels (cold/disk/memory) and its plan (P: planned, D: from disk) came
# from, cold and the median warm, and the ratio.
#
#   bench/disk_cache.sh [path/to/ampfuse] [RUNS]   (default build/ampfuse, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
AMPFUSE=${1:-build/ampfuse}
RUNS=${2:-3}
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; binary: $AMPFUSE"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

compile() {  # CACHE ARGS...: "<compile ms> <cold> <disk> <memory> <plan P|D>" of one new process
  local cache=$1
  shift
  AMPFUSE_CACHE_DIR=$cache "$AMPFUSE" run "$@" --no-baseline --repeat 1 --json |
    python3 -c 'import json,sys; p=json.load(sys.stdin)["plan"]; print("%.1f %d %d %d %s" % (p["compile_cold_ms"], p["kernels_cold"], p["kernels_disk"], p["kernels_memory"], "D" if p["plan_from_disk"] else "P"))'
}

printf '%-22s %-5s %32s %32s %8s\n' model amp "cold ms (cold/disk/memory plan)" "warm ms (cold/disk/memory plan)" speed-up
for model in resnet152 transformer; do
  case $model in
    resnet152) args=(models/resnet152-mxnet-symbolic-symbol.json --shape data=1,3,224,224) ;;
    transformer) args=(models/bench/transformer_encoder_layer-symbol.json --shape data=32,64,256) ;;
  esac
  for amp in off bf16; do
    cache="$dir/$model-$amp"
    read -r cold_ms c1 d1 m1 p1 < <(compile "$cache" "${args[@]}" --amp $amp)
    warm=()
    for ((i = 0; i < RUNS; i++)); do warm+=("$(compile "$cache" "${args[@]}" --amp $amp)"); done
    read -r warm_ms c2 d2 m2 p2 < <(printf '%s\n' "${warm[@]}" | sort -n | sed -n "$(((RUNS + 1) / 2))p")
    printf '%-22s %-5s %32s %32s %7.1fx\n' "$model" "$amp" "$cold_ms ($c1/$d1/$m1 $p1)" "$warm_ms ($c2/$d2/$m2 $p2)" \
      "$(python3 -c "print($cold_ms / $warm_ms)")"
  done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
