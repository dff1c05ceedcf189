#!/usr/bin/env python3
"""Writes tests/data/index_ops/upsampling_bilinear.json: what real MXNet 1.9.1 computes for
UpSampling with sample_type='bilinear' (a depthwise Deconvolution by its weight input) on
small inputs: the output, and the gradients of data and weight for a given head gradient.
Each case has the symbol JSON MXNet writes for it, which tests/index_ops_test.cpp imports.
MXNet runs that Deconvolution through im2col and GEMM, so ampfuse's sums may differ in the
last bits: the test compares with a tolerance.

Run with MXNet 1.9.1:  MXNET_SUBGRAPH_BACKEND=NONE python scripts/upsampling_bilinear_cases.py
"""
import json
import os

import mxnet as mx
import numpy as np

OUT = os.path.join(os.path.dirname(__file__), '..', 'tests', 'data', 'index_ops', 'upsampling_bilinear.json')


def desc(x):
    return {'dtype': str(np.dtype(x.dtype)), 'shape': list(x.shape),
            'values': [float(v) for v in x.asnumpy().astype('float64').ravel()]}


cases = []


def case(name, scale, shape, weight='bilinear', seed=0):
    """`weight`: 'bilinear' (MXNet's Bilinear initializer, the usual fixed upsampling kernel)
    or 'learned' (random values, as after training)."""
    rng = np.random.RandomState(seed)
    channels = shape[1]
    kernel = 2 * scale - scale % 2
    data = mx.nd.array(rng.uniform(-1, 1, shape).astype('float32'))
    if weight == 'bilinear':
        w = mx.nd.zeros((channels, 1, kernel, kernel))
        mx.init.Bilinear()._init_weight(None, w)
    else:
        w = mx.nd.array(rng.uniform(-1, 1, (channels, 1, kernel, kernel)).astype('float32'))
    sym = mx.sym.UpSampling(mx.sym.var('data'), scale=scale, sample_type='bilinear', num_filter=channels, name='up')
    args = {'data': data, 'up_weight': w}
    grads = {k: mx.nd.zeros(v.shape) for k, v in args.items()}
    ex = sym.bind(mx.cpu(), args, args_grad=grads)
    out = ex.forward(is_train=True)[0]
    head = mx.nd.array(rng.uniform(-1, 1, out.shape).astype('float32'))
    ex.backward(head)
    cases.append({'name': name, 'scale': scale, 'symbol': sym.tojson(), 'data': desc(data), 'weight': desc(w),
                  'output': desc(out), 'head_grad': desc(head), 'data_grad': desc(grads['data']),
                  'weight_grad': desc(grads['up_weight'])})


case('scale2_bilinear_3_channels', 2, (1, 3, 3, 4))
case('scale3_bilinear_2_channels', 3, (2, 2, 2, 3), seed=1)
case('scale2_learned_4_channels', 2, (1, 4, 3, 3), weight='learned', seed=2)
case('scale3_learned_3_channels', 3, (1, 3, 2, 2), weight='learned', seed=3)
case('scale4_bilinear_1_channel', 4, (1, 1, 2, 3), seed=4)

with open(OUT, 'w') as f:
    json.dump({'generator': 'scripts/upsampling_bilinear_cases.py', 'mxnet': mx.__version__, 'cases': cases}, f,
              indent=None, separators=(',', ':'))
    f.write('\n')
print(len(cases), 'cases ->', os.path.normpath(OUT))
