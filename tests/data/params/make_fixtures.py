"""Writes the .params fixtures of tests/mxnet_params_test.cpp with MXNet 1.9.1 (README.md here).

Run from this directory:  MXNET_SUBGRAPH_BACKEND=NONE /work/venv-mx/bin/python make_fixtures.py
Every file is either written by mx.nd.save or, for the versions MXNet 1.9.1 no longer writes,
packed by hand from the format and then loaded by mx.nd.load to prove that MXNet reads it.
Beside each fixture, expected/<fixture>.<k>.npy holds what mx.nd.load returns for its array k
(bfloat16 widened to float32, which is exact).
"""
import os
import struct

import mxnet as mx
import numpy as np

BF16 = np.dtype([('bfloat16', np.uint16)])
os.makedirs('expected', exist_ok=True)
for f in os.listdir('expected'):
    os.remove(os.path.join('expected', f))


def record(name, np_shape=False):
    """Loads `name` with MXNet and writes what it holds as expected/<name>.<k>.npy."""
    with mx.util.np_shape(np_shape):
        loaded = mx.nd.load(name)
    arrays = list(loaded.values()) if isinstance(loaded, dict) else loaded
    for k, a in enumerate(arrays):
        v = a.astype('float32') if a.dtype == BF16 else a
        np.save(f'expected/{name}.{k}.npy', v.asnumpy())
    print(name, os.path.getsize(name), 'bytes:', {k: (a.shape, str(a.dtype)) for k, a in
          (loaded.items() if isinstance(loaded, dict) else enumerate(loaded))})


# A model's parameters as HybridBlock.export names them (a dict: a named list).
w = mx.nd.array(np.arange(6, dtype=np.float32).reshape(2, 3) / 4 - 0.5)
mx.nd.save('named.params', {'arg:fc_weight': w, 'arg:fc_bias': mx.nd.array([0.25, -1.0]),
                            'aux:bn_moving_var': mx.nd.array([1.5, 0.5, 2.0])})
record('named.params')

# mx.nd.save of a list: an unnamed list.
mx.nd.save('unnamed.params', [w, mx.nd.array([[7.0]])])
record('unnamed.params')

# Every dtype MXNet 1.9.1 saves, with edge values each type holds.
f = np.array([1.0, -2.5, 0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, 3.0e38], dtype=np.float32)
arrays = {
    'float32': mx.nd.array(f, dtype='float32'),
    'float16': mx.nd.array(np.array([1.0, -2.5, -0.0, 65504.0, np.inf, np.nan, 6.0e-8], np.float16), dtype='float16'),
    'float64': mx.nd.array(np.array([1.0, -1e300, 5e-324, np.nan]), dtype='float64'),
    'uint8': mx.nd.array(np.array([0, 1, 128, 255]), dtype='uint8'),
    'int8': mx.nd.array(np.array([0, -1, 127, -128]), dtype='int8'),
    'int32': mx.nd.array(np.array([0, -1, 2**31 - 1, -2**31], np.int64), dtype='int32'),
    'int64': mx.nd.array(np.array([0, -1, 2**62, -2**63], np.int64), dtype='int64'),
    'bool': mx.nd.array(np.array([[True, False], [False, True]]), dtype='bool'),
    # MXNet's bfloat16: amp_cast rounds f32 to bf16 (flushing the subnormal 1e-40 to 0).
    'bfloat16': mx.nd.amp_cast(mx.nd.array(f.reshape(3, 3)), dtype=BF16),
}
assert arrays['bfloat16'].dtype == BF16
mx.nd.save('dtypes.params', arrays)
record('dtypes.params')

# numpy shape semantics: MXNet writes version 3 (0xF993FACA); 0-d and zero-size arrays exist only here.
with mx.util.np_shape(True):
    mx.nd.save('np_shape.params', {'scalar': mx.nd.array(np.float32(2.5).reshape(())),
                                   'empty': mx.nd.zeros((0, 3)), 'vector': mx.nd.array([1.0, 2.0])})
record('np_shape.params', np_shape=True)


# Versions MXNet 1.9.1 reads but no longer writes, packed by hand: the list header
# (uint64 0x112, uint64 0, uint64 count, arrays, uint64 count, names as uint64 length + bytes).
def list_file(arrays, names):
    out = struct.pack('<QQQ', 0x112, 0, len(arrays)) + b''.join(arrays)
    out += struct.pack('<Q', len(names)) + b''.join(struct.pack('<Q', len(n)) + n.encode() for n in names)
    return out


def array_body(a, type_flag):  # context (dev_type 1 = cpu, dev_id 0), type flag, data
    return struct.pack('<iii', 1, 0, type_flag) + np.ascontiguousarray(a).tobytes()


a = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
b = np.array([3, -4], dtype=np.int32)
# Version 1 (magic 0xF993FAC8): uint32 rank, int64 extents, no storage type.
v1 = [struct.pack('<II', 0xF993FAC8, x.ndim) + struct.pack(f'<{x.ndim}q', *x.shape) + array_body(x, t)
      for x, t in ((a, 0), (b, 4))]
open('legacy_v1.params', 'wb').write(list_file(v1, ['arg:a', 'arg:b']))
record('legacy_v1.params')
# Before version 1 (no magic): uint32 rank, uint32 extents.
v0 = [struct.pack('<I', x.ndim) + struct.pack(f'<{x.ndim}I', *x.shape) + array_body(x, t)
      for x, t in ((a, 0), (b, 4))]
open('legacy_v0.params', 'wb').write(list_file(v0, ['arg:a', 'arg:b']))
record('legacy_v0.params')


# A small Gluon model as HybridBlock.export writes it (mlp-symbol.json, mlp-0000.params with
# arg: and aux: names), an input and MXNet's output for it (inference mode).
from mxnet.gluon import nn  # noqa: E402

mx.random.seed(7)
rng = np.random.RandomState(7)
net = nn.HybridSequential()
net.add(nn.Dense(8, in_units=5), nn.BatchNorm(in_channels=8), nn.Activation('relu'), nn.Dense(4, in_units=8))
net.initialize(mx.init.Xavier())
bn = net[1]
bn.running_mean.set_data(mx.nd.array(rng.uniform(-0.5, 0.5, 8)))
bn.running_var.set_data(mx.nd.array(rng.uniform(0.5, 1.5, 8)))
bn.gamma.set_data(mx.nd.array(rng.uniform(0.5, 1.5, 8)))
bn.beta.set_data(mx.nd.array(rng.uniform(-0.5, 0.5, 8)))
net.hybridize()
x = mx.nd.array(rng.uniform(-1, 1, (3, 5)))
y = net(x)
net.export('mlp')
np.save('mlp_input.npy', x.asnumpy())
np.save('mlp_output.npy', y.asnumpy())
print('mlp:', sorted(mx.nd.load('mlp-0000.params')), y.shape)
