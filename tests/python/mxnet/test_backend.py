"""The ampfuse MXNet backend against MXNet alone: same outputs (1e-5 relative in f32, bf16's
tolerance with AMP), the MXNET_AMP_FUSE switch, weights updated in place, regions ampfuse
cannot run left to MXNet, and errors."""

import os
import subprocess
import sys
import textwrap

import mxnet as mx
import numpy as np
import pytest
from mxnet.gluon import nn

from conftest import ampfuse_subgraphs, initialize, outputs, relative_error

F32_TOLERANCE = 1e-5
# bf16 keeps 8 significant bits (relative rounding 2^-9 = 0.2%); through a deep net with
# random weights the errors add up to a few percent of the output's range at most.
BF16_TOLERANCE = 5e-2


def mlp():
    net = nn.HybridSequential()
    net.add(nn.Dense(64, activation="relu"), nn.Dense(32, activation="tanh"), nn.Dense(10))
    return net


def reference(make, inputs, seed=0):
    net = make()
    initialize(net, seed)
    net.hybridize()
    return outputs(net(*inputs))


def through_ampfuse(make, inputs, seed=0, **options):
    net = make()
    initialize(net, seed)
    net.optimize_for(*inputs, backend="ampfuse", **options)
    return net, outputs(net(*inputs))


def test_mlp_f32_matches_mxnet():
    x = mx.nd.random.uniform(-1, 1, (4, 20))
    want = reference(mlp, [x])
    net, got = through_ampfuse(mlp, [x], amp="off")
    assert ampfuse_subgraphs(net) == 1
    assert relative_error(got, want) <= F32_TOLERANCE


def test_mlp_bf16_runs_in_bf16():
    x = mx.nd.random.uniform(-1, 1, (4, 20))
    want = reference(mlp, [x])
    _, got = through_ampfuse(mlp, [x], amp="bf16")
    err = relative_error(got, want)
    assert err <= BF16_TOLERANCE
    assert err > 1e-6, "the AMP run gave f32's results: no bf16 inside the region"


def test_new_batch_size_and_weights_updated_in_place():
    # The weight casts are kept between calls (computed once per weight version); an
    # in-place update (set_data writes into the same NDArray, bumping its version) must be
    # seen, and a new batch size compiles a new signature.
    x = mx.nd.random.uniform(-1, 1, (4, 20))
    net, _ = through_ampfuse(mlp, [x], amp="bf16")
    ref = mlp()
    initialize(ref)
    ref.hybridize()
    for name, p in net.collect_params().items():
        if name.endswith("weight"):
            p.set_data(p.data() * -2.0)
    for p_ref, p in zip(ref.collect_params().values(), net.collect_params().values()):
        p_ref.set_data(p.data())
    for batch in (4, 7):
        xb = mx.nd.random.uniform(-1, 1, (batch, 20))
        assert relative_error(outputs(net(xb)), outputs(ref(xb))) <= BF16_TOLERANCE


def conv_bn():
    net = nn.HybridSequential()
    net.add(nn.Conv2D(8, 3, padding=1, in_channels=3), nn.BatchNorm(in_channels=8), nn.Activation("relu"))
    return net


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static_alloc"])
def test_inference_keeps_its_weight_constants_until_a_weight_or_statistic_is_written(static, capfd, monkeypatch):
    """MXNet counts every call of the subgraph operator as a write of its aux inputs (the
    moving statistics), so their versions grow by one a call: that alone must not make the
    region compute its weights' casts, transposes and reorders again (it did, every call),
    while a real write of a statistic (set_data) must."""
    x = mx.nd.random.uniform(-1, 1, (2, 3, 6, 6))
    monkeypatch.setenv("AMPFUSE_MXNET_VERBOSE", "1")
    net = conv_bn()
    initialize(net)
    if static:
        net.hybridize(backend="ampfuse", amp="bf16", static_alloc=True, static_shape=True)
    else:
        net.optimize_for(x, backend="ampfuse", amp="bf16")
    capfd.readouterr()
    for _ in range(4):
        first = outputs(net(x))
    err = capfd.readouterr().err
    assert "computed again" not in err, err
    want = reference(conv_bn, [x])
    assert relative_error(first, want) <= BF16_TOLERANCE

    stats = [p for name, p in net.collect_params().items() if name.endswith("running_mean")]
    stats[0].set_data(stats[0].data() + 0.5)
    got = outputs(net(x))
    assert "weights written in place, their casts computed again" in capfd.readouterr().err
    ref = conv_bn()
    initialize(ref)
    ref.hybridize()
    for p_ref, p in zip(ref.collect_params().values(), net.collect_params().values()):
        p_ref.set_data(p.data())
    assert relative_error(got, outputs(ref(x))) <= BF16_TOLERANCE
    assert relative_error(got, first) > 1e-3, "the new moving mean was not used"


