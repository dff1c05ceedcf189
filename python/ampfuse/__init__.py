"""ampfuse from Python: load an MXNet model, run it fused and compiled (optionally in bf16/fp16 AMP).

    import ampfuse, numpy as np
    model = ampfuse.load("models/cifar_resnet20_v2-gluoncv-symbol.json", shapes={"data": (1, 3, 32, 32)}, amp="bf16")
    (scores,) = model(data=np.random.rand(1, 3, 32, 32).astype(np.float32))
    print(model.plan)

The native module (ampfuse._ampfuse) does the work the `ampfuse` command does, with the same
options and the same error messages: every ampfuse error is an ampfuse.Error (a RuntimeError).
"""

import os
import warnings

import numpy as np

try:
    from . import _ampfuse
except ImportError as _e:  # a build with the MXNet backend only: ampfuse.mxnet needs no more
    _ampfuse = None
    _native_missing = str(_e)

    class Error(RuntimeError):
        """An ampfuse error (the native module's own class when it is there)."""

    __version__ = "unknown"
else:
    from ._ampfuse import Error, __version__

__all__ = ["Error", "Model", "load", "convert", "__version__"]

try:  # bfloat16 arrays: optional, needed only for bf16 inputs and outputs
    import ml_dtypes as _ml_dtypes
except ImportError:  # pragma: no cover - ml_dtypes is in every environment the tests use
    _ml_dtypes = None


def _native():
    """The native module, or an ImportError that says how to get it."""
    if _ampfuse is None:
        raise ImportError("ampfuse's native module ampfuse._ampfuse is not built here (pip install ., or "
                          f"-DAMPFUSE_BUILD_PYTHON=ON): {_native_missing}")
    return _ampfuse


def _source(symbol_json):
    """A path, JSON text (a string starting with '{'), or None for the embedded default model."""
    if symbol_json is None:
        return _ampfuse.Source("default", "")
    if isinstance(symbol_json, (bytes, bytearray)):
        symbol_json = symbol_json.decode()
    if isinstance(symbol_json, str) and symbol_json.lstrip().startswith("{"):
        return _ampfuse.Source("text", symbol_json)
    return _ampfuse.Source("file", os.fspath(symbol_json))


def _shapes(shapes):
    if shapes is None:
        return {}
    out = {}
    for name, shape in shapes.items():
        dims = tuple(int(d) for d in shape)
        if any(d <= 0 for d in dims):
            raise Error(f"shapes['{name}'] = {dims}: extents must be positive integers")
        out[str(name)] = list(dims)
    return out


def _array(value, what):
    """(array, tag) for the native side: any object with __dlpack__ or the buffer protocol as it
    is (no copy); NumPy bfloat16 and bool arrays viewed as uint16 / uint8 with a tag naming the
    real type (DLPack of NumPy cannot carry them)."""
    if isinstance(value, np.ndarray):
        if _ml_dtypes is not None and value.dtype == _ml_dtypes.bfloat16:
            return value.view(np.uint16), "bf16"
        if value.dtype == np.bool_:
            return value.view(np.uint8), "bool"
        return value, ""
    if hasattr(value, "__dlpack__") or hasattr(value, "__array_interface__"):
        return value, ""
    if np.isscalar(value) or isinstance(value, (list, tuple)):
        return _array(np.asarray(value), what)
    raise Error(f"{what}: expected a NumPy array or an object with __dlpack__, got {type(value).__name__}")


def _from_native(array, tag):
    if tag == "bf16":
        if _ml_dtypes is None:
            raise Error("a bfloat16 output needs the ml_dtypes package (pip install ml_dtypes)")
        return array.view(_ml_dtypes.bfloat16)
    if tag == "bool":
        return array.view(np.bool_)
    return array


def _options(amp, fuse, fold_bn, device, cast_params_offline, constant_params, seed, lp16_ops, fp32_ops,
             widest_ops, neutral_ops, exclude, cast_narrow, layout):
    o = _ampfuse.Options()
    o.amp = "off" if amp is None else str(amp)
    o.fuse = bool(fuse)
    o.fold_bn = bool(fold_bn)
    o.device = str(device)
    o.cast_params_offline = bool(cast_params_offline)
    o.constant_params = bool(constant_params)
    o.seed = int(seed)
    o.lp16_ops = list(lp16_ops)
    o.fp32_ops = list(fp32_ops)
    o.widest_ops = list(widest_ops)
    o.neutral_ops = list(neutral_ops)
    o.exclude = list(exclude)
    o.cast_narrow = bool(cast_narrow)
    o.layout = "" if layout is None else str(layout)
    return o


