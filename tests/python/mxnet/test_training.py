"""Training through ampfuse regions: autograd.record() / backward() / Trainer.step() train a
partitioned Gluon network as MXNet alone does. Gradients within 1e-5 relative in f32; with
BatchNorm, the forward in training uses batch statistics and updates the moving ones in
MXNet's aux arrays; Dropout drops in training (its own masks: their statistics are tested,
and that backward uses the forward's); inference keeps the inference form. A region
partitioned without knowing the form refuses backward through BatchNorm with a message."""

import functools

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon
from mxnet.gluon import nn

from conftest import ampfuse_subgraphs, initialize, relative_error
from test_backend import BF16_TOLERANCE, F32_TOLERANCE, mlp


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


# BatchNorm networks ----------------------------------------------------------------------

def conv_bn_net(dropout=0.0):
    """Convolutions without bias before BatchNorm (as in ResNets: a bias there has zero
    gradient, which would compare rounding noise with rounding noise). Shapes given, so that
    initialize() draws the moving statistics too."""
    net = nn.HybridSequential()
    net.add(nn.Conv2D(8, 3, padding=1, use_bias=False, in_channels=3), nn.BatchNorm(in_channels=8),
            nn.Activation("relu"), nn.Conv2D(8, 3, padding=1, strides=2, use_bias=False, in_channels=8),
            nn.BatchNorm(momentum=0.8, in_channels=8), nn.Activation("relu"), nn.GlobalAvgPool2D(),
            nn.Dropout(dropout), nn.Dense(10, in_units=8))
    return net


def cifar_resnet20_v2():
    gluoncv = pytest.importorskip("gluoncv")
    return gluoncv.model_zoo.get_model("cifar_resnet20_v2", classes=10, pretrained=False)


def batch(shape):
    rng = np.random.RandomState(3)
    return mx.nd.array(rng.uniform(-1, 1, shape)), mx.nd.array(rng.randint(0, 10, (shape[0],)))


