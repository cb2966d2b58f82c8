"""Echo's host reference (``echo::reference::all_reduce``) on numpy arrays: no GPU, no torch.

It is the C++ reference itself, compiled for a fixed table of instantiations
(:func:`instantiations`), so its results are bit-identical to the GPU path's.

    >>> outs = all_reduce([x0, x1], quant="zero_aware", bits=4, group_size=128)
    >>> chain = ChainState(ranks=2, capacity=n, storage="int8")     # error feedback
    >>> outs = all_reduce([x0, x1], chain=chain)                     # ... once per call of the chain
    >>> chain.reset()                                                # at a pass boundary
    >>> outs = all_reduce([x0, x1], rotate=True, clip=0.93, chain=chain)   # outlier-robust 4-bit
    >>> outs = all_reduce([x0, x1], rotate=True, chain=chain, closes=True) # the chain's last call
    >>> residual_rms_norm(outs[0], residual0, weight, 1e-6)          # the fused epilogue, rank 0

bfloat16 values travel as their bit patterns in uint16 arrays, with ``dtype="bf16"``.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from . import _reference
from ._reference import ChainState

__all__ = ["all_reduce", "reduce_scatter", "all_gather", "residual_rms_norm", "ChainState", "instantiations",
           "canonical_dtype", "clip_1024"]

_DTYPES = {"f32": "f32", "float32": "f32", "f16": "f16", "float16": "f16", "bf16": "bf16", "bfloat16": "bf16"}
_NUMPY = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}


def canonical_dtype(dtype) -> str:
    """'f32', 'f16' or 'bf16' for a name or numpy dtype (uint16 means bf16 bits)."""
    if isinstance(dtype, str) and dtype in _DTYPES:
        return _DTYPES[dtype]
    d = np.dtype(dtype)
    if d == np.float32:
        return "f32"
    if d == np.float16:
        return "f16"
    if d == np.uint16 or d == np.int16:
        return "bf16"
    raise ValueError(f"echo_allreduce.reference: unsupported dtype {dtype!r} (float32, float16, bf16 as uint16)")


def clip_1024(clip) -> int:
    """A clip ratio (None: no clip) as the table's 1024ths: 0.93 -> 952."""
    if clip is None:
        return 1024
    r = int(round(float(clip) * 1024))  # (870 / 1024 stays 870)
    if not 0 < r <= 1024:
        raise ValueError(f"clip must be in (0, 1] (None: no clip), got {clip!r}")
    return r


def instantiations() -> list[dict]:
    """The compiled table: one dict per (quant, bits, group_size, rotate, clip, comp, storage); clip
    is the ratio in 1024ths (1024: none). ``reduce_scatter`` / ``all_gather``: whether those are
    compiled for the entry too (all_gather ignores comp and storage)."""
    keys = ("quant", "bits", "group_size", "rotate", "clip", "comp", "storage", "reduce_scatter", "all_gather")
    return [dict(zip(keys, e)) for e in _reference.instantiations()]


def all_reduce(
    inputs: Sequence[np.ndarray],
    *,
    quant: str = "zero_aware",
    bits: int = 4,
    group_size: int = 128,
    comp: Optional[str] = None,
    storage: Optional[str] = None,
    chain: Optional[ChainState] = None,
    dtype=None,
    out: Optional[Sequence[np.ndarray]] = None,
    rotate: bool = False,
    clip: Optional[float] = None,
    closes: bool = False,
) -> list[np.ndarray]:
    """Echo's all-reduce over ``len(inputs)`` simulated ranks; returns one output per rank.

    inputs: one array per rank, all of one shape and element type (float32, float16, or uint16
    holding bf16 bits with ``dtype="bf16"``). ``comp`` defaults to 'error_feedback' when a chain
    is given and 'none' otherwise; ``storage`` to the chain's. ``out``: arrays to write into
    (an output may be its rank's input). quant 'none' ignores bits and group_size. ``rotate``:
    Hadamard-rotated groups; ``clip``: the group's range shrunk to that ratio before the fit;
    ``closes``: the call that closes its chain (8-bit codes of x plus the chain's errors, none
    kept, the chain left fresh).
    """
    if len(inputs) == 0:
        raise ValueError("echo_allreduce.reference.all_reduce: no inputs (one array per rank)")
    xs, t, shape = _inputs("all_reduce", inputs, dtype)
    comp, storage = _comp(comp, storage, chain)
    out = _outputs("all_reduce", out, len(xs), shape, t)
    _reference.all_reduce(
        [x.reshape(-1) for x in xs], [o.reshape(-1) for o in out], t, quant, bits, group_size, bool(rotate),
        clip_1024(clip), comp, storage, chain, bool(closes)
    )
    return list(out)


