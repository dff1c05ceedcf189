#!/usr/bin/env python3
"""The MXNet 1.9.1 side of the peer harness (bench/peers/run.py drives it; it runs in the
MXNet virtual environment, with its numpy < 1.24).

  prepare WORK MODELS_DIR   For each model: WORK/<model>/symbol.json, model.params (MXNet's
                            format, what `ampfuse run --params` reads), weights.npz (the same
                            arrays for torch), data.npy, and ref_f32.npy: MXNet's own output
                            with MXNET_SUBGRAPH_BACKEND=NONE, the reference of every check.
                            The Transformer encoder layer's symbol is built here.
  models WORK MODE OUT.json Times every model under MODE (f32 / bf16, see MODES) in this
                            process; MXNET_SUBGRAPH_BACKEND is set by the caller, since MXNet
                            reads it when it binds.
  kernels OUT.json          C8, C8-f32 and cast + transpose through a bound symbol, and
                            MXNet's own copy of the same bytes.
Every result is checked against the reference before it is timed.
"""

import json
import os
import sys
import time

import mxnet as mx
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MODELS, check, KERNEL_ELEMENTS, CAST_SHAPES, timed  # noqa: E402


def transformer_symbol(seq=128, d=512, heads=8, ffn=2048):
    """One post-LayerNorm Transformer encoder layer (batch 1): self-attention with 8 heads,
    residual, LayerNorm, ReLU FFN, residual, LayerNorm. Plain ops only (FullyConnected,
    Reshape, transpose, batch_dot, softmax, LayerNorm), so every peer can run it."""
    x = mx.sym.var("data")
    dh = d // heads

    def split(t, name):  # [1, seq, d] -> [heads, seq, dh]
        t = mx.sym.Reshape(t, shape=(1, seq, heads, dh), name=name + "_r")
        t = mx.sym.transpose(t, axes=(0, 2, 1, 3), name=name + "_t")
        return mx.sym.Reshape(t, shape=(heads, seq, dh), name=name + "_h")

    q = split(mx.sym.FullyConnected(x, num_hidden=d, flatten=False, name="q"), "q")
    k = split(mx.sym.FullyConnected(x, num_hidden=d, flatten=False, name="k"), "k")
    v = split(mx.sym.FullyConnected(x, num_hidden=d, flatten=False, name="v"), "v")
    s = mx.sym.batch_dot(q, k, transpose_b=True, name="scores")
    s = mx.sym._internal._mul_scalar(s, scalar=1.0 / np.sqrt(dh), name="scale")
    p = mx.sym.softmax(s, axis=-1, name="attn")
    o = mx.sym.batch_dot(p, v, name="context")
    o = mx.sym.Reshape(o, shape=(1, heads, seq, dh), name="ctx_r")
    o = mx.sym.transpose(o, axes=(0, 2, 1, 3), name="ctx_t")
    o = mx.sym.Reshape(o, shape=(1, seq, d), name="ctx_m")
    o = mx.sym.FullyConnected(o, num_hidden=d, flatten=False, name="proj")
    h = mx.sym.LayerNorm(mx.sym.elemwise_add(x, o, name="res1"), axis=-1, name="ln1")
    f = mx.sym.FullyConnected(h, num_hidden=ffn, flatten=False, name="ffn1")
    f = mx.sym.Activation(f, act_type="relu", name="ffn_relu")
    f = mx.sym.FullyConnected(f, num_hidden=d, flatten=False, name="ffn2")
    return mx.sym.LayerNorm(mx.sym.elemwise_add(h, f, name="res2"), axis=-1, name="ln2")


