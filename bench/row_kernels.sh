#!/usr/bin/env bash
# Row kernels against the ops they replace (bench/README.md, "Row kernels"): the same
# `ampfuse` binary with and without --no-row-kernels, each run its own process, the two
# alternating ROUNDS times; prints per case the smallest of the rounds' medians (`ampfuse
# run --repeat 30`, run_ms) of each and their ratio. Cases: softmax and LayerNorm alone in
# f32 (against oneDNN's primitives) at a transformer's sizes and a large one; an attention
# softmax with its mask add, scale and casts in bf16; the Transformer encoder layer of
# bench/peers (built with MXNet from the MXNet virtual environment when one is there:
# ROW_BENCH_VENV, default build/py-venv) and the Sockeye transformer of models/, f32 and bf16.
#
# Teams of 2 threads in every run (AMPFUSE_TEAMS=always unless set), as the peer harness
# runs: the adaptive default goes solo when neighbours hold the cores, and then a case's two
# sides would differ by that, not by their kernels.
#
#   bench/row_kernels.sh [path/to/ampfuse]   (default build/ampfuse; ROW_BENCH_ROUNDS=5)
set -euo pipefail
cd "$(dirname "$0")/.."
AMPFUSE=${1:-build/ampfuse}
ROUNDS=${ROW_BENCH_ROUNDS:-5}
MXNET_VENV=${ROW_BENCH_VENV:-build/py-venv}
export AMPFUSE_TEAMS=${AMPFUSE_TEAMS:-always}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; binary: $AMPFUSE; $ROUNDS rounds"

# An MXNet symbol of one op (or a short chain) over `data`.
op_graph() {  # FILE OP ATTRS_JSON [EXTRA_INPUT...]
  local file=$1 op=$2 attrs=$3
  shift 3
  python3 - "$file" "$op" "$attrs" "$@" <<'EOF'
import json, sys
file, op, attrs, extra = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4:]
nodes = [{"op": "null", "name": "data", "inputs": []}] + [{"op": "null", "name": e, "inputs": []} for e in extra]
nodes.append({"op": op, "name": "out", "attrs": attrs, "inputs": [[i, 0, 0] for i in range(len(nodes))]})
json.dump({"nodes": nodes, "arg_nodes": list(range(len(nodes) - 1)), "heads": [[len(nodes) - 1, 0, 0]],
           "attrs": {"mxnet_version": ["int", 10901]}}, open(file, "w"))
EOF
}
op_graph "$work/softmax.json" softmax '{"axis": "-1"}'
op_graph "$work/layernorm.json" LayerNorm '{"axis": "-1"}' gamma beta
# Scores -> scale -> + mask -> softmax, as an attention block computes its weights.
python3 - "$work/attention.json" <<'EOF'
import json, sys
nodes = [{"op": "null", "name": "data", "inputs": []}, {"op": "null", "name": "mask", "inputs": []},
         {"op": "_mul_scalar", "name": "scale", "attrs": {"scalar": "0.125"}, "inputs": [[0, 0, 0]]},
         {"op": "broadcast_add", "name": "masked", "inputs": [[2, 0, 0], [1, 0, 0]]},
         {"op": "softmax", "name": "attn", "attrs": {"axis": "-1"}, "inputs": [[3, 0, 0]]}]
json.dump({"nodes": nodes, "arg_nodes": [0, 1], "heads": [[4, 0, 0]], "attrs": {"mxnet_version": ["int", 10901]}},
          open(sys.argv[1], "w"))
EOF
have_layer=0
if [ -x "$MXNET_VENV/bin/python" ] && "$MXNET_VENV/bin/python" -c 'import mxnet' 2>/dev/null; then
  "$MXNET_VENV/bin/python" -c "import sys; sys.path.insert(0, 'bench/peers'); import mx_worker
open(sys.argv[1], 'w').write(mx_worker.transformer_symbol().tojson())" "$work/transformer_layer.json" 2>/dev/null && have_layer=1
fi

median() {  # ARGS...: run_ms of `ampfuse run ARGS...`
  "$AMPFUSE" run "$@" --no-baseline --repeat 30 --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["run_ms"])'
}

compare() {  # NAME ARGS...
  local name=$1
  shift
  local with=() without=()
  for _ in $(seq "$ROUNDS"); do
    with+=("$(median "$@")")
    without+=("$(median "$@" --no-row-kernels)")
  done
  python3 - "$name" "${with[*]}" "${without[*]}" <<'EOF'
import sys
name, w, wo = sys.argv[1], [float(v) for v in sys.argv[2].split()], [float(v) for v in sys.argv[3].split()]
print("%-44s row kernels %8.3f ms   without %8.3f ms   %.2fx" % (name, min(w), min(wo), min(wo) / min(w)))
EOF
}

compare "softmax f32 [8,128,128]" "$work/softmax.json" --shape data=8,128,128
compare "softmax f32 [8000,512]" "$work/softmax.json" --shape data=8000,512
compare "LayerNorm f32 [128,512]" "$work/layernorm.json" --shape data=128,512
compare "LayerNorm f32 [8000,512]" "$work/layernorm.json" --shape data=8000,512
compare "attention weights bf16 [8,128,128]" "$work/attention.json" --shape data=8,128,128 --shape mask=1,128,128 --amp bf16
if [ $have_layer = 1 ]; then
  compare "transformer encoder layer f32" "$work/transformer_layer.json" --shape data=1,128,512
  compare "transformer encoder layer bf16" "$work/transformer_layer.json" --shape data=1,128,512 --amp bf16
else
  echo "transformer encoder layer: skipped (no MXNet in $MXNET_VENV to build it)"
fi
sockeye=(models/sockeye_transformer-parabank2-symbol.json --shape source=1,100,3 --shape target=1,100
  --shape target_label=1,100)
compare "sockeye transformer f32" "${sockeye[@]}"
compare "sockeye transformer bf16 (Embedding f32)" "${sockeye[@]}" --amp bf16 --fp32-ops Embedding
