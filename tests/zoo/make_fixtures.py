#!/usr/bin/env python3
"""Copies corpus exports (tests/zoo/zoo.py's OUT/NAME) into tests/data/zoo/NAME for the CI test.

Per model: model-symbol.json, data.npy (the input), weights/<name>.npy (every weight),
mxnet_f32/<k>.npy and mxnet_bf16/<k>.npy (MXNet's outputs).
tests/zoo_models_test.cpp runs ampfuse on them. Usage (with the corpus venv's Python, which
has MXNet to read the .params): make_fixtures.py OUT NAME...
"""
import json
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DEST = os.path.join(HERE, "..", "data", "zoo")


def write_weights(model_dir):
    """model-0000.params as weights/NAME.npy, one a variable."""
    import mxnet as mx
    folder = os.path.join(model_dir, "weights")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    for key, value in mx.nd.load(os.path.join(model_dir, "model-0000.params")).items():
        np.save(os.path.join(folder, key.split(":", 1)[-1] + ".npy"), value.asnumpy())


def main():
    out, names = sys.argv[1], sys.argv[2:]
    for name in names:
        src, dst = os.path.join(out, name), os.path.join(DEST, name)
        info = json.load(open(os.path.join(src, "export.json")))
        if info["status"] != "exported" or info.get("bf16") != "ran":
            sys.exit(f"{name}: needs an export with MXNet's f32 and bf16 outputs ({info['status']})")
        shutil.rmtree(dst, ignore_errors=True)
        os.makedirs(dst)
        shutil.copy(os.path.join(src, "model-symbol.json"), dst)
        shutil.copy(os.path.join(src, "input", "data.npy"), dst)
        write_weights(src)
        shutil.copytree(os.path.join(src, "weights"), os.path.join(dst, "weights"))
        shutil.rmtree(os.path.join(src, "weights"))
        shutil.copytree(os.path.join(src, "ref_f32"), os.path.join(dst, "mxnet_f32"))
        shutil.copytree(os.path.join(src, "ref_bf16"), os.path.join(dst, "mxnet_bf16"))
        print(name, "->", dst)


if __name__ == "__main__":
    main()
