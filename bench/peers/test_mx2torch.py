#!/usr/bin/env python3
"""The peer harness's MXNet -> torch translator (mx2torch.py) against `ampfuse run` on
cifar_resnet20_v2 with the same random weights, f32: the harness's torch columns are only
worth something if the translated module computes the graph ampfuse and MXNet compute.

Needs torch (the peers' venv: `AMPFUSE_CLI=build/ampfuse build/peers/venv-torch/bin/python
bench/peers/test_mx2torch.py`); without it, or without the CLI or the models, it exits 77,
which ctest reports as skipped (`peers_translator`). A second case checks that an op the
translator lacks is refused with the node's name. Seconds.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
MODEL = os.path.join(os.environ.get("AMPFUSE_MODELS_DIR", os.path.join(ROOT, "models")),
                     "cifar_resnet20_v2-gluoncv-symbol.json")
CLI = os.environ.get("AMPFUSE_CLI", os.path.join(ROOT, "build", "ampfuse"))

try:
    import numpy as np
    import torch
except ImportError as e:
    print("skipped: %s (run it with the peers' venv, bench/peers/setup.sh)" % e)
    sys.exit(77)
if not os.path.exists(MODEL) or not os.path.exists(CLI):
    print("skipped: %s or %s is missing" % (MODEL, CLI))
    sys.exit(77)

sys.path.insert(0, HERE)
import mx2torch  # noqa: E402


def weight_shapes(graph, data_shape):
    """Shapes of every weight of a Convolution / BatchNorm / FullyConnected graph, by
    propagating the data's shape through the nodes (enough for cifar_resnet20_v2)."""
    nodes, shapes, out = graph["nodes"], {}, {}
    for i, n in enumerate(nodes):
        a = mx2torch._attrs(n)
        ins = [e[0] for e in n.get("inputs", [])]
        if n["op"] == "null":
            if n["name"] == "data":
                out[i] = tuple(data_shape)
            continue
        x = out[ins[0]]
        if n["op"] == "Convolution":
            k, f = mx2torch._tuple(a["kernel"]), int(a["num_filter"])
            s = mx2torch._tuple(a.get("stride"), (1, 1)) or (1, 1)
            p = mx2torch._tuple(a.get("pad"), (0, 0)) or (0, 0)
            shapes[nodes[ins[1]]["name"]] = (f, x[1]) + k
            if len(ins) > 2:
                shapes[nodes[ins[2]]["name"]] = (f,)
            out[i] = (x[0], f) + tuple((x[2 + d] + 2 * p[d] - k[d]) // s[d] + 1 for d in range(2))
        elif n["op"] == "BatchNorm":
            for j in ins[1:]:
                shapes[nodes[j]["name"]] = (x[1],)
            out[i] = x
        elif n["op"] == "FullyConnected":
            h = int(a["num_hidden"])
            shapes[nodes[ins[1]]["name"]] = (h, int(np.prod(x[1:])))
            shapes[nodes[ins[2]]["name"]] = (h,)
            out[i] = (x[0], h)
        elif n["op"] == "Pooling" and mx2torch._bool(a.get("global_pool")):
            out[i] = x[:2] + (1, 1)
        elif n["op"] == "Flatten":
            out[i] = (x[0], int(np.prod(x[1:])))
        elif n["op"] in ("Activation", "elemwise_add"):
            out[i] = x
        else:
            raise AssertionError("weight_shapes: op %s" % n["op"])
    return shapes


class TranslatorAgainstAmpfuse(unittest.TestCase):
    def test_cifar_resnet20_v2_f32(self):
        graph = json.load(open(MODEL))
        rng = np.random.RandomState(3)
        weights = {}
        for name, shape in sorted(weight_shapes(graph, (2, 3, 32, 32)).items()):
            if name.endswith("running_var"):
                v = rng.uniform(0.5, 1.5, shape)
            elif name.endswith("_weight"):
                v = rng.uniform(-1, 1, shape) * np.sqrt(3.0 / np.prod(shape[1:]))
            else:
                v = rng.uniform(-0.5, 0.5, shape)
            weights[name] = v.astype(np.float32)
        data = rng.uniform(-1, 1, (2, 3, 32, 32)).astype(np.float32)
        with tempfile.TemporaryDirectory() as tmp:
            args = [CLI, "run", MODEL, "--no-baseline", "--repeat", "1", "--json", "--save-outputs", tmp]
            for name, v in list(weights.items()) + [("data", data)]:
                path = os.path.join(tmp, name + ".npy")
                np.save(path, v)
                args += ["--inputs", "%s=%s" % (name, path)]
            p = subprocess.run(args, capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            expected = np.load(json.loads(p.stdout)["saved"][0])
        module = mx2torch.MxGraphModule(MODEL, weights, ["data"]).eval()
        with torch.no_grad():
            got = module(torch.from_numpy(data)).numpy()
        self.assertEqual(got.shape, expected.shape)
        err = np.abs(got - expected).max() / np.abs(expected).max()
        self.assertLess(err, 1e-4)
        # The weights matter: another input gives another output.
        with torch.no_grad():
            self.assertGreater(np.abs(module(torch.from_numpy(-data)).numpy() - expected).max(), 1e-3)

    def test_unknown_op_is_refused_with_its_node(self):
        graph = {"nodes": [{"op": "null", "name": "data", "inputs": []},
                           {"op": "Embedding", "name": "embed0", "attrs": {}, "inputs": [[0, 0, 0]]}],
                 "heads": [[1, 0, 0]]}
        with self.assertRaisesRegex(ValueError, "node 1 'embed0' \\(op Embedding\\): op not translated"):
            mx2torch.MxGraphModule(json.dumps(graph), {}, ["data"])


if __name__ == "__main__":
    unittest.main()
