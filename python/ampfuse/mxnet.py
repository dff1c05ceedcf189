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

This module needs only MXNet: it does not import ampfuse's nanobind module, so that it
works (and fails) on its own.
"""

import os

import mxnet as mx
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
_HYBRIDIZE_KEYWORDS = {"clear", "static_alloc", "static_shape", "inline_limit", "forward_bulk_size",
                       "backward_bulk_size"}


def check_options(options):
    """Raises ValueError for backend options the ampfuse backend does not take (MXNet's
    partitioner would only report that the backend failed, without the reason)."""
    unknown = sorted(set(options) - {"amp"})
    if unknown:
        raise ValueError("ampfuse backend: unknown option(s) %s; it takes amp=%s"
                         % (", ".join(unknown), "|".join(_AMP_VALUES)))
    amp = options.get("amp", "off")
    if amp not in _AMP_VALUES:
        raise ValueError("ampfuse backend: amp=%r: expected %s" % (amp, ", ".join(_AMP_VALUES)))


_mxnet_hybridize = HybridBlock.hybridize
_mxnet_optimize_for = HybridBlock.optimize_for


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


for _patched, _original in ((_hybridize, _mxnet_hybridize), (_optimize_for, _mxnet_optimize_for)):
    _patched.__doc__ = _original.__doc__
    _patched.__wrapped__ = _original
HybridBlock.hybridize = _hybridize
HybridBlock.optimize_for = _optimize_for
