"""An MXNet symbol JSON graph as a torch nn.Module, for the peer harness (bench/peers).

The module walks the graph's nodes in their file order (MXNet writes them topologically)
with torch.nn.functional ops, so torch eager and torch.compile run the same weights as
MXNet and ampfuse (one .npz written by the MXNet side, names as in the graph). Only the ops
the harness's graphs use are translated; any other op is refused with an error naming the
node, so a new model fails loudly instead of computing something else.

Semantics follow MXNet 1.9.1 for inference (is_train=False): BatchNorm uses the moving
statistics (gamma taken as 1 under fix_gamma=True), Dropout is the identity, SoftmaxOutput
is a softmax over axis 1 of the input flattened to 2-D (its label input is ignored).
"""

import ast
import json
import math

import numpy as np
import torch
import torch.nn.functional as F


def _attrs(node):
    # MXNet >= 1.0 writes "attrs", 0.9-0.12 "attr", 0.8 "param" (../shared/models/SOURCES.md).
    return node.get("attrs", node.get("attr", node.get("param", {}))) or {}


def _tuple(s, default=()):
    if s is None or s == "None":
        return tuple(default)
    v = ast.literal_eval(s)
    return tuple(v) if isinstance(v, (tuple, list)) else (v,)


def _bool(s, default=False):
    if s is None:
        return default
    return s in ("True", "true", "1")


def _int(s, default):
    return default if s is None or s == "None" else int(s)


def _float(s, default):
    return default if s is None or s == "None" else float(s)


def _reshape(x, shape):
    # MXNet Reshape codes 0 (copy this dim) and -1 (infer); the harness's graphs use no others.
    out = []
    for i, d in enumerate(shape):
        if d == 0:
            out.append(x.shape[i])
        elif d in (-1,) or d > 0:
            out.append(d)
        else:
            raise ValueError("Reshape code %d is not translated" % d)
    return x.reshape(out)


def _pool(x, a):
    pool_type = a.get("pool_type", "max")
    if _bool(a.get("global_pool")):
        if pool_type == "max":
            return torch.amax(x, dim=(2, 3), keepdim=True)
        if pool_type == "avg":
            return torch.mean(x, dim=(2, 3), keepdim=True)
        raise ValueError("global pool_type %s" % pool_type)
    kernel = _tuple(a.get("kernel"))
    stride = _tuple(a.get("stride"), (1,) * len(kernel))
    pad = _tuple(a.get("pad"), (0,) * len(kernel))
    # pooling_convention "full" is MXNet's ceil of the output size; "valid" its floor.
    conv = a.get("pooling_convention", "valid")
    if conv not in ("valid", "full"):
        raise ValueError("pooling_convention %s" % conv)
    ceil = conv == "full"
    if pool_type == "max":
        return F.max_pool2d(x, kernel, stride, pad, ceil_mode=ceil)
    if pool_type == "avg":
        # MXNet's count_include_pad defaults to True, as torch's.
        return F.avg_pool2d(x, kernel, stride, pad, ceil_mode=ceil,
                            count_include_pad=_bool(a.get("count_include_pad"), True))
    raise ValueError("pool_type %s" % pool_type)


_ACT = {"relu": F.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "softrelu": F.softplus}