def reduce_scatter(
    inputs: Sequence[np.ndarray],
    *,
    quant: str = "zero_aware",
    bits: int = 4,
    group_size: int = 128,
    comp: Optional[str] = None,
    storage: Optional[str] = None,
    chain: Optional[ChainState] = None,
    dtype=None,
    out: Optional[Sequence[np.ndarray]] = None,
    rotate: bool = False,
    clip: Optional[float] = None,
) -> list[np.ndarray]:
    """Echo's sequence-parallel reduce-scatter over ``len(inputs)`` simulated ranks
    (``echo::reference::reduce_scatter``): rank r gets segment r of the sum, the ``n / P`` values
    from ``r n / P`` on of the flattened inputs (Megatron's contiguous segments; a segment must be
    whole groups). Each value is quantized once, on its way to its owner; the owner's fp32 sum is
    rounded once to the element type. With a chain the send errors are kept and fed into its next
    call (not with storage step8 / step4). Returns one flat array of ``n / P`` values a rank.
    Arguments as :func:`all_reduce`'s; :func:`instantiations` says which entries have it."""
    xs, t, _ = _inputs("reduce_scatter", inputs, dtype)
    comp, storage = _comp(comp, storage, chain)
    n, p = xs[0].size, len(xs)
    out = _outputs("reduce_scatter", out, p, (n // p,), t)
    _reference.reduce_scatter([x.reshape(-1) for x in xs], [o.reshape(-1) for o in out], t, quant, bits, group_size,
                              bool(rotate), clip_1024(clip), comp, storage, chain)
    return list(out)


def all_gather(
    inputs: Sequence[np.ndarray],
    *,
    quant: str = "zero_aware",
    bits: int = 4,
    group_size: int = 128,
    dtype=None,
    out: Optional[Sequence[np.ndarray]] = None,
    rotate: bool = False,
    clip: Optional[float] = None,
) -> list[np.ndarray]:
    """Echo's all-gather over ``len(inputs)`` simulated ranks, as an object of these parameters
    runs it (``echo::reference::all_gather`` of the named quantizer's closing one: 8 bits, the
    same family, group and rotation, no clip): each rank's segment (``inputs[r]``, m values, whole
    groups) is quantized once, and every rank, its owner included, decodes the same codes, so all
    ranks hold the same bits. Returns one flat array of ``P m`` values a rank (segment j from rank
    j)."""
    xs, t, _ = _inputs("all_gather", inputs, dtype)
    m, p = xs[0].size, len(xs)
    out = _outputs("all_gather", out, p, (m * p,), t)
    _reference.all_gather([x.reshape(-1) for x in xs], [o.reshape(-1) for o in out], t, quant, bits, group_size,
                          bool(rotate), clip_1024(clip))
    return list(out)


def _inputs(who: str, inputs: Sequence[np.ndarray], dtype) -> tuple:
    """The ranks' inputs as C-contiguous arrays of one shape, their element type and shape."""
    if len(inputs) == 0:
        raise ValueError(f"echo_allreduce.reference.{who}: no inputs (one array per rank)")
    xs = [np.ascontiguousarray(x) for x in inputs]
    t = canonical_dtype(dtype if dtype is not None else xs[0].dtype)
    shape = xs[0].shape
    for r, x in enumerate(xs):
        if x.shape != shape:
            raise ValueError(f"echo_allreduce.reference.{who}: input {r} has shape {x.shape}, input 0 {shape}")
    return xs, t, shape


def _comp(comp: Optional[str], storage: Optional[str], chain) -> tuple:
    """comp defaults to 'error_feedback' with a chain, 'none' without; storage to the chain's."""
    if comp is None:
        comp = "error_feedback" if chain is not None else "none"
    if storage is None:
        storage = chain.storage if chain is not None else ""
    return comp, storage


def _outputs(who: str, out, ranks: int, shape: tuple, t: str) -> list:
    """Fresh outputs, or the caller's, checked: written in place, an output that is not a
    C-contiguous, writeable array of the right shape and element type would be written through a
    copy, and the caller's left as it was."""
    if out is None:
        return [np.empty(shape, dtype=_NUMPY[t]) for _ in range(ranks)]
    out = list(out)
    if len(out) != ranks:
        raise ValueError(f"echo_allreduce.reference.{who}: {len(out)} outputs for {ranks} inputs")
    for r, o in enumerate(out):
        if not isinstance(o, np.ndarray) or o.shape != shape or o.dtype != np.dtype(_NUMPY[t]):
            raise ValueError(f"echo_allreduce.reference.{who}: out[{r}] must be a numpy array of shape {shape} "
                             f"and dtype {np.dtype(_NUMPY[t])}")
        if not (o.flags.c_contiguous and o.flags.writeable):
            raise ValueError(f"echo_allreduce.reference.{who}: out[{r}] must be C-contiguous and writeable "
                             "(it is written in place)")
    return out


def residual_rms_norm(out: np.ndarray, residual: np.ndarray, weight: np.ndarray, epsilon: float, dtype=None) -> np.ndarray:
    """The fused epilogue's spec (``echo::reference::residual_rms_norm``) on one rank, in place:
    ``residual`` becomes residual + out (rounded once), ``out`` the RMSNorm of its rows (of
    ``weight.size`` values) times weight. All three C-contiguous, writeable where written, of one
    element type. Returns out."""
    t = canonical_dtype(dtype if dtype is not None else out.dtype)
    for name, a in (("out", out), ("residual", residual)):
        if not (isinstance(a, np.ndarray) and a.flags.c_contiguous and a.flags.writeable):
            raise ValueError(f"echo_allreduce.reference.residual_rms_norm: {name} must be a C-contiguous, writeable "
                             "numpy array (it is written in place)")
    _reference.residual_rms_norm(out.reshape(-1), residual.reshape(-1), np.ascontiguousarray(weight).reshape(-1),
                                 float(epsilon), t)
    return out
