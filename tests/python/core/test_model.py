# ampfuse.load / Model against the `ampfuse` program: the same path gives the same bits.
import threading

import ml_dtypes
import numpy as np
import pytest

import ampfuse

CIFAR = "cifar_resnet20_v2-gluoncv-symbol.json"

# A graph of one Activation: bf16 in, bf16 out.
RELU_JSON = """{"nodes": [{"op": "null", "name": "data", "inputs": []},
  {"op": "Activation", "name": "relu0", "attrs": {"act_type": "relu"}, "inputs": [[0, 0, 0]]}],
  "arg_nodes": [0], "heads": [[1, 0, 0]]}"""


def rand(shape, seed=1):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def cli_outputs(cli, tmp_path, model_args, inputs, *options):
    """Runs `ampfuse run` on the same inputs and returns its saved outputs (bf16 as f32)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    args = ["run", *model_args, "--repeat", "1", "--no-baseline", "--save-outputs", tmp_path / "out"]
    for name, x in inputs.items():
        np.save(tmp_path / f"{name}.npy", x)
        args += ["--inputs", f"{name}={tmp_path / f'{name}.npy'}"]
    cli(*args, *options)
    return sorted((tmp_path / "out").glob("*.npy"))


@pytest.mark.parametrize("amp", [None, "bf16"])
def test_default_model_bitwise_as_cli(cli, tmp_path, amp):
    model = ampfuse.load(amp=amp)
    assert model.input_names == ["data"]
    x = rand((2, 3, 32, 32))
    (y,) = model(data=x)
    assert y.shape[0] == 2
    options = ["--amp", amp] if amp else []
    (saved,) = cli_outputs(cli, tmp_path, [], {"data": x}, *options)
    assert np.array_equal(y.astype(np.float32), np.load(saved))


def test_cifar_resnet_as_cli_and_interpreter(cli, tmp_path, models):
    path = models / CIFAR
    model = ampfuse.load(path, shapes={"data": (1, 3, 32, 32)})
    x = rand((1, 3, 32, 32), seed=2)
    (y,) = model(data=x)
    assert y.dtype == np.float32 and y.shape == (1, 10)
    (saved,) = cli_outputs(cli, tmp_path, [path], {"data": x})
    assert np.array_equal(y, np.load(saved))
    # The reference interpreter computes the graph as written (BatchNorm not folded).
    (reference,) = cli_outputs(cli, tmp_path / "interp", [path], {"data": x}, "--interpreter")
    np.testing.assert_allclose(y, np.load(reference), rtol=1e-4, atol=1e-4)


def test_cifar_resnet_bf16_amp(cli, tmp_path, models):
    path = models / CIFAR
    model = ampfuse.load(path, shapes={"data": (1, 3, 32, 32)}, amp="bf16", cast_params_offline=True)
    x = rand((1, 3, 32, 32), seed=3)
    (y,) = model(data=x)
    (saved,) = cli_outputs(cli, tmp_path, [path], {"data": x}, "--amp", "bf16", "--cast-params-offline")
    assert np.array_equal(y.astype(np.float32), np.load(saved))
    assert model.compile_stats["amp"]["lp16_nodes"] > 0


def test_bf16_in_bf16_out():
    model = ampfuse.load(RELU_JSON)
    x = rand((4, 5)).astype(ml_dtypes.bfloat16)
    (y,) = model(data=x)
    assert y.dtype == ml_dtypes.bfloat16
    assert np.array_equal(y.view(np.uint16), np.maximum(x, 0).view(np.uint16))
    assert model.dtypes == {"data": "bf16"}


def test_other_dtypes_and_signatures():
    model = ampfuse.load(RELU_JSON)
    for dtype in (np.float32, np.float16, np.float64, np.int32):
        x = (rand((3, 4)) * 10).astype(dtype)
        (y,) = model(data=x)
        assert y.dtype == dtype and np.array_equal(y, np.maximum(x, 0))
    x = rand((7, 2))
    (y,) = model(data=x)  # a new shape compiles a new signature
    assert np.array_equal(y, np.maximum(x, 0))
    assert model.shapes == {"data": (7, 2)}
    assert model.compile_stats["signatures"] == 5
    (y,) = model(data=rand((3, 4)))  # cached
    assert model.compile_stats["signatures"] == 5


class DlpackOnly:
    """Something that is not a NumPy array and offers its memory through DLPack alone."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, *args, **kwargs):
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_inputs_are_not_copied():
    model = ampfuse.load()
    x = rand((1, 3, 32, 32))
    (expected,) = model(data=x)
    assert model._native._last_input_pointers()["data"] == x.ctypes.data
    (y,) = model(data=DlpackOnly(x))
    assert model._native._last_input_pointers()["data"] == x.ctypes.data
    assert np.array_equal(y, expected)
    # Not contiguous: copied densely, same result.
    f = np.asfortranarray(x.reshape(1, 3, 32, 32).transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
    assert not f.flags.c_contiguous and np.array_equal(f, x)
    (y,) = model(data=f)
    assert model._native._last_input_pointers()["data"] != f.ctypes.data
    assert np.array_equal(y, expected)


def test_outputs_outlive_the_next_run():
    model = ampfuse.load()
    x1, x2 = rand((1, 3, 32, 32), 4), rand((1, 3, 32, 32), 5)
    (y1,) = model(data=x1)
    kept = y1.copy()
    (y2,) = model(data=x2)  # must not write over y1, which Python still holds
    assert np.array_equal(y1, kept) and not np.array_equal(y1, y2)


def test_threads():
    model = ampfuse.load()
    xs = [rand((1, 3, 32, 32), s) for s in range(4)]
    expected = [model(data=x)[0] for x in xs]
    results = [None] * 4

    def work(k):
        results[k] = model(data=xs[k])[0]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r, e in zip(results, expected):
        assert np.array_equal(r, e)


def test_params_dict_as_cli_inputs(cli, tmp_path, models):
    path = models / "mlp_legacy_000800-test-symbol.json"
    shapes = {"data": (2, 6)}
    weights = ampfuse.load(path, shapes=shapes).weights
    assert weights and all(dtype == "f32" for _, dtype in weights.values())
    rng = np.random.default_rng(7)
    # Positive: BatchNorm variances among them.
    params = {n: rng.uniform(0.5, 1.5, shape).astype(np.float32) for n, (shape, _) in weights.items()}
    x = rand((2, 6), 8)
    model = ampfuse.load(path, params, shapes=shapes)
    outputs = model(data=x)
    saved = cli_outputs(cli, tmp_path, [path, "--shape", "data=2,6"], {"data": x, **params})
    assert len(saved) == len(outputs) == 1 and np.array_equal(outputs[0], np.load(saved[0]))
    # Left out: random values, with the CLI's warning.
    first = sorted(params)[0]
    with pytest.warns(UserWarning, match=f"no array for 1 weight.*{first}"):
        ampfuse.load(path, {n: a for n, a in params.items() if n != first}, shapes=shapes)


def test_emulated_device_runs_the_device_path():
    x = rand((1, 3, 32, 32), 9)
    (cpu,) = ampfuse.load()(data=x)
    model = ampfuse.load(device="cuda-emulated")
    (emulated,) = model(data=x)
    assert model.compile_stats["device"] != "cpu"
    np.testing.assert_allclose(emulated, cpu, rtol=1e-5, atol=1e-5)


def test_params_file_gives_mxnets_output(models):
    """tests/data/params: a Gluon MLP exported by MXNet 1.9.1, its weights and MXNet's output."""
    data = models.parent / "tests" / "data" / "params"
    model = ampfuse.load(data / "mlp-symbol.json", str(data / "mlp-0000.params"))
    (y,) = model(data=np.load(data / "mlp_input.npy"))
    want = np.load(data / "mlp_output.npy")
    np.testing.assert_allclose(y, want, rtol=0, atol=1e-5)
    (random,) = ampfuse.load(data / "mlp-symbol.json")(data=np.load(data / "mlp_input.npy"))
    assert np.abs(random - want).max() > 0.01  # the file is what made them agree
