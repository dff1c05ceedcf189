# Errors, convert, plan, dot and compile statistics of the Python package, against the CLI's.
import re

import numpy as np
import pytest

import ampfuse

CIFAR = "cifar_resnet20_v2-gluoncv-symbol.json"


def test_version(cli):
    assert re.fullmatch(r"\d+\.\d+\.\d+", ampfuse.__version__)
    assert cli("--version").stdout.startswith(f"ampfuse {ampfuse.__version__}\n")


def test_pyproject_version_is_the_library_version():
    from conftest import REPO
    text = (REPO / "pyproject.toml").read_text()
    assert f'\nversion = "{ampfuse.__version__}"\n' in text, "pyproject.toml's version differs from CMakeLists.txt's"


def test_error_is_a_runtime_error():
    assert issubclass(ampfuse.Error, RuntimeError)


def test_unknown_input_names_it_and_lists_the_inputs():
    model = ampfuse.load()
    with pytest.raises(ampfuse.Error, match=r"no variable 'bogus' \(its input: data\)"):
        model(bogus=np.zeros((1, 3, 32, 32), np.float32))


def test_unknown_input_of_a_file_model(models):
    model = ampfuse.load(models / CIFAR, shapes={"data": (1, 3, 32, 32)})
    with pytest.raises(ampfuse.Error, match=r"the model has no variable 'image' \(its inputs: data\)"):
        model(image=np.zeros((1, 3, 32, 32), np.float32))


def test_wrong_shape_says_which_shape_it_takes():
    model = ampfuse.load()
    with pytest.raises(ampfuse.Error, match=r"variable 'data' is bound to f32\[1,3,16,16\] but the graph needs "
                                            r"f32\[1,3,32,32\]"):
        model(data=np.zeros((1, 3, 16, 16), np.float32))
    with pytest.raises(ampfuse.Error, match=r"the default model takes data of shape N,3,32,32"):
        ampfuse.load(shapes={"data": (1, 3, 16, 16)}).plan


def test_wrong_shape_against_given_shapes(models):
    model = ampfuse.load(models / CIFAR, shapes={"data": (1, 3, 32, 32)})
    with pytest.raises(ampfuse.Error, match=r"data"):
        model(data=np.zeros((1, 3, 30, 32), np.float32))


def test_wrong_dtype_names_the_input():
    model = ampfuse.load()
    with pytest.raises(ampfuse.Error, match=r"data"):
        model(data=np.zeros((1, 3, 32, 32), np.complex64))


def test_missing_shape_names_the_input(models):
    with pytest.raises(ampfuse.Error, match=r"the shape of data is unknown"):
        ampfuse.load(models / CIFAR).plan


def test_malformed_json_text_names_the_source():
    with pytest.raises(ampfuse.Error, match=r"<symbol JSON text>"):
        ampfuse.load('{"nodes": [')


def test_missing_file(tmp_path):
    with pytest.raises(ampfuse.Error, match=r"nope-symbol\.json: no such file"):
        ampfuse.load(tmp_path / "nope-symbol.json")


def test_bad_options_name_the_option():
    with pytest.raises(ampfuse.Error, match=r"--amp int4: expected off, bf16 or fp16"):
        ampfuse.load(amp="int4")
    with pytest.raises(ampfuse.Error, match=r"--device tpu"):
        ampfuse.load(device="tpu")
    with pytest.raises(ampfuse.Error, match=r"--layout nchw"):
        ampfuse.load(amp="bf16", layout="nchw")


def test_bad_params(models):
    path = models / "mlp_legacy_000800-test-symbol.json"
    with pytest.raises(ampfuse.Error, match=r"array 'nothing' names no variable of the model"):
        ampfuse.load(path, {"nothing": np.zeros(3, np.float32)}, shapes={"data": (2, 6)}).plan
    with pytest.raises(ampfuse.Error, match=r"missing\.params"):
        ampfuse.load(path, "missing.params", shapes={"data": (2, 6)})


def test_convert_as_cli_and_round_trip(cli, tmp_path, models):
    path = models / CIFAR
    text = ampfuse.convert(path, "bf16", shapes={"data": (1, 3, 32, 32)})
    cli("convert", path, "--amp", "bf16", "--shape", "data=1,3,32,32", "-o", tmp_path / "c.json")
    assert text == (tmp_path / "c.json").read_text()
    assert "amp_cast" in text
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 32, 32)).astype(np.float32)
    (converted,) = ampfuse.load(text, shapes={"data": (1, 3, 32, 32)})(data=x)
    (amp,) = ampfuse.load(path, shapes={"data": (1, 3, 32, 32)}, amp="bf16")(data=x)
    (f32,) = ampfuse.load(path, shapes={"data": (1, 3, 32, 32)})(data=x)
    np.testing.assert_allclose(converted.astype(np.float32), amp.astype(np.float32), rtol=0.05, atol=0.05)
    np.testing.assert_allclose(converted.astype(np.float32), f32, rtol=0.1, atol=0.1)
    with pytest.raises(ampfuse.Error, match=r"--amp off: expected bf16 or fp16"):
        ampfuse.convert(path, None)


def test_plan_dot_stats_as_cli(cli, tmp_path, models):
    path = models / CIFAR
    model = ampfuse.load(path, shapes={"data": (1, 3, 32, 32)}, amp="bf16")
    plan = model.plan
    printed = cli("run", path, "--shape", "data=1,3,32,32", "--amp", "bf16", "--repeat", "1", "--no-baseline").stdout
    plan_line = next(l for l in printed.splitlines() if l.startswith("plan:"))
    memory_line = next(l for l in printed.splitlines() if l.startswith("memory:"))
    assert plan.splitlines()[0] == plan_line
    assert memory_line in plan.splitlines()
    assert re.search(r"^kernels: \d+ compiled \(cold \d+, disk \d+, memory \d+\) in [0-9.]+ s$", plan, re.M)

    cli("dot", path, "--shape", "data=1,3,32,32", "--amp", "bf16", "-o", tmp_path / "plan.dot")
    assert model.dot() == (tmp_path / "plan.dot").read_text()

    stats = model.compile_stats
    assert stats["device"] == "cpu" and stats["kernels"] > 0 and stats["external_ops"] > 0
    assert stats["folded_batchnorms"] > 0 and stats["fallbacks"] == []
    assert stats["amp"]["target"] == "bf16" and stats["amp"]["casts_final"] > 0
    assert model.shapes == {"data": (1, 3, 32, 32)}
    assert model.input_names == ["data"] and len(model.output_names) == 1
    unfused = ampfuse.load(path, shapes={"data": (1, 3, 32, 32)}, fuse=False)
    assert unfused.plan.startswith("plan:    unfused (--no-fuse) on cpu")