def test_op_ampfuse_lacks_stays_with_mxnet():
    class WithSort(nn.HybridBlock):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            with self.name_scope():
                self.a = nn.Dense(16)
                self.b = nn.Dense(8)

        def hybrid_forward(self, F, x):
            return self.b(F.sort(F.relu(self.a(x)), axis=-1))

    x = mx.nd.random.uniform(-1, 1, (3, 12))
    want = reference(WithSort, [x])
    net, got = through_ampfuse(WithSort, [x], amp="off")
    json = net._cached_graph[1].tojson()
    assert '"op": "sort"' in json
    assert ampfuse_subgraphs(net) >= 1
    assert relative_error(got, want) <= F32_TOLERANCE


def test_bad_amp_option_is_an_error():
    x = mx.nd.random.uniform(-1, 1, (2, 20))
    net = mlp()
    initialize(net)
    with pytest.raises(ValueError, match="amp='int4': expected off, bf16, fp16"):
        net.optimize_for(x, backend="ampfuse", amp="int4")
    with pytest.raises(ValueError, match="unknown option.* precision"):
        net.hybridize(backend="ampfuse", precision="bf16")


SCRIPT = textwrap.dedent("""
    import os
    import mxnet as mx
    from mxnet.gluon import nn
    import ampfuse.mxnet
    net = nn.HybridSequential()
    net.add(nn.Conv2D(8, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"), nn.Dense(5))
    net.initialize()
    net.hybridize()            # unchanged user code
    x = mx.nd.ones((2, 3, 8, 8))
    y = net(x)
    y.wait_to_read()
    print("backend", net._backend, net._backend_opts.get("amp"))
    print("subgraphs", net._cached_graph[1].tojson().count('"op": "_ampfuse_subgraph"'))
""")


def run_script(env_value):
    env = dict(os.environ)
    env.pop("MXNET_AMP_FUSE", None)
    env.pop("AMPFUSE_AMP_DTYPE", None)
    if env_value is not None:
        env["MXNET_AMP_FUSE"] = env_value
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split("\n")


def test_mxnet_amp_fuse_1_routes_unchanged_code_through_ampfuse():
    lines = run_script("1")
    assert lines[0] == "backend ampfuse bf16"
    assert int(lines[1].split()[1]) >= 1


@pytest.mark.parametrize("value", [None, "0"])
def test_mxnet_amp_fuse_unset_or_0_leaves_mxnet_alone(value):
    lines = run_script(value)
    assert lines[0] == "backend None None"
    assert lines[1] == "subgraphs 0"


def test_example_runs_through_ampfuse():
    # examples/gluon_amp_fuse.py, the README's example, so that it cannot rot.
    example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "gluon_amp_fuse.py")
    env = dict(os.environ, MXNET_AMP_FUSE="1")
    env.pop("AMPFUSE_AMP_DTYPE", None)
    out = subprocess.run([sys.executable, example], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert lines[0] == "MXNET_AMP_FUSE=1: backend ampfuse, 1 ampfuse region(s)"
    assert float(lines[1].rsplit(" ", 1)[1]) <= 5e-2
    losses = [float(v) for v in lines[2].split(": ")[1].split()]
    assert len(losses) == 3 and losses[-1] < losses[0]


def test_backend_needs_no_native_module(tmp_path):
    # A build with the MXNet backend only (README, "MXNet users": no -DAMPFUSE_BUILD_PYTHON):
    # the package's sources without ampfuse._ampfuse still give ampfuse.mxnet, and load()
    # says what is missing.
    sources = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python", "ampfuse")
    package = tmp_path / "ampfuse"
    package.mkdir()
    for name in os.listdir(sources):
        if name.endswith(".py"):
            (package / name).write_text(open(os.path.join(sources, name)).read())
    script = textwrap.dedent("""
        import ampfuse.mxnet, ampfuse
        try:
            ampfuse.load()
        except ImportError as e:
            print("load:", str(e).split(" (")[0])
    """)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "load: ampfuse's native module ampfuse._ampfuse is not built here" in out.stdout