def train_bn(make, partition, shape, steps=2, train_mode=True):
    """`steps` SGD steps on one batch; returns the losses, the first step's gradients (the
    data's and every trained parameter's), the moving statistics after the steps, the
    inference output after them (outside autograd.record) and the net."""
    x, labels = batch(shape)
    x.attach_grad()
    net = make()
    initialize(net)
    partition(net, x)
    params = net.collect_params()
    trainer = gluon.Trainer(params, "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    losses, first = [], None
    for step in range(steps):
        with autograd.record(train_mode=train_mode):
            loss = loss_fn(net(x), labels)
        loss.backward(train_mode=train_mode)
        if step == 0:
            first = [x.grad.asnumpy()] + [p.grad().asnumpy() for p in params.values() if p.grad_req != "null"]
        trainer.step(shape[0])
        losses.append(float(loss.mean().asscalar()))
    moving = [p.data().asnumpy() for name, p in params.items() if name.endswith(("running_mean", "running_var"))]
    return losses, first, moving, net(x).asnumpy(), net


def mxnet_alone(net, x):
    net.hybridize()


def ampfuse_f32(net, x):
    net.optimize_for(x, backend="ampfuse", amp="off")


def assert_trains_as_mxnet(want, got, tolerance):
    want_losses, want_grads, want_moving, want_inference, _ = want
    got_losses, got_grads, got_moving, got_inference, _ = got
    assert relative_error([np.array(got_losses)], [np.array(want_losses)]) <= tolerance
    assert len(got_grads) == len(want_grads)
    for got_grad, want_grad in zip(got_grads, want_grads):
        assert relative_error([got_grad], [want_grad]) <= tolerance
    assert want_moving and len(got_moving) == len(want_moving)
    # The moving statistics moved (MXNet updated them) and ampfuse's moved the same way.
    for got_stat, want_stat in zip(got_moving, want_moving):
        assert relative_error([got_stat], [want_stat]) <= tolerance
    # Inference after training: the moving statistics the training steps wrote, read by
    # the inference form (the weight constants it keeps were refreshed).
    assert relative_error([got_inference], [want_inference]) <= tolerance


def test_batchnorm_net_trains_as_mxnet():
    want = train_bn(conv_bn_net, mxnet_alone, (4, 3, 8, 8), steps=3)
    got = train_bn(conv_bn_net, ampfuse_f32, (4, 3, 8, 8), steps=3)
    assert_trains_as_mxnet(want, got, F32_TOLERANCE)
    net = got[-1]
    assert ampfuse_subgraphs(net) >= 1
    # Both forms were partitioned: the inference one is current (the last call).
    assert net._ampfuse_form == 0 and set(net._ampfuse_forms) == {1}
    initial = train_bn(conv_bn_net, mxnet_alone, (4, 3, 8, 8), steps=0)[2]
    for stat, start in zip(got[2], initial):
        assert relative_error([stat], [start]) > 1e-2, "training moved the moving statistics"


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static_alloc"])
def test_training_backward_runs_on_the_values_its_forward_kept(static, capfd, monkeypatch):
    """A training forward runs as the first half of the backward executable and keeps its
    values in the operator state; backward runs the second half only, with the gradients
    of the test above (MXNet's within 1e-5). Under static_alloc one state serves every
    call: the kept values are replaced by each forward."""
    want = train_bn(conv_bn_net, mxnet_alone, (4, 3, 8, 8), steps=2)
    monkeypatch.setenv("AMPFUSE_MXNET_VERBOSE", "1")
    capfd.readouterr()

    def partition(net, x):
        if static:
            net.hybridize(backend="ampfuse", amp="off", static_alloc=True, static_shape=True)
        else:
            net.optimize_for(x, backend="ampfuse", amp="off")

    got = train_bn(conv_bn_net, partition, (4, 3, 8, 8), steps=2)
    err = capfd.readouterr().err
    assert "backward ran on the values its forward kept" in err, err
    assert "backward computed the forward again" not in err, err
    assert_trains_as_mxnet(want, got, F32_TOLERANCE)


def test_moving_statistics_follow_momentum():
    """One training forward updates moving_mean as MXNet does: m * momentum + mean * (1 - m)."""
    rng = np.random.RandomState(5)
    x = mx.nd.array(rng.uniform(0, 2, (6, 4)))
    net = nn.HybridSequential()
    net.add(nn.BatchNorm(momentum=0.75, in_channels=4))
    initialize(net)
    mean_before = net[0].running_mean.data().asnumpy().copy()
    net.optimize_for(x, backend="ampfuse", amp="off")
    with autograd.record():
        net(x)
    got = net[0].running_mean.data().asnumpy()
    want = mean_before * 0.75 + x.asnumpy().mean(axis=0) * 0.25
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    before = got.copy()
    net(x).wait_to_read()  # inference: no update
    np.testing.assert_array_equal(net[0].running_mean.data().asnumpy(), before)


# Batch 4: at batch 2 some of cifar_resnet20_v2's gradients through BatchNorm (per-channel
# statistics over 2 x 8 x 8 values at the last stage) come out of so much cancellation that
# f32 rounding alone moves them by 10% (MXNet's against itself in another summation order).
RESNET_BATCH = (4, 3, 32, 32)


@functools.lru_cache(maxsize=None)
def resnet_with_mxnet_alone():
    return train_bn(cifar_resnet20_v2, mxnet_alone, RESNET_BATCH)


def test_cifar_resnet20_v2_trains_as_mxnet():
    got = train_bn(cifar_resnet20_v2, ampfuse_f32, RESNET_BATCH)
    assert_trains_as_mxnet(resnet_with_mxnet_alone(), got, F32_TOLERANCE)


def test_record_in_inference_mode_gives_the_inference_gradients():
    """autograd.record(train_mode=False) and backward(train_mode=False): MXNet
    differentiates the inference form (moving statistics, no dropout) and updates nothing;
    so does ampfuse. (With backward's default train_mode=True, MXNet's BatchNorm backward
    applies the batch-statistics formula to a forward that computed none: no function's
    gradient, which ampfuse does not imitate.)"""
    make = lambda: conv_bn_net(dropout=0.5)  # noqa: E731
    want = train_bn(make, mxnet_alone, (4, 3, 8, 8), steps=1, train_mode=False)
    got = train_bn(make, ampfuse_f32, (4, 3, 8, 8), steps=1, train_mode=False)
    assert_trains_as_mxnet(want, got, F32_TOLERANCE)
    initial = train_bn(make, mxnet_alone, (4, 3, 8, 8), steps=0)[2]
    for stat, start in zip(got[2], initial):
        np.testing.assert_array_equal(stat, start)


def mxnet_bf16_amp_gradients(make, shape):
    """MXNet's own bf16 AMP (amp.convert_hybrid_block) on train_bn's first step: the data's
    and every trained parameter's gradient, in train_bn's order."""
    from mxnet.contrib import amp
    x, labels = batch(shape)
    net = make()
    initialize(net)
    net.hybridize()
    net(x)
    names = [name for name, p in net.collect_params().items() if p.grad_req != "null"]
    low = amp.convert_hybrid_block(net, target_dtype="bfloat16", ctx=mx.cpu())
    x.attach_grad()
    with autograd.record():
        loss = gluon.loss.SoftmaxCrossEntropyLoss()(low(x).astype("float32"), labels)
    loss.backward()
    params = low.collect_params()
    return [x.grad.asnumpy()] + [params[name].grad().asnumpy().astype(np.float32) for name in names]


def test_amp_fuse_env_trains_unchanged_code_in_bf16(monkeypatch):
    """MXNET_AMP_FUSE=1: the unchanged training loop (net.hybridize()) runs through ampfuse
    with bf16 AMP and follows MXNet's f32 training within bf16's tolerance: losses, moving
    statistics, the inference output after training, the gradients of the head (dense
    layer, last BatchNorm). Deeper gradients pass back through BatchNorm's backward, whose
    mean subtractions cancel most of the bf16 values they take: MXNet's own bf16 AMP puts
    them up to 32% off f32 in their largest element (max |error| / max |f32 gradient|,
    median 15%), and ampfuse's may be off as much (measured: 38%, median 15%), not
    markedly more."""
    theirs = mxnet_bf16_amp_gradients(cifar_resnet20_v2, RESNET_BATCH)
    want = resnet_with_mxnet_alone()
    monkeypatch.setenv("MXNET_AMP_FUSE", "1")
    got = train_bn(cifar_resnet20_v2, mxnet_alone, RESNET_BATCH)  # hybridize(): unchanged code
    net = got[-1]
    assert net._backend == "ampfuse" and net._backend_opts["amp"] == "bf16"
    assert ampfuse_subgraphs(net) >= 1
    want_losses, want_grads, want_moving, want_inference, _ = want
    got_losses, got_grads, got_moving, got_inference, _ = got
    assert relative_error([np.array(got_losses)], [np.array(want_losses)]) <= BF16_TOLERANCE
    for got_stat, want_stat in zip(got_moving, want_moving):
        assert relative_error([got_stat], [want_stat]) <= BF16_TOLERANCE
    assert relative_error([got_inference], [want_inference]) <= BF16_TOLERANCE
    for got_grad, want_grad in zip(got_grads[-4:], want_grads[-4:]):  # dense, last BatchNorm
        assert relative_error([got_grad], [want_grad]) <= BF16_TOLERANCE
    ours = [relative_error([g], [w]) for g, w in zip(got_grads, want_grads)]
    mxnet_bf16 = [relative_error([g], [w]) for g, w in zip(theirs, want_grads)]
    assert len(ours) == len(mxnet_bf16)
    assert max(ours) <= 1.5 * max(mxnet_bf16)  # one element of 62 gradients: noisy
    assert np.median(ours) <= 1.25 * np.median(mxnet_bf16)
    assert ours[0] > 1e-4, "bf16 inside the regions, not f32"


def one_training_call(net, x, labels):
    """The loss, the data's gradient and the moving statistics (by name) of one recorded
    forward and backward."""
    x.attach_grad()
    with autograd.record():
        loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x), labels)
    loss.backward()
    moving = {name: p.data().asnumpy() for name, p in net.collect_params().items()
              if name.endswith(("running_mean", "running_var"))}
    return loss.asnumpy(), x.grad.asnumpy(), moving


