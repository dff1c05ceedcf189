"""Writes tests/data/nn_zoo/expected.inc and tests/data/mxnet/nn_zoo_ops.json: the outputs
real MXNet 1.9.1 gives for the normalization, reduction, sorting, loss-head and linear-algebra
ops of tests/nn_zoo_ops_test.cpp, on small inputs chosen for their edge cases (ties, NaN,
axis=None, keepdims, size 1, odd sizes, every ret_typ).

Run with MXNet 1.9.1 (MXNET_SUBGRAPH_BACKEND=NONE):
    python tests/data/nn_zoo/gen_expected.py
Inputs are multiples of 1/8 in [-4, 4) (exact in f16 and bf16) unless a case says otherwise.
"""
import os
import mxnet as mx
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
nd = mx.nd


def grid(shape, seed, lo=-32, hi=32):
    rs = np.random.RandomState(seed)
    return (rs.randint(lo, hi, size=shape) / 8.0).astype(np.float32)


def ties(shape, seed, levels=4):
    rs = np.random.RandomState(seed)
    return rs.randint(0, levels, size=shape).astype(np.float32)


NAN = np.nan
CASES = []


def case(name, op, inputs, tol=1e-5, **attrs):
    CASES.append((name, op, [np.asarray(x, dtype=np.float32) for x in inputs], attrs, tol))


def attr_str(v):
    if isinstance(v, bool):
        return "True" if v else "False"
    return str(v)


# ---- softmax family
case("softmin_last", "softmin", [grid((2, 5), 1)])
case("softmin_axis0_temperature", "softmin", [grid((3, 2), 2)], axis=0, temperature=2.0)
case("softmax_activation_instance", "SoftmaxActivation", [grid((2, 3, 2), 3)])
case("softmax_activation_channel", "SoftmaxActivation", [grid((2, 3, 2), 4)], mode="channel")
case("softmax_activation_1d", "SoftmaxActivation", [grid((4,), 5)])
# ---- reductions
case("norm_l2_all", "norm", [grid((2, 3, 4), 6)])
case("norm_l1_axes_keepdims", "norm", [grid((2, 3, 4), 7)], ord=1, axis=(0, 2), keepdims=True)
case("norm_l2_axis1", "norm", [grid((2, 3, 4), 8)], axis=1)
case("norm_all_keepdims", "norm", [grid((2, 3), 9)], keepdims=True)
tie_nan = [[1, 3, 3, 2, 0], [NAN, 5, 5, NAN, 1], [2, NAN, 7, 7, NAN], [4, 4, 4, 4, 4]]
case("argmax_ties_nan", "argmax", [tie_nan], axis=1)
case("argmin_ties_nan", "argmin", [tie_nan], axis=1)
case("argmin_axis0_keepdims", "argmin", [ties((3, 4), 10)], axis=0, keepdims=True)
case("argmax_flat", "argmax", [ties((3, 4), 11)])
case("argmax_flat_keepdims", "argmax", [ties((2, 3), 12)], keepdims=True)
case("argmax_size1_axis", "argmax", [grid((3, 1), 13)], axis=1)
case("argmax_channel", "argmax_channel", [ties((2, 3, 2), 14)])
case("nansum_rows", "nansum", [tie_nan], axis=1)
case("nansum_all", "nansum", [tie_nan])
case("nansum_exclude", "nansum", [tie_nan], axis=1, exclude=True, keepdims=True)
case("nanprod_rows", "nanprod", [[[0.5, NAN, 2, 3], [NAN, NAN, NAN, NAN]]], axis=1)
# ---- sorting: rows of 40 with 4 levels force ties on both std::sort paths
case("topk_indices_default", "topk", [ties((3, 7), 20)], k=3)
case("topk_ascend", "topk", [ties((3, 7), 21)], k=3, is_ascend=True)
case("topk_both", "topk", [ties((2, 6), 22)], k=2, ret_typ="both")
case("topk_value_axis0", "topk", [ties((5, 3), 23)], k=2, axis=0, ret_typ="value")
case("topk_mask", "topk", [ties((2, 6), 24)], k=3, ret_typ="mask")
case("topk_mask_axis0", "topk", [ties((4, 3), 25)], k=2, axis=0, ret_typ="mask")
case("topk_flat", "topk", [ties((3, 4), 26)], k=5, axis="None", ret_typ="both")
case("topk_k0_all", "topk", [ties((2, 5), 27)], k=0)
case("topk_int32_indices", "topk", [ties((2, 5), 28)], k=2, dtype="int32")
case("topk_partial_sort_ties", "topk", [ties((2, 40), 29)], k=3, ret_typ="both")
case("topk_partial_sort_ascend", "topk", [ties((2, 40), 30)], k=4, is_ascend=True)
case("topk_full_sort_ties", "topk", [ties((2, 40), 31)], k=10)
case("topk_nan", "topk", [tie_nan], k=3, ret_typ="both")
case("sort_ties", "sort", [ties((2, 40), 32)])
case("sort_descend_nan", "sort", [tie_nan], is_ascend=False)
case("sort_axis0", "sort", [grid((4, 3), 33)], axis=0)
case("argsort_ties", "argsort", [ties((2, 40), 34)])
case("argsort_descend_ties", "argsort", [ties((2, 40), 35)], is_ascend=False)
case("argsort_flat", "argsort", [ties((3, 5), 36)], axis="None")
case("argsort_nan", "argsort", [tie_nan])
case("argsort_size1", "argsort", [grid((3, 1), 37)])
# ---- normalizations
case("instance_norm", "InstanceNorm", [grid((2, 3, 5), 40), grid((3,), 41), grid((3,), 42)])
case("instance_norm_4d_eps", "InstanceNorm", [grid((1, 2, 2, 3), 43), grid((2,), 44), grid((2,), 45)], eps=0.1)
case("group_norm_mean_var", "GroupNorm", [grid((2, 4, 3), 46), grid((2,), 47), grid((2,), 48)],
     num_groups=2, output_mean_var=True)
