"""Exports GluonCV architectures with random weights and records MXNet's outputs.

Run by tests/zoo/zoo.py in a child process: importing GluonCV takes seconds to tens of
seconds, so one process exports a list of models; MXNet can hang or abort on a model, so
the parent watches `started` and restarts the child without that model. For each model
NAME it writes into OUT_ROOT/NAME:
  started                                 written first (the parent times the model from it)
  model-symbol.json, model-0000.params   what HybridBlock.export writes
  input/data.npy                          the input (uniform in [-1, 1), seed 0)
  ref_f32/<k>.npy                         MXNet's k-th output in f32
  ref_bf16/<k>.npy                        the same under MXNet's bf16 AMP, where MXNet runs it
  export.json                             what happened: status, shapes, timings, errors
                                          (written last; export.partial.json before bf16)

Usage: python export_model.py OUT_ROOT NAME:HEIGHT:WIDTH...
"""
import json
import os
import sys
import time
import traceback

os.environ["MXNET_SUBGRAPH_BACKEND"] = "NONE"
os.environ.setdefault("MXNET_ENGINE_TYPE", "NaiveEngine")

import numpy as np  # noqa: E402


def first_line(exc):
    text = str(exc).strip().splitlines()
    # MXNet's errors put the useful line after a C++ stack trace; keep the last short one.
    useful = [l for l in text if l.strip() and not l.lstrip().startswith(("[bt]", "Stack trace", "File "))]
    return (useful[-1] if useful else type(exc).__name__)[:300]


def as_list(out):
    if isinstance(out, (list, tuple)):
        flat = []
        for o in out:
            flat.extend(as_list(o))
        return flat
    return [out]


def save_outputs(outs, folder):
    os.makedirs(folder, exist_ok=True)
    shapes = []
    for k, o in enumerate(outs):
        a = o.asnumpy()
        if a.dtype != np.float32 and np.issubdtype(a.dtype, np.floating):
            a = a.astype(np.float32)
        np.save(os.path.join(folder, f"{k}.npy"), a)
        shapes.append(list(a.shape))
    return shapes


def get_net(name):
    from gluoncv.model_zoo import get_model
    # Detection, segmentation and pose models take a pretrained backbone by default, which
    # would download; classification models refuse the keyword.
    try:
        return get_model(name, pretrained=False, pretrained_base=False)
    except TypeError:
        return get_model(name, pretrained=False)


# Bumped when the weights an export draws change; zoo.py exports a model again when its
# export.json has an older one. 2: BatchNorm statistics as BatchNorm initializes them.
INIT_VERSION = 2


class RandomInit:
    """Xavier for weights of two or more dimensions, Gluon's uniform(0.07) otherwise.

    Some GluonCV blocks name 1-D parameters so that Xavier gets them (and refuses).
    Gluon passes this initializer as the `__init__` of every parameter without its own, so
    the moving statistics of BatchNorms built through the symbol API (SSD's feature
    expanders, the FPN of Mask/Faster R-CNN) come here too: they get what BatchNorm gives
    them (mean 0, variance 1) and what their symbol's `__init__` attribute says. A uniform
    (-0.07, 0.07) variance is negative for half the channels: sqrt(var + eps) is NaN there,
    which MXNet's oneDNN ReLU turns into 0 and its reference ReLU (and ampfuse's) keeps, so
    such a model compares two NaN conventions, not two computations (init version 1)."""

    def __new__(cls):
        import mxnet as mx

        class _Init(mx.init.Xavier):
            def _init_weight(self, name, arr):
                if name.endswith(("moving_var", "running_var")):
                    arr[:] = 1
                elif name.endswith(("moving_mean", "running_mean")):
                    arr[:] = 0
                elif len(arr.shape) < 2:
                    arr[:] = mx.nd.random.uniform(-0.07, 0.07, shape=arr.shape)
                else:
                    super()._init_weight(name, arr)

        return _Init()


def export_one(name, out_dir, h, w):
    os.makedirs(out_dir, exist_ok=True)
    open(os.path.join(out_dir, "started"), "w").close()
    info = {"name": name, "input": [1, 3, h, w], "status": "export_failed", "init": INIT_VERSION}
    t0 = time.time()

    # export.json tells the parent the model is done: written once, last. The f32 part goes
    # to export.partial.json first, which the parent keeps if the bf16 run hangs or aborts.
    def record(final=True):
        info["seconds"] = round(time.time() - t0, 1)
        path = os.path.join(out_dir, "export.json" if final else "export.partial.json")
        with open(path + ".tmp", "w") as f:
            json.dump(info, f, indent=1)
        os.replace(path + ".tmp", path)

    try:
        import mxnet as mx
        np.random.seed(0)
        mx.random.seed(0)
        net = get_net(name)
        net.initialize(RandomInit(), force_reinit=True)
        net.hybridize()
        x = mx.nd.array(np.random.uniform(-1, 1, size=(1, 3, h, w)).astype(np.float32))
        outs = as_list(net(x))
        mx.nd.waitall()
        net.export(os.path.join(out_dir, "model"))
        os.makedirs(os.path.join(out_dir, "input"), exist_ok=True)
        np.save(os.path.join(out_dir, "input", "data.npy"), x.asnumpy())
        params = mx.nd.load(os.path.join(out_dir, "model-0000.params"))
        info["outputs_f32"] = save_outputs(outs, os.path.join(out_dir, "ref_f32"))
        info["weights"] = len(params)
        info["status"] = "exported"
    except Exception as e:  # noqa: BLE001 (any failure of MXNet is a result here)
        info["error"] = first_line(e)
        info["traceback"] = traceback.format_exc()[-2000:]
        record()
        return
    record(final=False)

    # bf16 AMP as MXNet runs it: convert_hybrid_block casts the inputs of its bf16 list.
    try:
        from mxnet.contrib import amp
        amp_net = amp.convert_hybrid_block(net, target_dtype="bfloat16", ctx=mx.cpu())
        outs_bf16 = as_list(amp_net(x))
        mx.nd.waitall()
        info["outputs_bf16"] = save_outputs(outs_bf16, os.path.join(out_dir, "ref_bf16"))
        info["bf16"] = "ran"
    except Exception as e:  # noqa: BLE001
        info["bf16"] = "failed"
        info["bf16_error"] = first_line(e)
    record()


def main():
    root = sys.argv[1]
    for spec in sys.argv[2:]:
        name, h, w = spec.rsplit(":", 2)
        export_one(name, os.path.join(root, name), int(h), int(w))


if __name__ == "__main__":
    main()