def random_weights(sym, shapes, rng):
    """Seeded random weights, fan-in scaled (uniform with variance 1/fan_in) so activations
    stay finite through resnet152's 50 blocks; BatchNorm statistics near 0 and 1; gamma 1
    where the graph fixes it (fix_gamma=True), so every peer reads the same value."""
    arg_shapes, _, aux_shapes = sym.infer_shape(**shapes)
    fixed = set()
    for n in json.loads(sym.tojson())["nodes"]:
        a = n.get("attrs", n.get("attr", n.get("param", {}))) or {}
        if n["op"] == "BatchNorm" and a.get("fix_gamma", "True") in ("True", "true", "1"):
            fixed.add(n["name"] + "_gamma")
    args, aux = {}, {}
    for name, shape in sorted(zip(sym.list_arguments(), arg_shapes)):
        if name in shapes or name.endswith("label"):
            continue
        if name.endswith("_weight"):
            fan_in = int(np.prod(shape[1:]))
            v = rng.uniform(-1, 1, shape) * np.sqrt(3.0 / fan_in)
        elif name.endswith("_gamma"):
            v = np.ones(shape) if name in fixed else rng.uniform(0.5, 1.5, shape)
        elif name.endswith("_bias") or name.endswith("_beta"):
            v = rng.uniform(-0.1, 0.1, shape)
        else:
            raise ValueError("no rule for a random value of argument '%s'" % name)
        args[name] = v.astype(np.float32)
    for name, shape in sorted(zip(sym.list_auxiliary_states(), aux_shapes)):
        if name.endswith(("moving_mean", "running_mean")):
            v = rng.uniform(-0.1, 0.1, shape)
        elif name.endswith(("moving_var", "running_var")):
            v = rng.uniform(0.5, 1.5, shape)
        else:
            raise ValueError("no rule for a random value of auxiliary state '%s'" % name)
        aux[name] = v.astype(np.float32)
    return args, aux


def bind(sym, args, aux, data, label_shape):
    shapes = {"data": data.shape}
    if "softmax_label" in sym.list_arguments():
        shapes["softmax_label"] = label_shape
    exe = sym.simple_bind(mx.cpu(), grad_req="null", **shapes)
    for k, v in args.items():
        exe.arg_dict[k][:] = v
    for k, v in aux.items():
        exe.aux_dict[k][:] = v
    exe.arg_dict["data"][:] = data
    return exe


def forward(exe):
    out = exe.forward(is_train=False)[0]
    out.wait_to_read()
    return out


def load_model(work, name):
    d = os.path.join(work, name)
    sym = mx.sym.load(os.path.join(d, "symbol.json"))
    saved = mx.nd.load(os.path.join(d, "model.params"))
    args = {k[4:]: v.asnumpy() for k, v in saved.items() if k.startswith("arg:")}
    aux = {k[4:]: v.asnumpy() for k, v in saved.items() if k.startswith("aux:")}
    return d, sym, args, aux, np.load(os.path.join(d, "data.npy"))


def prepare(work, models_dir):
    for name, m in MODELS.items():
        d = os.path.join(work, name)
        os.makedirs(d, exist_ok=True)
        sym = transformer_symbol() if m["file"] is None else mx.sym.load(os.path.join(models_dir, m["file"]))
        if json.loads(sym.tojson())["nodes"][-1]["op"] == "SoftmaxOutput":
            # Compare and time the logits: resnet152's softmax over 11221 classes saturates
            # (one class near 1) and hides errors a check must see; the softmax of one row is
            # a negligible part of any model here.
            sym = sym.get_children()[0]
        with open(os.path.join(d, "symbol.json"), "w") as f:
            f.write(sym.tojson())
        rng = np.random.RandomState(m["seed"])
        data = rng.uniform(-1, 1, m["shape"]).astype(np.float32)
        args, aux = random_weights(sym, {"data": m["shape"]}, rng)
        mx.nd.save(os.path.join(d, "model.params"),
                   {**{"arg:" + k: mx.nd.array(v) for k, v in args.items()},
                    **{"aux:" + k: mx.nd.array(v) for k, v in aux.items()}})
        np.savez(os.path.join(d, "weights.npz"), **args, **aux)
        np.save(os.path.join(d, "data.npy"), data)
        assert os.environ.get("MXNET_SUBGRAPH_BACKEND") == "NONE", "the reference runs unfused"
        ref = forward(bind(sym, args, aux, data, (m["shape"][0],))).asnumpy()
        if not np.all(np.isfinite(ref)):
            raise SystemExit("%s: the reference output is not finite" % name)
        np.save(os.path.join(d, "ref_f32.npy"), ref)
        print("[mx] prepared %s: %d weights, output %s, max |ref| %.3g" % (
            name, len(args) + len(aux), ref.shape, np.abs(ref).max()), flush=True)