case("group_norm_4d", "GroupNorm", [grid((2, 6, 2, 2), 49), grid((3,), 50), grid((3,), 51)], num_groups=3)
case("group_norm_one_group", "GroupNorm", [grid((2, 3, 5), 52), grid((1,), 53), grid((1,), 54)])
case("l2norm_instance", "L2Normalization", [grid((2, 3, 2), 55)])
case("l2norm_channel", "L2Normalization", [grid((2, 3, 2), 56)], mode="channel")
case("l2norm_spatial", "L2Normalization", [grid((2, 3, 2, 2), 57)], mode="spatial")
case("l2norm_zeros_eps", "L2Normalization", [np.zeros((2, 2), np.float32)], eps=1e-6)
case("lrn_3", "LRN", [grid((2, 5, 2, 2), 58)], nsize=3, alpha=0.1)
case("lrn_even_2", "LRN", [grid((1, 5, 2, 1), 59)], nsize=2, alpha=0.5, beta=0.5, knorm=1.0)
case("lrn_5_wide", "LRN", [grid((1, 3, 1, 2), 60)], nsize=5, alpha=0.3)
# ---- loss heads
case("linear_regression", "LinearRegressionOutput", [grid((3, 1), 61), grid((3,), 62)])
case("logistic_regression", "LogisticRegressionOutput", [grid((2, 3), 63), grid((2, 3), 64)])
case("mae_regression", "MAERegressionOutput", [grid((2, 2), 65), grid((2, 2), 66)])
case("make_loss", "MakeLoss", [grid((2, 3), 67)], grad_scale=2.0)
# ---- linear algebra
case("gemm2", "_linalg_gemm2", [grid((2, 3), 70), grid((3, 4), 71)])
case("gemm2_transposed_alpha", "_linalg_gemm2", [grid((3, 2), 72), grid((4, 3), 73)],
     transpose_a=True, transpose_b=True, alpha=0.5)
case("gemm2_batched", "_linalg_gemm2", [grid((2, 2, 3), 74), grid((2, 3, 4), 75)], transpose_b=False)
case("gemm", "_linalg_gemm", [grid((2, 3), 76), grid((4, 3), 77), grid((2, 4), 78)],
     transpose_b=True, alpha=2.0, beta=-0.5)