def test_exported_partitioned_model_trains_after_import(tmp_path):
    """A partitioned model exported (its regions in the inference form) and imported as a
    SymbolBlock: hybridize(backend='ampfuse') cannot partition those regions again, so
    ampfuse.mxnet sets their form on the subgraph nodes; training then matches MXNet's."""
    rng = np.random.RandomState(6)
    x = mx.nd.array(rng.uniform(-1, 1, (4, 3, 8, 8)))
    labels = mx.nd.array(rng.randint(0, 10, (4,)))
    net = conv_bn_net()
    initialize(net)
    net.hybridize()
    net(x)
    net.export(str(tmp_path / "plain"))
    net.optimize_for(x, backend="ampfuse", amp="off")
    net(x)
    net.export(str(tmp_path / "partitioned"))

    def imported(prefix):
        return gluon.SymbolBlock.imports(str(tmp_path / (prefix + "-symbol.json")), ["data"],
                                         str(tmp_path / (prefix + "-0000.params")))

    want = one_training_call(imported("plain"), x, labels)
    block = imported("partitioned")
    assert block._cached_graph[1].tojson().count('"op": "_ampfuse_subgraph"') == 1
    block.hybridize(backend="ampfuse", amp="off")
    got = one_training_call(block, x, labels)
    assert relative_error([got[0]], [want[0]]) <= F32_TOLERANCE
    assert relative_error([got[1]], [want[1]]) <= F32_TOLERANCE
    assert sorted(got[2]) == sorted(want[2])
    for name, stat in want[2].items():
        assert relative_error([got[2][name]], [stat]) <= F32_TOLERANCE