def models(work, mode, out_path, names):
    from mxnet.contrib import amp
    res = {}
    for name in names:
        d, sym, args, aux, data = load_model(work, name)
        ref = np.load(os.path.join(d, "ref_f32.npy"))
        try:
            if mode == "bf16":
                # AMP as MXNet users run it: the symbol converted to bfloat16 (its default
                # lists: convolutions and FullyConnected in bf16, softmax/norms in f32);
                # weights stay f32 and are cast inside the graph.
                sym = amp.convert_symbol(sym, target_dtype="bfloat16")
            t = time.perf_counter()
            exe = bind(sym, args, aux, data, (data.shape[0],))
            out = forward(exe).astype("float32").asnumpy()
            first = (time.perf_counter() - t) * 1e3
            ok, err = check(out, ref, mode)
            r = {"ok": ok, "err": err, "first_ms": first}
            if ok:
                r["ms"] = timed(lambda: forward(exe))
        except Exception as e:  # a peer that cannot run a model says so in its cell
            r = {"ok": False, "error": str(e).strip().split("\n")[-1][:120]}
        res[name] = r
        print("[mx %s %s %s] %s" % (os.environ.get("MXNET_SUBGRAPH_BACKEND", "default"), mode, name, r), flush=True)
    json.dump(res, open(out_path, "w"), indent=1)


def kernels(out_path):
    res = {}
    n = KERNEL_ELEMENTS
    rng = np.random.RandomState(1)

    def memcpy_ms(nbytes):
        # float32 elements: MXNet's copyto of uint8 runs 8x slower than of float32 here
        # (an element loop, not memcpy), and a memcpy moves bytes whatever their type.
        src = mx.nd.array(rng.uniform(-1, 1, nbytes // 4).astype(np.float32))
        dst = mx.nd.zeros(nbytes // 4, dtype=np.float32)

        def run():
            src.copyto(dst)
            dst.wait_to_read()
        return timed(run)

    from mxnet.contrib.amp.amp import bfloat16  # MXNet's bf16 dtype (a numpy record type)
    for dt in ("bf16", "f32"):
        key = "c8_" + dt
        try:
            x_np = rng.uniform(-1, 1, n).astype(np.float32)
            y_np = rng.uniform(-1, 1, n).astype(np.float32)
            mdt = bfloat16 if dt == "bf16" else np.float32
            xs, ys = mx.sym.var("x"), mx.sym.var("y")
            a, b = (mx.sym.amp_cast(xs, dtype="float32"), mx.sym.amp_cast(ys, dtype="float32")) if dt == "bf16" else (xs, ys)
            g = mx.sym.relu(a * b + 0.5) * 1.5 - a
            if dt == "bf16":
                g = mx.sym.amp_cast(g, dtype=bfloat16)
            # bind with the inputs given (simple_bind's type_dict does not take bfloat16).
            args = {"x": mx.nd.array(x_np).astype(mdt), "y": mx.nd.array(y_np).astype(mdt)}
            exe = g.bind(mx.cpu(), args=args, grad_req="null")
            xf = args["x"].astype("float32").asnumpy()
            yf = args["y"].astype("float32").asnumpy()
            out = forward(exe).astype("float32").asnumpy()
            ok, err = check(out, np.maximum(xf * yf + 0.5, 0) * 1.5 - xf, dt)
            del xf, yf, out
            r = {"ok": ok, "err": err}
            if ok:
                r["ms"] = timed(lambda: forward(exe))
                r["memcpy_ms"] = memcpy_ms(n * (3 if dt == "bf16" else 6))
            del exe, args
        except Exception as e:
            r = {"ok": False, "error": str(e).strip().split("\n")[-1][:120]}
        res[key] = r
        print("[mx kernels] %s %s" % (key, r), flush=True)
    for c, shape in CAST_SHAPES.items():
        key = "cast_c%d" % c
        try:
            x = mx.sym.var("x")
            g = mx.sym.amp_cast(mx.sym.transpose(x, axes=(0, 2, 3, 1)), dtype=bfloat16)
            exe = g.simple_bind(mx.cpu(), grad_req="null", x=shape)
            x_np = rng.uniform(-1, 1, shape).astype(np.float32)
            exe.arg_dict["x"][:] = x_np
            out = forward(exe).astype("float32").asnumpy()
            ok, err = check(out, x_np.transpose(0, 2, 3, 1), "bf16")
            r = {"ok": ok, "err": err}
            if ok:
                r["ms"] = timed(lambda: forward(exe))
                r["memcpy_ms"] = memcpy_ms(int(np.prod(shape)) * 3)
        except Exception as e:
            r = {"ok": False, "error": str(e).strip().split("\n")[-1][:120]}
        res[key] = r
        print("[mx kernels] %s %s" % (key, r), flush=True)
    json.dump(res, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "prepare":
        prepare(sys.argv[2], sys.argv[3])
    elif cmd == "models":
        models(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5].split(","))
    elif cmd == "kernels":
        kernels(sys.argv[2])
    else:
        raise SystemExit("mx_worker.py: unknown command '%s'" % cmd)
