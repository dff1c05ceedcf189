#!/usr/bin/env python3
"""MXNet 1.9.1 with and without the ampfuse backend (bench/README.md, "MXNet backend").

For each model and batch size, in one process: MXNet alone in f32, MXNet's own bf16 AMP
(amp.convert_hybrid_block), and MXNet with the ampfuse backend in f32 and in bf16 AMP. Random
weights; the median of --repeat timed forward passes after --warmup untimed ones, each pass
ending in wait_to_read, the four configurations timed in turns (round robin). MXNet runs with its default subgraph backend (its oneDNN fusion)
unless MXNET_SUBGRAPH_BACKEND says otherwise.

With --train, a training step instead (bench/README.md, "Training through the MXNet
backend"): forward under autograd.record(), softmax cross-entropy, backward and an SGD
step with momentum, ending when all of it is done (mx.nd.waitall); MXNet alone in f32 against the
ampfuse backend in f32 and bf16 AMP (default model cifar_resnet20_v2, batch 32).

Usage: PYTHONPATH=python AMPFUSE_MXNET_LIBRARY=build/python/ampfuse/libampfuse_mxnet.so \\
       python bench/mxnet_backend_bench.py [--models resnet50_v1b,...] [--batches 1,32] [--train]
"""

import argparse
import os
import statistics
import sys
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from mxnet.contrib import amp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python", "mxnet"))
import ampfuse.mxnet  # noqa: E402,F401


def make(name):
    if name == "bert_encoder":
        from bert_encoder import BertEncoder
        return BertEncoder()
    if name == "gluonnlp_bert":
        from bert_encoder import gluonnlp_bert
        return gluonnlp_bert()
    import gluoncv
    return gluoncv.model_zoo.get_model(name, pretrained=False)


def inputs(name, batch):
    rng = np.random.RandomState(0)
    if name.startswith("cifar_"):
        return [mx.nd.array(rng.uniform(-1, 1, (batch, 3, 32, 32)))]
    if name in ("bert_encoder", "gluonnlp_bert"):
        return [mx.nd.array(rng.randint(0, 1000, (batch, 32))), mx.nd.array(rng.randint(0, 2, (batch, 32))),
                mx.nd.array(rng.randint(16, 33, (batch,)))]
    return [mx.nd.array(rng.uniform(-1, 1, (batch, 3, 224, 224)))]


def build(name, mode, x):
    net = make(name)
    mx.random.seed(0)
    net.initialize(mx.init.Xavier())
    if mode == "mxnet f32":
        net.hybridize(static_alloc=True, static_shape=True)
    elif mode == "mxnet bf16 amp":
        net.hybridize()
        net(*x)  # shapes for the deferred init
        net = amp.convert_hybrid_block(net, target_dtype="bfloat16", ctx=mx.cpu())
        net.hybridize(static_alloc=True, static_shape=True)
    elif mode == "ampfuse f32":
        net.optimize_for(*x, backend="ampfuse", amp="off", static_alloc=True, static_shape=True)
    elif mode == "ampfuse bf16 amp":
        net.optimize_for(*x, backend="ampfuse", amp="bf16", static_alloc=True, static_shape=True)
    return net


def wait(out):
    for o in (out if isinstance(out, (list, tuple)) else [out]):
        o.wait_to_read()


def time_round_robin(nets, x, warmup, repeat):
    """Median seconds per call of each net, timed in rounds (one call of each net a round),
    so that a change in the machine's load hits every column alike."""
    for net in nets.values():
        for _ in range(warmup):  # the first call compiles
            wait(net(*x))
    times = {mode: [] for mode in nets}
    for _ in range(repeat):
        for mode, net in nets.items():
            t = time.perf_counter()
            wait(net(*x))
            times[mode].append(time.perf_counter() - t)
    return {mode: statistics.median(ts) for mode, ts in times.items()}


MODES = ["mxnet f32", "mxnet bf16 amp", "ampfuse f32", "ampfuse bf16 amp"]
TRAIN_MODES = ["mxnet f32", "ampfuse f32", "ampfuse bf16 amp"]


class TrainingStep:
    """One call: a forward under autograd.record(), the loss, backward and an SGD step."""

    def __init__(self, net, batch):
        self.net = net
        self.labels = mx.nd.array(np.random.RandomState(1).randint(0, 10, (batch,)))
        self.loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        self.trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01, "momentum": 0.9})
        self.batch = batch

    def __call__(self, *x):
        with autograd.record():
            loss = self.loss_fn(self.net(*x), self.labels)
        loss.backward()
        self.trainer.step(self.batch)
        # The optimizer's updates are asynchronous and the loss does not wait for them: without
        # this they would run on into the next configuration's timed step (MXNet f32's did,
        # adding 20-35 ms to the ampfuse step timed after it and taking them off its own).
        mx.nd.waitall()
        return loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet50_v1b,mobilenetv3_large,gluonnlp_bert,bert_encoder")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--train", action="store_true", help="time training steps (default model cifar_resnet20_v2, batch 32)")
    args = ap.parse_args()
    if args.train and args.models == ap.get_default("models"):
        args.models = "cifar_resnet20_v2"
    if args.train and args.batches == ap.get_default("batches"):
        args.batches = "32"
    modes = TRAIN_MODES if args.train else MODES
    cpu = "unknown CPU"
    if os.path.exists("/proc/cpuinfo"):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    print("# MXNet %s, %s, %d cores, OMP_NUM_THREADS=%s, MXNET_SUBGRAPH_BACKEND=%s" % (
        mx.__version__, cpu, os.cpu_count(), os.environ.get("OMP_NUM_THREADS", "unset"),
        os.environ.get("MXNET_SUBGRAPH_BACKEND", "unset (MKLDNN)")))
    print("| model | batch | " + " | ".join(modes) + " |" + (" (training step)" if args.train else ""))
    print("|---|---|" + "---|" * len(modes))
    for name in args.models.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            x = inputs(name, batch)
            nets, cells = {}, {}
            for mode in modes:
                try:
                    net = build(name, mode, x)
                    nets[mode] = TrainingStep(net, batch) if args.train else net
                except Exception as e:  # a column that fails says so; the table goes on
                    cells[mode] = "error: %s" % str(e).split("\n")[0][:60]
            for mode, median in time_round_robin(nets, x, args.warmup, args.repeat).items():
                cells[mode] = "%.1f ms" % (median * 1e3)
            cells = [cells[mode] for mode in modes]
            print("| %s | %d | %s |" % (name, batch, " | ".join(cells)), flush=True)


if __name__ == "__main__":
    main()
