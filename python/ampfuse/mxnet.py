"""ampfuse as an MXNet 1.9 backend (README, "MXNet users").

``import ampfuse.mxnet`` loads the extension library libampfuse_mxnet.so into MXNet
(``mx.library.load``), which registers the partitioner ``ampfuse``: Gluon's
``net.optimize_for(x, backend='ampfuse')`` or ``net.hybridize(backend='ampfuse')`` then run
every region of ops ampfuse supports through ampfuse, compiled once per input signature.
Backend option ``amp='bf16'|'fp16'|'off'`` chooses AMP inside the regions.

With ``MXNET_AMP_FUSE=1`` in the environment, every ``HybridBlock.hybridize()`` that names
no backend uses ``backend='ampfuse'`` with AMP (target ``AMPFUSE_AMP_DTYPE``, bf16 by
default): unchanged model code runs through ampfuse. Unset or ``0``, ``hybridize`` behaves
exactly as MXNet's own. The variable is read at each ``hybridize()`` call.

Training: MXNet's extension API does not tell a region whether MXNet trains (``is_train``),
so the form of BatchNorm and Dropout is fixed when a graph is partitioned (backend option
``training=0|1``). For a Gluon block on the ampfuse backend this module partitions the graph
once per form, on first need, and each call runs the one ``autograd.is_training()`` asks
for: inside ``autograd.record()`` (or ``autograd.train_mode()``) batch statistics, moving
statistics updated in MXNet's aux arrays, and Dropout dropping; elsewhere the inference
form. Regions a graph already holds (a SymbolBlock of an exported, partitioned model) get
the form set on their subgraph nodes. An explicit ``training=`` option fixes the form
instead.

This module needs only MXNet: it does not import ampfuse's nanobind module, so that it
works (and fails) on its own.
"""

import json
import os

import mxnet as mx
from mxnet import autograd
from mxnet.gluon import HybridBlock

__all__ = ["BACKEND", "library_path", "amp_fuse_enabled", "amp_target", "check_options"]

BACKEND = "ampfuse"
_LIBRARY_NAME = "libampfuse_mxnet.so"


