"""MXNet's outputs of an exported model (symbol + .params), run from the symbol.

tests/zoo/zoo.py runs it in a child process for the references the export does not record
(docs/model_zoo.md, "How outputs are compared"):

  --native     MXNet's own reference CPU kernels instead of oneDNN (MXNET_MKLDNN_ENABLED=0,
               which must be set before MXNet is imported). They add in another order than
               oneDNN: how far the two runs are apart is how far f32 rounding alone moves
               this model's output at this input.
  --bf16       MXNet's bf16 AMP of the symbol (contrib.amp.convert_model, default lists).
  --zero-negative-rois
               every `_contrib_ROIAlign` output block of a region whose batch index is
               negative multiplied by 0 in the graph. MXNet 1.9.1 leaves those blocks
               unwritten (docs/ops.md, `_contrib_ROIAlign`), so its outputs of a model whose
               regions include such padding (GluonCV's R-CNNs give each FPN level the other
               levels' regions as -1 rows) depend on what the memory held. GluonCV means
               zeros there, which ampfuse computes.

Usage: python mxnet_symbol.py MODEL_DIR OUT_NAME [--native] [--bf16] [--zero-negative-rois]
(writes MODEL_DIR/OUT_NAME/<k>.npy, whole or not at all)
"""
import json
import os
import sys

if "--native" in sys.argv:
    os.environ["MXNET_MKLDNN_ENABLED"] = "0"
os.environ["MXNET_SUBGRAPH_BACKEND"] = "NONE"
os.environ.setdefault("MXNET_STORAGE_FALLBACK_LOG_VERBOSE", "0")
os.environ.setdefault("MXNET_ENGINE_TYPE", "NaiveEngine")

import numpy as np  # noqa: E402


def zero_negative_rois(graph):
    """The symbol JSON with each _contrib_ROIAlign's output multiplied by
    (region batch index >= 0), broadcast over its (C, PH, PW) block."""
    nodes, new_index = [], {}
    for i, node in enumerate(graph["nodes"]):
        node = dict(node, inputs=[[new_index[a], b, c] for a, b, c in node["inputs"]])
        nodes.append(node)
        new_index[i] = len(nodes) - 1
        if node["op"] != "_contrib_ROIAlign":
            continue
        pooled, name = len(nodes) - 1, node["name"]

        def add(op, suffix, attrs, inputs):
            nodes.append({"op": op, "name": f"{name}_{suffix}", "attrs": attrs, "inputs": inputs})
            return [len(nodes) - 1, 0, 0]

        index = add("slice_axis", "batch_index", {"axis": "1", "begin": "0", "end": "1"}, [node["inputs"][1]])
        valid = add("_greater_equal_scalar", "valid", {"scalar": "0"}, [index])
        valid = add("Reshape", "valid_block", {"shape": "(-1, 1, 1, 1)"}, [valid])
        new_index[i] = add("broadcast_mul", "zeroed", {}, [[pooled, 0, 0], valid])[0]
    return {"nodes": nodes, "arg_nodes": [new_index[a] for a in graph["arg_nodes"]],
            "heads": [[new_index[a], b, c] for a, b, c in graph["heads"]], "attrs": graph.get("attrs", {})}


def main():
    import mxnet as mx
    model_dir, out_name = sys.argv[1], sys.argv[2]
    with open(os.path.join(model_dir, "model-symbol.json")) as f:
        graph = json.load(f)
    if "--zero-negative-rois" in sys.argv:
        graph = zero_negative_rois(graph)
    sym = mx.sym.load_json(json.dumps(graph))
    params = mx.nd.load(os.path.join(model_dir, "model-0000.params"))
    args = {k[4:]: v for k, v in params.items() if k.startswith("arg:")}
    aux = {k[4:]: v for k, v in params.items() if k.startswith("aux:")}
    if "--bf16" in sys.argv:
        from mxnet.contrib import amp
        sym, args, aux = amp.convert_model(sym, args, aux, target_dtype="bfloat16", cast_optional_params=False)
    args["data"] = mx.nd.array(np.load(os.path.join(model_dir, "input", "data.npy")))
    outs = sym.bind(mx.cpu(), args, aux_states=aux, grad_req="null").forward(is_train=False)
    out_dir = os.path.join(model_dir, out_name)
    os.makedirs(out_dir + ".tmp", exist_ok=True)
    for k, o in enumerate(outs):
        # Floats as f32 (a bf16 output too, converted by MXNet: NumPy has no bf16).
        a = o.asnumpy() if np.issubdtype(np.dtype(o.dtype), np.integer) else o.astype("float32").asnumpy()
        np.save(os.path.join(out_dir + ".tmp", f"{k}.npy"), a)
    os.replace(out_dir + ".tmp", out_dir)  # complete or absent


if __name__ == "__main__":
    main()