class MxGraphModule(torch.nn.Module):
    """Runs an MXNet symbol graph. inputs: names of the graph's data inputs, in the order
    forward() takes them; weights: name -> numpy array for every other variable the graph
    reads (labels of SoftmaxOutput excepted)."""

    def __init__(self, symbol_json, weights, inputs):
        super().__init__()
        g = json.loads(symbol_json) if symbol_json.lstrip().startswith("{") else json.load(open(symbol_json))
        self.nodes = g["nodes"]
        self.heads = [(h[0], h[1]) for h in g["heads"]]
        self.input_names = list(inputs)
        self.params = torch.nn.ParameterDict()
        # Parameter names may hold dots, which ParameterDict refuses: index by position.
        self.var_slot = {}
        self.steps = []  # (fn, [(node, output)], node index)
        for i, n in enumerate(self.nodes):
            op, name, a = n["op"], n["name"], _attrs(n)
            ins = [(e[0], e[1]) for e in n.get("inputs", [])]
            if op == "null":
                if name in self.input_names:
                    continue
                if name in weights:
                    key = "p%d" % len(self.params)
                    self.params[key] = torch.nn.Parameter(torch.from_numpy(np.ascontiguousarray(weights[name])),
                                                          requires_grad=False)
                    self.var_slot[i] = key
                continue  # labels: read by nothing we translate
            try:
                fn = self._translate(op, a, ins)
            except ValueError as e:
                raise ValueError("node %d '%s' (op %s): %s" % (i, name, op, e)) from None
            self.steps.append((fn, ins, i))
        for i, n in enumerate(self.nodes):
            if n["op"] == "null" and n["name"] not in self.input_names and i not in self.var_slot:
                readers = [self.nodes[s[2]] for s in self.steps if any(e[0] == i for e in s[1])]
                if any(r["op"] != "SoftmaxOutput" for r in readers):
                    raise ValueError("variable '%s' has no weight in the weights file" % n["name"])

    def _translate(self, op, a, ins):
        if op == "Convolution":
            kernel = _tuple(a.get("kernel"))
            if len(kernel) != 2:
                raise ValueError("only 2-D convolutions are translated")
            if a.get("layout", "None") not in ("None", "NCHW"):
                raise ValueError("layout %s" % a["layout"])
            stride = _tuple(a.get("stride"), (1, 1)) or (1, 1)
            pad = _tuple(a.get("pad"), (0, 0)) or (0, 0)
            dilate = _tuple(a.get("dilate"), (1, 1)) or (1, 1)
            groups = _int(a.get("num_group"), 1)
            has_bias = not _bool(a.get("no_bias"))
            return lambda x, w, b=None: F.conv2d(x, w, b if has_bias else None, stride, pad, dilate, groups)
        if op == "BatchNorm":
            if _int(a.get("axis"), 1) != 1:
                raise ValueError("BatchNorm axis %s" % a.get("axis"))
            eps = _float(a.get("eps"), 1e-3)
            fix_gamma = _bool(a.get("fix_gamma"), True)

            def bn(x, gamma, beta, mean, var):
                g = torch.ones_like(gamma) if fix_gamma else gamma
                return F.batch_norm(x, mean, var, g, beta, False, 0.0, eps)
            return bn
        if op == "Activation":
            act = a.get("act_type")
            if act not in _ACT:
                raise ValueError("act_type %s" % act)
            return _ACT[act]
        if op == "Pooling":
            if a.get("layout", "None") not in ("None", "NCHW"):
                raise ValueError("layout %s" % a["layout"])
            return lambda x: _pool(x, a)
        if op == "FullyConnected":
            flatten = _bool(a.get("flatten"), True)
            has_bias = not _bool(a.get("no_bias"))

            def fc(x, w, b=None):
                if flatten:
                    x = x.reshape(x.shape[0], -1)
                return F.linear(x, w, b if has_bias else None)
            return fc
        if op in ("elemwise_add", "broadcast_add", "_plus", "_add"):
            return torch.add
        if op in ("elemwise_sub", "broadcast_sub", "_minus", "_sub"):
            return torch.sub
        if op in ("elemwise_mul", "broadcast_mul", "_mul"):
            return torch.mul
        if op in ("elemwise_div", "broadcast_div", "_div"):
            return torch.div
        if op in ("_plus_scalar", "_mul_scalar", "_minus_scalar", "_div_scalar"):
            s = float(a["scalar"])
            return {"_plus_scalar": lambda x: x + s, "_mul_scalar": lambda x: x * s,
                    "_minus_scalar": lambda x: x - s, "_div_scalar": lambda x: x / s}[op]
        if op == "Flatten":
            return lambda x: x.reshape(x.shape[0], -1)
        if op == "Concat":
            dim = _int(a.get("dim"), 1)
            return lambda *xs: torch.cat(xs, dim)
        if op == "Dropout":
            return lambda x: x  # inference
        if op == "softmax":
            axis = _int(a.get("axis"), -1)
            if a.get("temperature", "None") not in ("None", "1", "1.0"):
                raise ValueError("softmax temperature")
            return lambda x: torch.softmax(x, axis)
        if op == "SoftmaxOutput":
            if _bool(a.get("multi_output")) or _bool(a.get("preserve_shape")):
                raise ValueError("multi_output / preserve_shape")
            return lambda x, label=None: torch.softmax(x.reshape(x.shape[0], -1), 1).reshape(x.shape)
        if op == "LayerNorm":
            axis = _int(a.get("axis"), -1)
            eps = _float(a.get("eps"), 1e-5)
            if axis != -1:
                raise ValueError("LayerNorm axis %d (only -1)" % axis)
            return lambda x, g, b: F.layer_norm(x, (x.shape[-1],), g, b, eps)
        if op == "batch_dot":
            ta, tb = _bool(a.get("transpose_a")), _bool(a.get("transpose_b"))
            return lambda x, y: torch.bmm(x.transpose(1, 2) if ta else x, y.transpose(1, 2) if tb else y)
        if op == "Reshape":
            if _bool(a.get("reverse")):
                raise ValueError("Reshape reverse")
            shape = _tuple(a.get("shape"))
            return lambda x: _reshape(x, shape)
        if op == "transpose":
            axes = _tuple(a.get("axes"))
            return lambda x: x.permute(*axes) if axes else x.permute(*reversed(range(x.dim())))
        raise ValueError("op not translated to torch (bench/peers/mx2torch.py)")

    def forward(self, *inputs):
        vals = {}
        for i, n in enumerate(self.nodes):
            if n["op"] == "null":
                if n["name"] in self.input_names:
                    vals[(i, 0)] = inputs[self.input_names.index(n["name"])]
                elif i in self.var_slot:
                    vals[(i, 0)] = self.params[self.var_slot[i]]
        for fn, ins, i in self.steps:
            args = [vals.get(e) for e in ins]
            vals[(i, 0)] = fn(*args)
        outs = [vals[h] for h in self.heads]
        return outs[0] if len(outs) == 1 else tuple(outs)


def load(symbol_path, weights_npz, inputs):
    w = np.load(weights_npz)
    return MxGraphModule(symbol_path, {k: w[k] for k in w.files}, inputs).eval()
