"""MXNet's f32 outputs of an exported model on its reference CPU kernels (oneDNN off).

MXNet's PyPI build runs convolutions, pooling, BatchNorm and activations on oneDNN, whose
kernels add in another order than MXNet's own reference kernels. How far the two MXNet
outputs are apart is how far f32 rounding alone moves this model's output at this input:
tests/zoo/zoo.py uses it as the yardstick of an f32 comparison that the plain tolerance
fails (docs/model_zoo.md, "How outputs are compared").

Usage: python mxnet_native.py MODEL_DIR   (writes MODEL_DIR/ref_f32_native/<k>.npy)
"""
import os
import sys

# Before MXNet is imported: the reference kernels, and no subgraph fusion.
os.environ["MXNET_MKLDNN_ENABLED"] = "0"
os.environ["MXNET_SUBGRAPH_BACKEND"] = "NONE"
os.environ.setdefault("MXNET_STORAGE_FALLBACK_LOG_VERBOSE", "0")
os.environ.setdefault("MXNET_ENGINE_TYPE", "NaiveEngine")

import numpy as np  # noqa: E402


def main():
    import mxnet as mx
    d = sys.argv[1]
    sym = mx.sym.load(os.path.join(d, "model-symbol.json"))
    params = mx.nd.load(os.path.join(d, "model-0000.params"))
    args = {k[4:]: v for k, v in params.items() if k.startswith("arg:")}
    aux = {k[4:]: v for k, v in params.items() if k.startswith("aux:")}
    args["data"] = mx.nd.array(np.load(os.path.join(d, "input", "data.npy")))
    outs = sym.bind(mx.cpu(), args, aux_states=aux, grad_req="null").forward(is_train=False)
    out_dir = os.path.join(d, "ref_f32_native")
    os.makedirs(out_dir + ".tmp", exist_ok=True)
    for k, o in enumerate(outs):
        a = o.asnumpy()
        if a.dtype != np.float32 and np.issubdtype(a.dtype, np.floating):
            a = a.astype(np.float32)
        np.save(os.path.join(out_dir + ".tmp", f"{k}.npy"), a)
    os.replace(out_dir + ".tmp", out_dir)  # complete or absent


if __name__ == "__main__":
    main()