def run(op, inputs, attrs):
    kwargs = {k: (None if v == "None" else v) for k, v in attrs.items()}
    fn = getattr(nd, op, None) or getattr(nd, op.lstrip("_"))
    out = fn(*[nd.array(x) for x in inputs], **kwargs)
    return out if isinstance(out, list) else [out]


DTYPES = {np.dtype("float32"): "f32", np.dtype("int32"): "i32"}


def cvals(a):
    return ", ".join("NAN" if np.isnan(v) else repr(float(v)) for v in np.asarray(a, np.float64).ravel())


def ctensor(a, dtype="f32"):
    shape = ", ".join(str(d) for d in a.shape)
    return "{DType::%s, {%s}, {%s}}" % (dtype, shape, cvals(a))


lines = ["// Generated by tests/data/nn_zoo/gen_expected.py with MXNet %s: do not edit." % mx.__version__,
         "// {name, op, {attr, value}..., inputs, MXNet's outputs, tolerance}"]
for name, op, inputs, attrs, tol in CASES:
    outs = run(op, inputs, attrs)
    attr_list = ", ".join('{"%s", "%s"}' % (k, attr_str(v)) for k, v in attrs.items())
    ins = ", ".join(ctensor(x) for x in inputs)
    os_ = ", ".join(ctensor(o.asnumpy(), DTYPES[np.dtype(o.dtype)]) for o in outs)
    lines.append('{"%s", "%s", {%s}, {%s}, {%s}, %g},' % (name, op, attr_list, ins, os_, tol))
with open(os.path.join(HERE, "expected.inc"), "w") as f:
    f.write("\n".join(lines) + "\n")

# ---- an MXNet graph using several of them, exported as MXNet writes its JSON
data = mx.sym.var("data")
label = mx.sym.var("label")
x = mx.sym.L2Normalization(data, mode="channel", name="l2")
x = mx.sym.LRN(x, nsize=3, alpha=0.2, name="lrn")
x = mx.sym.GroupNorm(x, mx.sym.var("gn_gamma"), mx.sym.var("gn_beta"), num_groups=2, name="gn")
flat = mx.sym.Flatten(x, name="flat")
top = mx.sym.topk(flat, k=3, ret_typ="both", name="top")
arg = mx.sym.argmax(flat, axis=1, name="arg")
nrm = mx.sym.norm(flat, axis=1, name="nrm")
gram = mx.sym.linalg.gemm2(flat, flat, transpose_b=True, alpha=0.25, name="gram")
head = mx.sym.LogisticRegressionOutput(mx.sym.softmin(gram, axis=1, name="smin"), label, name="head")
net = mx.sym.Group([top[0], top[1], arg, nrm, head])
with open(os.path.join(HERE, "..", "mxnet", "nn_zoo_ops.json"), "w") as f:
    f.write(net.tojson())
feeds = {"data": grid((2, 4, 3, 1), 90), "gn_gamma": grid((2,), 91), "gn_beta": grid((2,), 92),
         "label": grid((2, 2), 93)}
exe = net.bind(mx.cpu(), {k: nd.array(v) for k, v in feeds.items()})
outs = exe.forward()
with open(os.path.join(HERE, "graph_expected.inc"), "w") as f:
    f.write("// Generated by tests/data/nn_zoo/gen_expected.py with MXNet %s: do not edit.\n" % mx.__version__)
    f.write("// The variables of tests/data/mxnet/nn_zoo_ops.json, then its outputs as MXNet computes them.\n")
    f.write("const std::vector<std::pair<std::string, NamedTensor>> kGraphInputs = {%s};\n" %
            ", ".join('{"%s", %s}' % (k, ctensor(v)) for k, v in feeds.items()))
    f.write("const std::vector<NamedTensor> kGraphOutputs = {%s};\n" % ", ".join(ctensor(o.asnumpy()) for o in outs))
print(len(CASES), "cases")
