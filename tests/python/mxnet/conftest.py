"""Shared helpers of the MXNet backend tests: seeded random weights, the reference run
(MXNet alone, MXNET_SUBGRAPH_BACKEND=NONE so that MXNet's own oneDNN fusion stays out) and
the relative error the tests bound."""

import os
import sys

import numpy as np
import pytest

os.environ.setdefault("MXNET_SUBGRAPH_BACKEND", "NONE")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mxnet as mx  # noqa: E402

import ampfuse.mxnet  # noqa: E402,F401  (loads the backend; the tests need it)


def initialize(net, seed=0):
    """Random weights, the same for every call with the same seed: normal ones for
    weights and biases, positive variances, so that deep nets neither explode nor die."""
    mx.random.seed(seed)
    np.random.seed(seed)
    # He initialisation (fan-in only): with Xavier's average of fan-in and fan-out, depthwise
    # convolutions (fan-in 9, fan-out 9C) shrink the signal 30x per block of MobileNetV3.
    net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2.0), force_reinit=True)
    for name, p in net.collect_params().items():
        if p.shape is None or 0 in p.shape:
            continue
        if name.endswith("running_var") or name.endswith("moving_var"):
            p.set_data(mx.nd.array(np.random.uniform(0.5, 1.5, p.shape)))
        elif name.endswith("running_mean") or name.endswith("moving_mean") or name.endswith("bias") or name.endswith("beta"):
            p.set_data(mx.nd.array(np.random.uniform(-0.1, 0.1, p.shape)))
        elif name.endswith("gamma"):
            p.set_data(mx.nd.array(np.random.uniform(0.8, 1.2, p.shape)))


def outputs(result):
    """A block's result as a flat list of numpy arrays."""
    if isinstance(result, (list, tuple)):
        return [a for r in result for a in outputs(r)]
    return [result.asnumpy()]


def relative_error(got, want):
    """max |got - want| / max |want| over each output pair, the largest."""
    worst = 0.0
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape, (g.shape, w.shape)
        scale = max(float(np.abs(w.astype(np.float64)).max()), 1e-30)
        worst = max(worst, float(np.abs(g.astype(np.float64) - w.astype(np.float64)).max()) / scale)
    return worst


def ampfuse_subgraphs(net):
    """How many _ampfuse_subgraph nodes the block's partitioned graph holds."""
    assert net._cached_graph, "the block has not been partitioned (no forward or optimize_for yet)"
    return net._cached_graph[1].tojson().count('"op": "_ampfuse_subgraph"')


@pytest.fixture(autouse=True)
def _no_amp_env(monkeypatch):
    monkeypatch.delenv("MXNET_AMP_FUSE", raising=False)
    monkeypatch.delenv("AMPFUSE_AMP_DTYPE", raising=False)
