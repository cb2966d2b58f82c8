"""Echo's error-compensated low-bit all-reduce from Python.

- ``echo_allreduce.reference``: the host reference on numpy arrays (no GPU, no torch).
- ``echo_allreduce.EchoAllReduce``: the front over a torch.distributed group (torch ops on CUDA,
  or the reference on CPU); ``echo_allreduce.tp``: Megatron-style tensor-parallel layers;
  ``echo_allreduce.hf``: a transformers model's tensor-parallel all-reduces through Echo.

Only ``reference`` is imported eagerly; the torch parts load on first use, so the package imports
where torch is absent.
"""

from . import reference

__version__ = "0.1.0"

_LAZY = {
    "EchoAllReduce": "front",
    "EchoError": "front",
    "env_mode": "config",
    "ops_available": "ops",
    "tp": None,
    "hf": None,
}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'echo_allreduce' has no attribute {name!r}")
    import importlib

    if _LAZY[name] is None:
        return importlib.import_module(f".{name}", __name__)
    return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
