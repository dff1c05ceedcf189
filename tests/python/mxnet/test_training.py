"""Backward through ampfuse regions: autograd.record() / backward() / Trainer.step() train a
partitioned Gluon network as MXNet alone does (gradients within 1e-5 relative in f32), and a
region whose training form differs (BatchNorm, Dropout) refuses backward with a message."""

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon
from mxnet.gluon import nn

from conftest import initialize, relative_error
from test_backend import F32_TOLERANCE, mlp


def train(backend, amp="off", steps=5):
    rng = np.random.RandomState(3)
    x = mx.nd.array(rng.uniform(-1, 1, (8, 20)))
    labels = mx.nd.array(rng.randint(0, 10, (8,)))
    x.attach_grad()
    net = mlp()
    initialize(net)
    if backend:
        net.optimize_for(x, backend="ampfuse", amp=amp)
    else:
        net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    losses = []
    for _ in range(steps):
        with autograd.record():
            loss = loss_fn(net(x), labels)
        loss.backward()
        trainer.step(x.shape[0])
        losses.append(float(loss.mean().asscalar()))
    grads = [x.grad.asnumpy()] + [p.grad().asnumpy() for p in net.collect_params().values()]
    return losses, grads


def test_gradients_and_sgd_steps_match_mxnet():
    want_losses, want_grads = train(False)
    got_losses, got_grads = train(True)
    assert relative_error([np.array(got_losses)], [np.array(want_losses)]) <= F32_TOLERANCE
    for got, want in zip(got_grads, want_grads):  # the last step's, weights and the data's
        assert relative_error([got], [want]) <= 1e-4  # five steps of SGD compound rounding
    assert want_losses[-1] < want_losses[0]


def test_bf16_training_follows_f32():
    want_losses, _ = train(False)
    got_losses, _ = train(True, amp="bf16")
    assert relative_error([np.array(got_losses)], [np.array(want_losses)]) <= 5e-2
    assert got_losses[-1] < got_losses[0]


def test_backward_through_batchnorm_region_is_refused():
    net = nn.HybridSequential()
    net.add(nn.Dense(16), nn.BatchNorm(), nn.Dense(4))
    x = mx.nd.random.uniform(-1, 1, (4, 8))
    initialize(net)
    net.optimize_for(x, backend="ampfuse", amp="off")
    with pytest.raises(mx.base.MXNetError, match="backward through a region with BatchNorm or Dropout is not supported"):
        with autograd.record():
            y = net(x)
        y.backward()
        mx.nd.waitall()
