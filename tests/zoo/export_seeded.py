#!/usr/bin/env python3
"""Exports a GluonCV architecture into tests/data/zoo/NAME for the CI test with weights drawn
by a seeded rule that tests/zoo_models_test.cpp draws again, so that the fixture commits only
the symbol, the input, MXNet's outputs and the parameters no rule draws (a detector's anchor
constants), not the weights themselves (ssd_300_mobilenet0.25_voc has 15 MB of them).

The rule (weights.json, "rule": "splitmix64-uniform-1"), per parameter NAME with n elements:
  h = FNV-1a 64 of NAME's UTF-8 bytes; for element i (row-major):
  z = splitmix64's finalizer of h + (i + 1) * 0x9E3779B97F4A7C15 (all mod 2^64),
  k = z >> 40 (24 bits), t = float32(k - 2^23) * 2^-23 (exact, in [-1, 1)),
  value = float32(scale) * t, one f32 rounding.
scale: Xavier's (uniform, avg, magnitude 3) for weights of two or more dimensions, 0.07 for
the other drawn ones, moving means 0 and moving variances 1: export_model.RandomInit's
distributions, as the corpus draws them. Parameters Gluon does not train (grad_req 'null':
a detector's anchors) keep the values GluonCV computes, stored in constants/NAME.npy.

Writes model-symbol.json, data.npy (uniform in [-1, 1), seed 0, as export_model.py),
weights.json, constants/, mxnet_f32/<k>.npy and mxnet_bf16/<k>.npy (MXNet's bf16 AMP, when
it runs; otherwise no mxnet_bf16/ and the test compares bf16 with the f32 outputs only).

Usage (the corpus venv's Python): export_seeded.py NAME:HEIGHT:WIDTH
"""
import json
import math
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export_model  # noqa: E402  (sets MXNet's environment before MXNet is imported)

DEST = os.path.join(HERE, "..", "data", "zoo")
M64 = (1 << 64) - 1


def fnv1a64(name):
    h = 0xCBF29CE484222325
    for b in name.encode("utf-8"):
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def seeded_uniform(name, shape, scale):
    n = int(np.prod(shape)) if shape else 1
    with np.errstate(over="ignore"):
        z = np.uint64(fnv1a64(name)) + (np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    k = (z >> np.uint64(40)).astype(np.int64)
    t = (k - (1 << 23)).astype(np.float32) * np.float32(2.0 ** -23)
    return (np.float32(scale) * t).astype(np.float32).reshape(shape)


def xavier_scale(shape):
    field = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    fan_in, fan_out = shape[1] * field, shape[0] * field
    return math.sqrt(3.0 / ((fan_in + fan_out) / 2.0))


def main():
    name, h, w = sys.argv[1].rsplit(":", 2)
    h, w = int(h), int(w)
    import mxnet as mx
    dst = os.path.join(DEST, name)
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(os.path.join(dst, "constants"))
    np.random.seed(0)
    mx.random.seed(0)
    net = export_model.get_net(name)
    net.initialize(export_model.RandomInit(), force_reinit=True)
    x = mx.nd.array(np.random.uniform(-1, 1, size=(1, 3, h, w)).astype(np.float32))
    net.hybridize()
    net(x)  # finishes deferred initialization
    entries = []
    for pname, p in net.collect_params().items():
        shape = list(p.shape)
        if pname.endswith(("moving_mean", "running_mean")):
            entry, value = {"fill": 0.0}, np.zeros(shape, np.float32)
        elif pname.endswith(("moving_var", "running_var")):
            entry, value = {"fill": 1.0}, np.ones(shape, np.float32)
        elif p.grad_req == "null":
            value = p.data().asnumpy()
            entry = {"file": f"constants/{pname}.npy"}
            np.save(os.path.join(dst, entry["file"]), value)
        else:
            scale = xavier_scale(shape) if len(shape) >= 2 else 0.07
            scale = float(np.float32(scale))
            entry, value = {"scale": scale}, seeded_uniform(pname, shape, scale)
        p.set_data(mx.nd.array(value, dtype=p.dtype))
        entries.append(dict(name=p.name, shape=shape, **entry))
    outs = export_model.as_list(net(x))
    mx.nd.waitall()
    net.export(os.path.join(dst, "model"))
    os.remove(os.path.join(dst, "model-0000.params"))
    np.save(os.path.join(dst, "data.npy"), x.asnumpy())
    export_model.save_outputs(outs, os.path.join(dst, "mxnet_f32"))
    with open(os.path.join(dst, "weights.json"), "w") as f:
        head = {"rule": "splitmix64-uniform-1", "generator": "tests/zoo/export_seeded.py", "input": [1, 3, h, w],
                "mxnet": mx.__version__}
        f.write(json.dumps(head)[:-1] + ', "weights": [\n')
        f.write(",\n".join(json.dumps(e) for e in entries) + "\n]}\n")
    try:
        from mxnet.contrib import amp
        amp_net = amp.convert_hybrid_block(net, target_dtype="bfloat16", ctx=mx.cpu())
        export_model.save_outputs(export_model.as_list(amp_net(x)), os.path.join(dst, "mxnet_bf16"))
    except Exception as e:  # noqa: BLE001 (MXNet's bf16 AMP fails on some models)
        print(name, "bf16 AMP failed in MXNet:", export_model.first_line(e))
    print(name, "->", os.path.normpath(dst), [list(o.shape) for o in outs])


if __name__ == "__main__":
    main()
