#!/usr/bin/env python3
"""Writes mxnet_cases.json: _contrib_AdaptiveAvgPooling2D as MXNet 1.9.1 computes it.

Input element i (row-major) is ((i * 37) % 101 - 50) / 7 in float32, which C++ computes to
the same bits. Run with a Python that has mxnet==1.9.1:
    MXNET_SUBGRAPH_BACKEND=NONE python make_cases.py > mxnet_cases.json
"""
import json

import mxnet as mx
import numpy as np

CASES = [((2, 3, 7, 5), "(3, 2)"), ((1, 2, 13, 11), "(4, 5)"), ((1, 2, 3, 4), "(5, 6)"),
         ((1, 4, 6, 6), "()"), ((1, 1, 10, 7), "3"), ((2, 1, 1, 1), "(1, 1)"), ((1, 2, 9, 9), "(9, 9)")]


def data(shape):
    n = int(np.prod(shape))
    i = np.arange(n, dtype=np.int64)
    return (((i * 37) % 101 - 50).astype(np.float32) / np.float32(7)).reshape(shape)


out = []
for shape, size in CASES:
    kw = {} if size == "()" else {"output_size": eval(size)}
    y = mx.nd.contrib.AdaptiveAvgPooling2D(mx.nd.array(data(shape)), **kw).asnumpy()
    out.append({"shape": list(shape), "output_size": size, "out_shape": list(y.shape),
                "out": [float(v) for v in y.ravel()]})
print(json.dumps(out, indent=0))