# Dropout ---------------------------------------------------------------------------------

def dropout_net(p):
    net = nn.HybridSequential()
    net.add(nn.Dense(64, in_units=32), nn.Dropout(p))
    return net


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static_alloc"])
def test_dropout_drops_in_training_only_and_backward_uses_the_forward_mask(static):
    """Also with static_alloc, where MXNet's CachedOp runs its static path (memory and
    operator states planned ahead) instead of the dynamic one."""
    p = 0.5
    rng = np.random.RandomState(4)
    x = mx.nd.array(rng.uniform(0.5, 1.5, (16, 32)))
    head = rng.uniform(-1, 1, (16, 64)).astype(np.float32)
    net = dropout_net(p)
    initialize(net)
    if static:
        net.hybridize(backend="ampfuse", amp="off", static_alloc=True, static_shape=True)
    else:
        net.optimize_for(x, backend="ampfuse", amp="off")
    dense = net(x).asnumpy()  # inference: the identity
    weight = net[0].weight.data().asnumpy()
    np.testing.assert_allclose(dense, x.asnumpy() @ weight.T + net[0].bias.data().asnumpy(), rtol=1e-5, atol=1e-5)
    assert np.all(dense != 0)

    masks = []
    for _ in range(2):
        x.attach_grad()
        with autograd.record():
            y = net(x)
        y.backward(mx.nd.array(head))
        y = y.asnumpy()
        kept = y != 0
        # About half dropped (1024 elements: 0.5 +- 0.1 is six standard deviations), the
        # rest scaled by 1 / (1 - p).
        assert 0.4 < 1 - kept.mean() < 0.6
        np.testing.assert_allclose(y[kept], dense[kept] / (1 - p), rtol=1e-5)
        # Backward with the forward's mask: d(sum(head * y))/dx = (head * mask / (1 - p)) @ W.
        want = (head * kept / (1 - p)) @ weight
        assert relative_error([x.grad.asnumpy()], [want]) <= F32_TOLERANCE
        masks.append(kept)
    assert (masks[0] != masks[1]).mean() > 0.3, "a fresh mask every training call"
    # Two forwards recorded before one backward: each call's gradient uses its own mask.
    x.attach_grad()
    with autograd.record():
        first, second = net(x), net(x)
        total = first + 2 * second
    total.backward(mx.nd.array(head))
    kept = [first.asnumpy() != 0, second.asnumpy() != 0]
    assert (kept[0] != kept[1]).mean() > 0.3
    want = (head * kept[0] / (1 - p) + 2 * head * kept[1] / (1 - p)) @ weight
    assert relative_error([x.grad.asnumpy()], [want]) <= F32_TOLERANCE
    np.testing.assert_array_equal(net(x).asnumpy(), dense)  # inference again: no dropout


