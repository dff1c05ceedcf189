#!/usr/bin/env python3
"""Writes mxnet_cases.json: _contrib_SyncBatchNorm at inference as MXNet 1.9.1 computes it.

Inputs from integer formulas that C++ computes to the same f32 bits (see the test):
data[i] = ((i * 37) % 101 - 50) / 7, gamma[c] = (c % 5 + 1) / 4, beta[c] = (c % 7 - 3) / 8,
mean[c] = (c % 11 - 5) / 3, var[c] = (c % 13 + 1) / 9. Run with mxnet==1.9.1:
    MXNET_SUBGRAPH_BACKEND=NONE python make_cases.py > mxnet_cases.json
"""
import json

import mxnet as mx
import numpy as np

f = np.float32


def fill(n, fn):
    return np.array([fn(i) for i in range(n)], dtype=f)


out = []
for shape, fix_gamma, eps in [((2, 3, 4, 5), True, 1e-3), ((2, 16, 3, 3), False, 1e-3), ((3, 7, 5), False, 1e-5)]:
    n, c = int(np.prod(shape)), shape[1]
    data = fill(n, lambda i: f((i * 37) % 101 - 50) / f(7)).reshape(shape)
    gamma = fill(c, lambda i: f(i % 5 + 1) / f(4))
    beta = fill(c, lambda i: f(i % 7 - 3) / f(8))
    mean = fill(c, lambda i: f(i % 11 - 5) / f(3))
    var = fill(c, lambda i: f(i % 13 + 1) / f(9))
    y = mx.nd.contrib.SyncBatchNorm(*[mx.nd.array(t) for t in (data, gamma, beta, mean, var)], key="k",
                                    eps=eps, fix_gamma=fix_gamma).asnumpy()
    out.append({"shape": list(shape), "fix_gamma": fix_gamma, "eps": eps, "out": [float(v) for v in y.ravel()]})
print(json.dumps(out))