def _params(params):
    if params is None or isinstance(params, (str, os.PathLike)):
        return None if params is None else os.fspath(params)
    return {str(k): _array(v, f"params['{k}']") for k, v in params.items()}


class Model:
    """A model compiled the way `ampfuse run` compiles it, once per input signature (input
    shapes and dtypes), cached. Call it with the inputs by name; inputs left out get the
    seeded random values `ampfuse run` gives them."""

    def __init__(self, native, params_given):
        self._native = native
        if params_given:
            missing = native.weights_without_values()
            if missing:
                warnings.warn(f"params: no array for {len(missing)} weight(s) of the model, which get random "
                              f"values: {', '.join(missing)}", stacklevel=3)

    def __call__(self, **inputs):
        """Runs the model; returns the outputs as a tuple of NumPy arrays (bfloat16 ones as
        ml_dtypes.bfloat16). Inputs are not copied unless they are not contiguous."""
        arrays = {name: _array(value, f"input '{name}'") for name, value in inputs.items()}
        return tuple(_from_native(a, tag) for a, tag in self._native(arrays))

    @property
    def input_names(self):
        return list(self._native.input_names)

    @property
    def output_names(self):
        return list(self._native.output_names)

    @property
    def shapes(self):
        """Input name -> shape of the signature last run (before any run: the one `shapes`
        and the model give)."""
        return {name: tuple(shape) for name, (shape, _) in self._native.input_types().items()}

    @property
    def dtypes(self):
        """Input name -> dtype name ("f32", "bf16", ...) of the same signature."""
        return {name: dtype for name, (_, dtype) in self._native.input_types().items()}

    @property
    def weights(self):
        """Weight (param and aux variable) name -> (shape, dtype name) of the same signature:
        what a `params` dict gives."""
        return {name: (tuple(shape), dtype) for name, (shape, dtype) in self._native.weight_types().items()}

    @property
    def plan(self):
        """The plan, memory and compile lines `ampfuse run` prints, for the signature last run
        (before any run: the one `shapes` and the model give; compiled now)."""
        return self._native.plan()

    def dot(self):
        """Graphviz DOT text of the fusion plan (what `ampfuse dot` writes), same signature."""
        return self._native.dot()

    @property
    def compile_stats(self):
        """What compiling did (engine::CompileStats as a dict), same signature."""
        return self._native.compile_stats()


def load(symbol_json=None, params=None, *, shapes=None, amp=None, fuse=True, fold_bn=True, device="cpu",
         cast_params_offline=False, constant_params=True, seed=0, lp16_ops=(), fp32_ops=(), widest_ops=(),
         neutral_ops=(), exclude=(), cast_narrow=False, layout=None):
    """Loads a model: `symbol_json` is an MXNet *-symbol.json path or its text (None: the
    embedded default model of `ampfuse run`). `params`: a .params file path, or a dict name ->
    array; weights it leaves out get seeded random values (`seed`), with a warning. `shapes`:
    input name -> shape where the model does not say (a call's inputs may give others). The
    other options are `ampfuse run`'s: amp (None, "bf16", "fp16"), fuse (--no-fuse; fused
    plans also run each convolution's add and LeakyReLU as oneDNN post-ops, and softmax,
    LayerNorm and last-axis reductions as generated row kernels with their neighbours),
    fold_bn (--no-fold-bn), device ("cpu", "cuda", "cuda-emulated"), cast_params_offline,
    lp16_ops, fp32_ops, widest_ops, neutral_ops, exclude, cast_narrow, layout (None or "auto":
    convolution regions channels-last on the CPU, the model's layout on a GPU; "nhwc"; "keep");
    constant_params=False recomputes what depends on the weights on every run."""
    _native()
    o = _options(amp, fuse, fold_bn, device, cast_params_offline, constant_params, seed, lp16_ops, fp32_ops,
                 widest_ops, neutral_ops, exclude, cast_narrow, layout)
    native = _ampfuse.Model(_source(symbol_json), _params(params), _shapes(shapes), o)
    return Model(native, params is not None)


def convert(symbol_json, amp="bf16", *, params=None, shapes=None, cast_params_offline=False, lp16_ops=(),
            fp32_ops=(), widest_ops=(), neutral_ops=(), exclude=(), cast_narrow=False, layout=None):
    """The model converted for AMP as MXNet symbol JSON text, as `ampfuse convert` writes it.
    `params` (path or dict) are checked against the model, as `convert --params` does."""
    _native()
    o = _options(amp, True, True, "cpu", cast_params_offline, True, 0, lp16_ops, fp32_ops, widest_ops,
                 neutral_ops, exclude, cast_narrow, layout)
    return _ampfuse.convert(_source(symbol_json), _params(params), _shapes(shapes), o)
