"""Runs every graph `ampfuse convert` writes for the shared models in the real MXNet 1.9.1.

An on-demand check (`make test` does not run it: it needs an MXNet 1.9.1 Python):

    MXNET_SUBGRAPH_BACKEND=NONE /work/venv-mx/bin/python tests/mxnet/check_convert_loads.py \
        [--ampfuse build/ampfuse] [--models models] [MODEL_KEY...]

For each model and each target (bf16, fp16) it
  1. converts the model with `ampfuse convert` (default lists, no offline casting);
  2. loads the written JSON with mx.sym.load, binds it on the CPU (MXNet's shape and type
     inference) and runs a forward pass with random weights; the outputs must be finite and
     have the f32 model's shapes. MXNet 1.9.1's CPU build has no fp16 FullyConnected (it
     is cuDNN only): where MXNet's own conversion cannot run forward either, that is
     reported and not counted as a failure;
  3. converts the same model with MXNet's own mx.contrib.amp.convert_symbol
     (cast_optional_params=False), counts its amp_cast nodes (JSON saved with
     remove_amp_cast=False) and compares, op node by op node, which ops run in f32.
It prints one line per model and target and exits 1 if any graph fails to load or run or
differs from MXNet's conversion in a node's precision. Cast counts are reported; lstm_ptb's
fp16 count differs by one on purpose (see tests/amp_mxnet_counts_test.cpp).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings

os.environ.setdefault("MXNET_SUBGRAPH_BACKEND", "NONE")
warnings.filterwarnings("ignore")
import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet.contrib import amp  # noqa: E402

# The shared models MXNet can run (the INT8 graphs need MKLDNN's quantized subgraphs, the
# transformer a Custom op written in Python), with the input shapes of models/SOURCES.md.
MODELS = {
    "resnet152": ("resnet152-mxnet-symbolic-symbol.json", {"data": (1, 3, 224, 224)}),
    "cifar_resnet20_v2": ("cifar_resnet20_v2-gluoncv-symbol.json", {"data": (1, 3, 32, 32)}),
    "squeezenet_v1.1": ("squeezenet_v1.1-mms-legacy-symbol.json", {"data": (1, 3, 224, 224)}),
    "vgg_small": ("vgg_small-mkldnn-test-symbol.json", {"data": (1, 3, 224, 224)}),
    "mlp_legacy": ("mlp_legacy_000800-test-symbol.json", {"data": (4, 32)}),
    "densenet169": ("densenet169-imagenet-legacy-symbol.json", {"data": (1, 3, 224, 224)}),
    "lstm_ptb": ("lstm_ptb_fusedrnn-mms-symbol.json", {"data": (35, 1), "softmax_label": (35,)}),
}
TARGETS = (("bf16", "bfloat16"), ("fp16", "float16"))
# Inputs that hold indices rather than values: random integers below this bound.
INDEX_INPUTS = {"lstm_ptb": {"data": 10000, "softmax_label": 10000}}


def amp_casts(sym):
    return sum(n["op"] == "amp_cast" for n in json.loads(sym.tojson(remove_amp_cast=False))["nodes"])


def f32_op_nodes(sym, shapes):
    """Op nodes (casts aside) whose first output is f32, with f32 inputs."""
    internals = sym.get_internals()
    _, types, _ = internals.infer_type_partial(**{k: "float32" for k in shapes})
    by_output = dict(zip(internals.list_outputs(), types))
    out = set()
    for n in json.loads(sym.tojson(remove_amp_cast=False))["nodes"]:
        if n["op"] in ("null", "amp_cast", "amp_multicast"):
            continue
        t = by_output.get(n["name"] + "_output", by_output.get(n["name"] + "_output0"))
        if t is not None and np.dtype(t) == np.float32:
            out.add(n["name"])
    return out


def bind(sym, shapes):
    """Loads into an executor (shape and type inference, memory): what "MXNet loads it" means."""
    return sym.simple_bind(mx.cpu(), grad_req="null", **shapes)


def run_forward(exe, index_bounds, seed=0):
    rng = np.random.default_rng(seed)
    for name, arr in list(exe.arg_dict.items()) + list(exe.aux_dict.items()):
        if name in index_bounds:
            values = rng.integers(0, index_bounds[name], arr.shape)
        elif name.endswith("moving_var") or name.endswith("gamma"):
            values = rng.uniform(0.5, 1.5, arr.shape)
        else:
            values = rng.uniform(-0.1, 0.1, arr.shape)
        arr[:] = mx.nd.array(values, dtype="float32").astype(arr.dtype)
    outputs = exe.forward(is_train=False)
    return [o.astype("float32").asnumpy() for o in outputs]


def first_line(error):
    lines = [l for l in str(error).strip().splitlines() if "MXNetError" in l or "Error" in l]
    return (lines[-1] if lines else str(error).strip().splitlines()[-1])[:200]


def check(key, args, workdir):
    file, shapes = MODELS[key]
    index_bounds = INDEX_INPUTS.get(key, {})
    path = os.path.join(args.models, file)
    original = mx.sym.load(path)
    want_shapes = [o.shape for o in run_forward(bind(original, shapes), index_bounds)]
    ok = True
    for short, mx_name in TARGETS:
        out = os.path.join(workdir, "%s-%s.json" % (key, short))
        cmd = [args.ampfuse, "convert", path, "--amp", short, "-o", out]
        for name, shape in shapes.items():
            cmd += ["--shape", "%s=%s" % (name, ",".join(map(str, shape)))]
        r = subprocess.run(cmd, capture_output=True, text=True)
        line = "%-18s %s " % (key, short)
        if r.returncode != 0:
            print(line + " FAIL ampfuse convert: " + r.stderr.strip())
            ok = False
            continue
        reference = amp.convert_symbol(original, target_dtype=mx_name, cast_optional_params=False)
        try:
            converted = mx.sym.load(out)
            exe = bind(converted, shapes)
        except mx.base.MXNetError as e:
            print(line + " FAIL: MXNet does not load it: " + first_line(e))
            ok = False
            continue
        try:
            outputs = run_forward(exe, index_bounds)
            finite = all(np.isfinite(o).all() for o in outputs)
            shapes_ok = [o.shape for o in outputs] == want_shapes
            ran = "runs ok" if finite and shapes_ok else "runs, BAD OUTPUT"
            ok = ok and finite and shapes_ok
        except mx.base.MXNetError as e:
            # The CPU build of MXNet 1.9.1 has no fp16 FullyConnected (cuDNN only): a graph
            # fails here exactly when MXNet's own conversion of it does.
            try:
                run_forward(bind(reference, shapes), index_bounds)
                ran = "FAIL: does not run (MXNet's own conversion does): " + first_line(e)
                ok = False
            except mx.base.MXNetError as own:
                ran = "no forward on this MXNet, nor of MXNet's own conversion (%s)" % first_line(own)
        ours, theirs = f32_op_nodes(converted, shapes), f32_op_nodes(reference, shapes)
        same_precision = ours == theirs
        line += " loads, %s; amp_cast %d (MXNet %d); f32 op nodes %s" % (
            ran, amp_casts(converted), amp_casts(reference),
            "as MXNet's" if same_precision else
            "DIFFER: ampfuse only %s, MXNet only %s" % (sorted(ours - theirs), sorted(theirs - ours)))
        print(line)
        ok = ok and same_precision
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ampfuse", default="build/ampfuse", help="the ampfuse program")
    parser.add_argument("--models", default="models", help="the directory of the shared models")
    parser.add_argument("keys", nargs="*", help="models to check (default: all): " + ", ".join(MODELS))
    args = parser.parse_args()
    print("MXNet %s" % mx.__version__)
    ok = True
    with tempfile.TemporaryDirectory() as workdir:
        for key in args.keys or MODELS:
            ok = check(key, args, workdir) and ok
    print("every converted graph loads in MXNet and runs wherever MXNet's own conversion does; "
          "precisions as MXNet's" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
