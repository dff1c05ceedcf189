#!/usr/bin/env python3
"""Writes mxnet_cases.json: _contrib_ModulatedDeformableConvolution as MXNet 1.9.1 computes it.

Each case holds its attributes, its inputs (data, offset, mask, weight[, bias], float32
values drawn with seed 0, written exactly) and MXNet's output. The offsets reach past the
image on every side, are fractional and integral (a tap exactly at -1 or at the last row
reads nothing or one row), the masks lie in (-0.5, 1.5). Run with a Python that has
mxnet==1.9.1:
    MXNET_SUBGRAPH_BACKEND=NONE python make_cases.py > mxnet_cases.json
"""
import json

import mxnet as mx
import numpy as np

# (name, data shape, attributes); weight and bias follow from them.
CASES = [
    ("3x3 pad 1", (1, 2, 5, 6), dict(kernel=(3, 3), pad=(1, 1), num_filter=3)),
    ("stride 2 dilate 2 pad 2 no bias", (1, 3, 7, 8), dict(kernel=(3, 3), stride=(2, 2), dilate=(2, 2), pad=(2, 2),
                                                          num_filter=2, no_bias=True)),
    ("groups 2 deformable groups 2 batch 2", (2, 4, 5, 5), dict(kernel=(3, 3), pad=(1, 1), num_filter=4,
                                                               num_group=2, num_deformable_group=2)),
    ("1x2 kernel, stride (1, 2), pad (0, 1), integral offsets", (1, 2, 4, 5),
     dict(kernel=(1, 2), stride=(1, 2), pad=(0, 1), num_filter=2)),
    ("1x1 deformable groups 2", (1, 2, 3, 3), dict(kernel=(1, 1), num_filter=2, num_deformable_group=2)),
]


def out_size(n, k, s, d, p):
    return (n + 2 * p - (d * (k - 1) + 1)) // s + 1


rng = np.random.default_rng(0)
out = []
for name, shape, attrs in CASES:
    n, c, h, w = shape
    kh, kw = attrs["kernel"]
    sh, sw = attrs.get("stride", (1, 1))
    dh, dw = attrs.get("dilate", (1, 1))
    ph, pw = attrs.get("pad", (0, 0))
    dg = attrs.get("num_deformable_group", 1)
    groups = attrs.get("num_group", 1)
    oh, ow = out_size(h, kh, sh, dh, ph), out_size(w, kw, sw, dw, pw)
    data = rng.uniform(-2, 2, size=shape).astype(np.float32)
    if "integral" in name:
        offset = rng.integers(-3, 4, size=(n, 2 * dg * kh * kw, oh, ow)).astype(np.float32)
    else:
        offset = rng.uniform(-4, 4, size=(n, 2 * dg * kh * kw, oh, ow)).astype(np.float32)
    mask = rng.uniform(-0.5, 1.5, size=(n, dg * kh * kw, oh, ow)).astype(np.float32)
    weight = rng.uniform(-1, 1, size=(attrs["num_filter"], c // groups, kh, kw)).astype(np.float32)
    inputs = {"data": data, "offset": offset, "mask": mask, "weight": weight}
    args = [mx.nd.array(data), mx.nd.array(offset), mx.nd.array(mask), mx.nd.array(weight)]
    if not attrs.get("no_bias"):
        inputs["bias"] = rng.uniform(-1, 1, size=(attrs["num_filter"],)).astype(np.float32)
        args.append(mx.nd.array(inputs["bias"]))
    y = mx.nd.contrib.ModulatedDeformableConvolution(*args, **attrs).asnumpy()
    out.append({"name": name,
                "attrs": {k: str(v) for k, v in attrs.items()},
                "inputs": {k: {"shape": list(v.shape), "values": [float(x) for x in v.ravel()]} for k, v in inputs.items()},
                "out_shape": list(y.shape), "out": [float(x) for x in y.ravel()]})
print(json.dumps(out, indent=0))