def test_dropout_masks_follow_mxnet_seed():
    x = mx.nd.ones((8, 32))
    net = dropout_net(0.3)
    initialize(net)
    net.optimize_for(x, backend="ampfuse", amp="off")

    def mask():
        with autograd.record():
            return net(x).asnumpy() != 0

    mx.random.seed(7)
    first = [mask(), mask()]
    mx.random.seed(7)
    again = [mask(), mask()]
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert (first[0] != first[1]).any()


# A region that does not know its form ---------------------------------------------------

def symbol_and_arrays():
    net = nn.HybridSequential()
    net.add(nn.Dense(16, in_units=8, use_bias=False), nn.BatchNorm(in_channels=16), nn.Dense(4, in_units=16))
    initialize(net)
    sym = net(mx.sym.var("data"))
    params = net.collect_params()
    args = {name: p.data().copy() for name, p in params.items() if not name.endswith(("mean", "var"))}
    aux = {name: p.data().copy() for name, p in params.items() if name.endswith(("mean", "var"))}
    args["data"] = mx.nd.array(np.random.RandomState(2).uniform(-1, 1, (4, 8)))
    return sym, args, aux


def train_executor(sym, args, aux):
    """One training forward and backward of a bound symbol: the gradients, the new aux."""
    grads = {name: mx.nd.zeros_like(a) for name, a in args.items()}
    exe = sym.bind(mx.cpu(), args, args_grad=grads, aux_states=aux)
    exe.forward(is_train=True)
    exe.backward(mx.nd.array(np.linspace(-1, 1, 16).reshape(4, 4)))
    return [grads[name].asnumpy() for name in sorted(grads)], [aux[name].asnumpy() for name in sorted(aux)]


def test_symbol_api_region_knows_its_form_only_from_the_training_option():
    """Partitioned by the symbol API without training=, a region cannot know whether
    MXNet trains, so backward through BatchNorm says so rather than differentiate a guess;
    with training=1 it trains as MXNet's own executor does."""
    sym, args, aux = symbol_and_arrays()
    part = sym.optimize_for("ampfuse", args, aux, mx.cpu(), amp="off")
    assert part.tojson().count('"op": "_ampfuse_subgraph"') == 1
    with pytest.raises(mx.base.MXNetError, match="partition with the option training=1"):
        train_executor(part, args, aux)
        mx.nd.waitall()

    sym, args, aux = symbol_and_arrays()
    want_grads, want_aux = train_executor(sym, args, aux)
    sym, args, aux = symbol_and_arrays()
    part = sym.optimize_for("ampfuse", args, aux, mx.cpu(), amp="off", training=1)
    assert part.tojson().count('"op": "_ampfuse_subgraph"') == 1
    got_grads, got_aux = train_executor(part, args, aux)
    for got, want in zip(got_grads + got_aux, want_grads + want_aux):
        assert relative_error([got], [want]) <= F32_TOLERANCE


def test_bad_training_option_is_an_error():
    x = mx.nd.ones((2, 20))
    net = mlp()
    initialize(net)
    with pytest.raises(ValueError, match="training='yes': expected 0 or 1"):
        net.optimize_for(x, backend="ampfuse", training="yes")