def library_path():
    """Where the extension library is: next to this file (the build tree and an installed
    package put it there), else the file ``AMPFUSE_MXNET_LIBRARY`` names."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIBRARY_NAME)
    if os.path.isfile(here):
        return here
    env = os.environ.get("AMPFUSE_MXNET_LIBRARY")
    if env:
        path = os.path.abspath(env)
        if not os.path.isfile(path):
            raise ImportError("AMPFUSE_MXNET_LIBRARY=%s: no such file" % env)
        return path
    raise ImportError(
        "ampfuse.mxnet: %s is neither next to %s nor named by AMPFUSE_MXNET_LIBRARY "
        "(build it with cmake: the target ampfuse_mxnet, configured with a Python that imports mxnet)"
        % (_LIBRARY_NAME, __file__))


def _switch(name):
    value = os.environ.get(name, "")
    if value in ("", "0"):
        return False
    if value == "1":
        return True
    raise ValueError("%s=%r: expected 1, 0 or unset" % (name, value))


def amp_fuse_enabled():
    """Whether MXNET_AMP_FUSE=1 (read now)."""
    return _switch("MXNET_AMP_FUSE")


def amp_target():
    """The AMP target for MXNET_AMP_FUSE=1: AMPFUSE_AMP_DTYPE, bf16 when unset."""
    value = os.environ.get("AMPFUSE_AMP_DTYPE", "") or "bf16"
    aliases = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16", "f16": "fp16"}
    if value not in aliases:
        raise ValueError("AMPFUSE_AMP_DTYPE=%r: expected bf16 or fp16" % value)
    return aliases[value]


mx.library.load(library_path(), verbose=False)

_AMP_VALUES = ("off", "bf16", "fp16")
_SUBGRAPH_OP = "_ampfuse_subgraph"  # the subgraph operator of the library's partitioner
_TRAINING_ATTR = "ampfuse_training"  # the form of a region, on its subgraph node
_TRAINING_VALUES = (0, 1, True, False, "0", "1", "True", "False", "true", "false")
_HYBRIDIZE_KEYWORDS = {"clear", "static_alloc", "static_shape", "inline_limit", "forward_bulk_size",
                       "backward_bulk_size"}


def check_options(options):
    """Raises ValueError for backend options the ampfuse backend does not take (MXNet's
    partitioner would only report that the backend failed, without the reason)."""
    unknown = sorted(set(options) - {"amp", "training"})
    if unknown:
        raise ValueError("ampfuse backend: unknown option(s) %s; it takes amp=%s and training=0|1"
                         % (", ".join(unknown), "|".join(_AMP_VALUES)))
    amp = options.get("amp", "off")
    if amp not in _AMP_VALUES:
        raise ValueError("ampfuse backend: amp=%r: expected %s" % (amp, ", ".join(_AMP_VALUES)))
    if "training" in options and options["training"] not in _TRAINING_VALUES:
        raise ValueError("ampfuse backend: training=%r: expected 0 or 1" % (options["training"],))


_mxnet_hybridize = HybridBlock.hybridize
_mxnet_optimize_for = HybridBlock.optimize_for
_mxnet_build_cache = HybridBlock._build_cache
_mxnet_call_cached_op = HybridBlock._call_cached_op
_mxnet_clear_cached_op = HybridBlock._clear_cached_op


def _hybridize(self, active=True, backend=None, *args, **kwargs):
    # MXNET_AMP_FUSE=1 and no backend named: ampfuse with AMP. Anything else goes to MXNet's
    # own hybridize untouched, so with the variable unset nothing changes.
    if backend is None and active and amp_fuse_enabled():
        backend = BACKEND
        kwargs.setdefault("amp", amp_target())
    if backend == BACKEND:
        check_options({k: v for k, v in kwargs.items() if k not in _HYBRIDIZE_KEYWORDS})
    return _mxnet_hybridize(self, active, backend, *args, **kwargs)


def _optimize_for(self, x, *args, backend=None, **kwargs):
    if backend == BACKEND:
        check_options({k: v for k, v in kwargs.items() if k not in _HYBRIDIZE_KEYWORDS})
    return _mxnet_optimize_for(self, x, *args, backend=backend, **kwargs)


# One partition per form (training, inference) for blocks on the ampfuse backend without an
# explicit training= option. Gluon keeps one partitioned graph per block (_cached_graph,
# _cached_op, _cached_op_args, made by _build_cache from the traced graph); these wrappers
# keep the other form's three aside in _ampfuse_forms and swap them in when
# autograd.is_training() changes, building a form the first time it is needed from the
# traced (unpartitioned) graph, which _ampfuse_source keeps: once partitioned, _cached_graph
# holds the partitioned graph, and partitioning that again would find no region to make.
def _picks_form(block):
    return block._backend == BACKEND and "training" not in block._backend_opts


def _form_now():
    return 1 if autograd.is_training() else 0


def _regions_in_form(sym, form):
    """`sym` with the ampfuse regions it already holds (a SymbolBlock of an exported,
    partitioned model: partitioning again leaves them as they are) set to `form`."""
    if _SUBGRAPH_OP not in sym.tojson():
        return sym
    graph = json.loads(sym.tojson())
    for node in graph["nodes"]:
        if node["op"] == _SUBGRAPH_OP:
            node.setdefault("attrs", {})[_TRAINING_ATTR] = str(form)
    return mx.sym.load_json(json.dumps(graph))


def _build_cache(self, *args):
    if not _picks_form(self):
        return _mxnet_build_cache(self, *args)
    form = _form_now()
    source = self.__dict__.get("_ampfuse_source")
    if source is None:
        source = self._get_graph(*args)  # traces hybrid_forward: the graph before partitioning
        self._ampfuse_source = source
    data, out = source
    self._cached_graph = data, _regions_in_form(out, form)
    options = self._backend_opts
    self._backend_opts = dict(options, training=form)
    try:
        _mxnet_build_cache(self, *args)
    finally:
        self._backend_opts = options
    self._ampfuse_form = form
    return None


def _call_cached_op(self, *args):
    if _picks_form(self) and self._cached_op is not None:
        form = _form_now()
        current = self.__dict__.get("_ampfuse_form")
        if current != form:
            forms = self.__dict__.setdefault("_ampfuse_forms", {})
            forms[current] = (self._cached_graph, self._cached_op, self._cached_op_args)
            if form in forms:
                self._cached_graph, self._cached_op, self._cached_op_args = forms.pop(form)
                self._ampfuse_form = form
            else:
                self._cached_op = None  # _call_cached_op builds the form (_build_cache above)
                self._cached_op_args = []
    return _mxnet_call_cached_op(self, *args)


def _clear_cached_op(self):
    _mxnet_clear_cached_op(self)
    for name in ("_ampfuse_source", "_ampfuse_forms", "_ampfuse_form"):
        self.__dict__.pop(name, None)


for _patched, _original in ((_hybridize, _mxnet_hybridize), (_optimize_for, _mxnet_optimize_for),
                            (_build_cache, _mxnet_build_cache), (_call_cached_op, _mxnet_call_cached_op),
                            (_clear_cached_op, _mxnet_clear_cached_op)):
    _patched.__doc__ = _original.__doc__
    _patched.__wrapped__ = _original
HybridBlock.hybridize = _hybridize
HybridBlock.optimize_for = _optimize_for
HybridBlock._build_cache = _build_cache
HybridBlock._call_cached_op = _call_cached_op
HybridBlock._clear_cached_op = _clear_cached_op
