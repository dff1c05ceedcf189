#!/usr/bin/env python3
"""An unchanged Gluon script, inference then training, run through ampfuse (README, "MXNet
users").

    PYTHONPATH=python AMPFUSE_MXNET_LIBRARY=build/python/ampfuse/libampfuse_mxnet.so \\
        MXNET_AMP_FUSE=1 python examples/gluon_amp_fuse.py

The only ampfuse line is `import ampfuse.mxnet`. With MXNET_AMP_FUSE=1 the `hybridize()`
below partitions the network with the ampfuse backend and runs its regions in bf16 AMP
(AMPFUSE_AMP_DTYPE=fp16 for fp16); unset or 0, MXNet runs it alone. The script prints which
it was, how many regions ampfuse took, the output's distance from MXNet in f32, and the
losses of a few SGD steps (BatchNorm in training form inside the regions: batch statistics,
moving statistics updated).
"""

import os

import mxnet as mx
from mxnet import autograd, gluon
from mxnet.gluon import nn

import ampfuse.mxnet  # noqa: F401  (registers the backend; patches hybridize for MXNET_AMP_FUSE)


def make_net():
    net = nn.HybridSequential()
    net.add(nn.Conv2D(32, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"),
            nn.Conv2D(64, 3, strides=2, padding=1), nn.BatchNorm(), nn.Activation("relu"),
            nn.GlobalAvgPool2D(), nn.Dense(10))
    return net


mx.random.seed(0)
x = mx.nd.random.uniform(-1, 1, (8, 3, 32, 32))

net = make_net()
net.initialize(mx.init.Xavier())
net.hybridize()                               # the user's code, as it was
y = net(x)

regions = net._cached_graph[1].tojson().count('"op": "_ampfuse_subgraph"')
print("MXNET_AMP_FUSE=%s: backend %s, %d ampfuse region(s)" % (
    os.environ.get("MXNET_AMP_FUSE", "unset"), net._backend, regions))

# The same weights through MXNet alone, for comparison.
plain = make_net()
plain.initialize()
plain(x)
for p_plain, p in zip(plain.collect_params().values(), net.collect_params().values()):
    p_plain.set_data(p.data())
want = plain(x)
err = (mx.nd.abs(y - want).max() / mx.nd.abs(want).max()).asscalar()
print("largest difference from MXNet in f32, relative to the output's range: %.2e" % err)

# Training, as the user wrote it: the regions switch to the training form inside record().
labels = mx.nd.array([0, 1, 2, 3, 4, 5, 6, 7])
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
losses = []
for _ in range(3):
    with autograd.record():
        loss = loss_fn(net(x), labels)
    loss.backward()
    trainer.step(x.shape[0])
    losses.append(loss.mean().asscalar())
print("training losses: " + " ".join("%.4f" % v for v in losses))
