"""Loads the ``torch.ops.echo`` library (``_torch_ops.so``) and registers its fake implementations,
so torch.compile traces ``echo::all_reduce``, ``echo::all_reduce_rms_norm``, ``echo::update``,
``echo::reduce_scatter`` and ``echo::all_gather`` without running them.

The ops only mutate arguments (``out``, the residual and the chain state) and return nothing, so their fake
implementations have nothing to compute; the schemas' ``(a!)`` annotations tell torch.compile what
they write. ``create`` / ``check`` / ``destroy`` / ``state_bytes`` are host calls made outside compiled
regions (setup, tear-down, debugging) and need none.
"""

from __future__ import annotations

import os

import torch

_LIB = os.path.join(os.path.dirname(__file__), "_torch_ops.so")
_loaded = False
_error = None


def _load() -> bool:
    global _loaded, _error
    if _loaded or _error is not None:
        return _loaded
    if not os.path.exists(_LIB):
        _error = f"{_LIB} is not built (the package was installed with ECHO_BUILD_TORCH=OFF)"
        return False
    try:
        torch.ops.load_library(_LIB)
    except OSError as e:  # e.g. built against another torch
        _error = f"cannot load {_LIB}: {e}"
        return False

    @torch.library.register_fake("echo::all_reduce")
    def _all_reduce_fake(handle, input, out, state=None, deferred=False, closes=False):
        return None

    @torch.library.register_fake("echo::all_reduce_rms_norm")
    def _all_reduce_rms_norm_fake(handle, input, out, residual, weight, epsilon, state=None, deferred=False,
                                  closes=False):
        return None

    @torch.library.register_fake("echo::update")
    def _update_fake(handle, input, state):
        return None

    @torch.library.register_fake("echo::reduce_scatter")
    def _reduce_scatter_fake(handle, input, out, state=None):
        return None

    @torch.library.register_fake("echo::all_gather")
    def _all_gather_fake(handle, input, out):
        return None

    _loaded = True
    return True


def ops_available() -> bool:
    """Whether torch.ops.echo is loaded (the package was built with its torch ops)."""
    return _load()


def require() -> None:
    """Raise a clear error when the torch ops are missing."""
    if not _load():
        raise RuntimeError(f"echo_allreduce: the torch ops are unavailable: {_error}")
