"""EchoAllReduce: Echo's all-reduce over a torch.distributed process group.

Three backends, picked at construction:

- ``cuda``: the ``torch.ops.echo`` ops on the current CUDA stream (an NCCL group, GPU tensors);
- ``reference``: every rank all-gathers the ranks' tensors over the group and runs
  ``echo_allreduce.reference`` (the C++ host reference) on them, keeping this rank's output. Its
  results are bit-identical to the ``cuda`` backend's given the same ``unquantized_below_bytes``:
  it has no GPU and so no dispatch table, and the default (None) quantizes every size there, where
  the cuda backend sums small messages exactly (on 2 x H200 below 2 MiB). It runs on CPU (a gloo
  group) and is slow;
- ``off``: plain ``torch.distributed.all_reduce`` (``ECHO_ALLREDUCE=off``, see config.py).
"""

from __future__ import annotations

import math
import weakref
import zlib
from typing import Optional

import numpy as np
import torch
import torch.distributed as dist

from . import config, reference

_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_MODES = ("fused", "deferred")


def _compiling() -> bool:
    return torch.compiler.is_compiling()


class _RefChain:
    """A chain of the reference backend: every rank keeps the state of all ranks (the reference
    simulates them all, identically everywhere). ``zero_()`` resets it, as for a state tensor."""

    def __init__(self, state: Optional[reference.ChainState], capacity: int):
        self.state = state
        self.capacity = capacity

    def zero_(self):
        if self.state is not None:
            self.state.reset()
        return self


_TAG_BYTES = 8  # comp::state_header::tag, the first field of a chain's state
RECOMMENDED_CLIP = 870 / 1024  # echo::default_quantizer's clip (include/echo/defaults.cuh)
_ONESHOT_BYTES = 1 << 20  # transport::cuda_ipc's one-shot path (exact; the chain passes through it)

# The state format of every chain new_chain() made, by id: a chain is memory in one storage's
# format, and another object's calls would read it in theirs (the device cannot tell).
_CHAIN_FORMATS: dict[int, tuple] = {}


class _ChainInfo:
    __slots__ = ("n", "pending", "capacity")

    def __init__(self):
        self.capacity = None  # elements, for a chain new_chain() made
        self.n = None  # n of the chain's last call
        self.pending = None  # (input data_ptr, n, dtype) of a deferred call awaiting update()


def add_rms_norm_torch(y: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float) -> torch.Tensor:
    """residual += y; y = RMSNorm(residual) * weight, in Llama's order, with torch's own kernels
    (what the 'off' backend and the fallbacks of the TP layers run; not bit-identical to Echo's)."""
    with torch.no_grad():
        residual.add_(y.view(residual.shape))
        r = residual.float().view(-1, weight.numel())
        h = (r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + epsilon)).to(y.dtype)
        y.copy_((h * weight.view(-1)).view(y.shape))
    return y


def _segment_shape(x: torch.Tensor, P: int, scatter: bool) -> tuple:
    """A reduce-scatter's (all-gather's) output shape: x's first dimension divided (multiplied)
    by P where it splits, else flat."""
    if scatter:
        return (x.shape[0] // P, *x.shape[1:]) if x.dim() >= 1 and x.shape[0] % P == 0 else (x.numel() // P,)
    return (x.shape[0] * P, *x.shape[1:]) if x.dim() >= 1 else (x.numel() * P,)


def exact_reduce_scatter(x: torch.Tensor, out: torch.Tensor, group) -> torch.Tensor:
    """out = this rank's segment of the sum of x over the group, by torch.distributed (exact; what
    the 'off' backend and the fallbacks run): NCCL's reduce-scatter, elsewhere (gloo has none)
    the all-reduce cut to the segment."""
    flat = x.detach().reshape(-1).contiguous()
    m, rank = out.numel(), dist.get_rank(group)
    with torch.no_grad():
        if "nccl" in str(dist.get_backend(group)):
            seg = torch.empty(m, dtype=x.dtype, device=x.device)
            dist.reduce_scatter_tensor(seg, flat, group=group)
        else:
            flat = flat.clone()
            dist.all_reduce(flat, group=group)
            seg = flat[rank * m:(rank + 1) * m]
        out.copy_(seg.view(out.shape))
    return out


def exact_all_gather(x: torch.Tensor, out: torch.Tensor, group) -> torch.Tensor:
    """out = the group's x one after the other, by torch.distributed (exact)."""
    flat = x.detach().reshape(-1).contiguous()
    with torch.no_grad():
        if "nccl" in str(dist.get_backend(group)):
            whole = torch.empty(out.numel(), dtype=x.dtype, device=x.device)
            dist.all_gather_into_tensor(whole, flat, group=group)
        else:
            parts = [torch.empty_like(flat) for _ in range(dist.get_world_size(group))]
            dist.all_gather(parts, flat, group=group)
            whole = torch.cat(parts)
        out.copy_(whole.view(out.shape))
    return out


class EchoAllReduce:
    """Echo's all-reduce among the ranks of ``group`` (collective to construct).

    quant / bits / group_size / comp / storage / transport name one entry of the compiled table
    (docs/python.md); quant 'none' ignores bits and group_size, comp 'none' ignores storage.
    ``ECHO_ALLREDUCE`` (config.py) overrides quant and bits, or turns Echo off. ``backend``:
    'cuda', 'reference' or None (cuda for a group with an NCCL backend, reference otherwise).
    """

    def __init__(
        self,
        group: Optional[dist.ProcessGroup],
        max_elements: int,
        quant: str = "zero_aware",
        bits: int = 4,
        group_size: int = 128,
        comp: str = "error_feedback",
        storage: Optional[str] = None,
        transport: str = "cuda_ipc",
        unquantized_below_bytes: Optional[int] = None,
        spin_limit_s: float = 10.0,
        backend: Optional[str] = None,
        device: Optional[torch.device] = None,
        rotate: Optional[bool] = None,
        clip: Optional[float] = None,
        sequence_parallel: bool = False,
    ):
        if group is None:
            group = dist.distributed_c10d._get_default_group()
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self._handle = 0
        self._chains: dict[int, _ChainInfo] = {}
        self.device = None
        # Construction is collective: what this rank finds wrong is held until every rank has
        # compared notes (_verdicts), so that all raise together; a rank that raised alone would leave
        # its peers in the op's all-gather (until the process group's timeout) or, with
        # ECHO_ALLREDUCE set on some ranks only, calling a different all-reduce than theirs.
        failure = None
        try:
            self._configure(max_elements, quant, bits, group_size, comp, storage, transport, unquantized_below_bytes,
                            spin_limit_s, backend, device, rotate, clip, sequence_parallel)
        except Exception as e:  # whatever it is (a TypeError too), every rank must hear of it
            failure = e
        try:
            codes = None if failure else self._codes()
            rows = self._verdicts(failure, codes, len(self._AGREED),
                                  "EchoAllReduce: rank {r} failed to set up (its own error says why)")
        finally:
            failure = None  # its traceback holds this frame: a reference cycle otherwise
        self._agree(rows, codes)
        if self.backend == "cuda":
            # boxed(): the group as the TorchScript object an op argument takes (as c10d's own ops).
            self._handle = torch.ops.echo.create(
                group.boxed(), "nccl" in str(dist.get_backend(group)), self.device.index, self.max_elements, self.quant,
                self.bits, self.group_size, self.comp, self.storage, self.transport,
                -1 if self.unquantized_below_bytes is None else self.unquantized_below_bytes,  # the op's -1: unset
                float(spin_limit_s), self.rotate, self.clip, self.sequence_parallel)

    def _configure(self, max_elements, quant, bits, group_size, comp, storage, transport, unquantized_below_bytes,
                   spin_limit_s, backend, device, rotate, clip, sequence_parallel=False) -> None:
        """This rank's part of the constructor: no collective step."""
        self.backend = None
        if max_elements <= 0:
            raise ValueError(f"EchoAllReduce: max_elements must be > 0, got {max_elements}")
        if not (0 < float(spin_limit_s) <= 86400):
            raise ValueError(f"EchoAllReduce: spin_limit_s must be in (0, 86400], got {spin_limit_s}")
        enabled, quant, bits = config.apply_env(quant, bits)
        self.max_elements = int(max_elements)
        self.quant, self.bits, self.group_size = quant, int(bits), int(group_size)
        # None: the recommended setting (docs/quality.md; echo::default_quantizer): 4-bit zero_aware
        # groups of 128 rotated and clipped to 870/1024 of their range, the error kept as int8 codes
        # (a clip's errors exceed step8's range); other quantizers plain
        recommended = (quant, self.bits, int(group_size)) == ("zero_aware", 4, 128)
        if rotate is None:
            rotate = recommended
        if clip is None:
            clip = RECOMMENDED_CLIP if recommended else 1.0
        self.rotate = bool(rotate) and quant != "none"
        self.clip = reference.clip_1024(clip) if quant != "none" else 1024  # 1024ths of the range; 1024: none
        self.sequence_parallel = bool(sequence_parallel)
        if storage is None:
            # step8 keeps an error in the data step of the value's code, which the reduce-scatter's
            # owner segment (never quantized) does not have
            storage = "int8" if self.clip != 1024 or self.sequence_parallel else "step8"
        self.comp, self.storage, self.transport = comp, storage, transport
        if unquantized_below_bytes is not None and int(unquantized_below_bytes) < 0:
            raise ValueError("EchoAllReduce: unquantized_below_bytes must be >= 0, or None (the dispatch table's; "
                             f"the reference backend then quantizes every size), got {unquantized_below_bytes}")
        self.unquantized_below_bytes = None if unquantized_below_bytes is None else int(unquantized_below_bytes)
        if comp not in ("none", "error_feedback"):
            raise ValueError(f"EchoAllReduce: comp must be 'none' or 'error_feedback', got {comp!r}")
        self.keeps_state = comp == "error_feedback"
        if self.keeps_state and self.clip != 1024 and storage in ("step8", "step4"):
            raise ValueError(f"EchoAllReduce: a clip's errors exceed what storage {storage!r} holds (+-0.99 / +-0.875 "
                             "data steps); use 'int8', 'int4' or an element storage (comp::holds_errors_of)")
        if self.keeps_state and self.sequence_parallel and storage in ("step8", "step4"):
            raise ValueError(f"EchoAllReduce: sequence_parallel: storage {storage!r} keeps an error in its code's data "
                             "step, which the reduce-scatter's own segment does not have; use 'int8' or an element storage")
        if self.sequence_parallel and transport != "cuda_ipc":
            raise ValueError("EchoAllReduce: sequence_parallel runs on transport 'cuda_ipc' (transport::nccl's staged "
                             "kernels serve the all-reduce alone)")
        if not enabled:
            backend = "off"
        elif backend is None:
            backend = "cuda" if "nccl" in str(dist.get_backend(self.group)) else "reference"
        if backend not in ("cuda", "reference", "off"):
            raise ValueError(f"EchoAllReduce: backend must be 'cuda', 'reference' or 'off', got {backend!r}")
        self.backend = backend
        if backend == "cuda":
            from . import ops

            ops.require()
            device = torch.device("cuda") if device is None else torch.device(device)
            index = torch.cuda.current_device() if device.index is None else device.index
            if device.type != "cuda" or not 0 <= index < torch.cuda.device_count():
                raise ValueError(f"EchoAllReduce: no CUDA device {device}")
            self.device = torch.device("cuda", index)
        elif backend == "reference":
            self._check_reference_entry()

    _AGREED = ("backend", "quant", "bits", "group_size", "rotate", "clip", "comp", "storage", "transport", "max_elements",
               "unquantized_below_bytes", "sequence_parallel")

    def _codes(self) -> list:
        """This rank's configuration as ints, stable across processes (hash() of a str is not);
        what the calls ignore does not count (bits of quant 'none', storage of comp 'none')."""
        def value(name: str):
            if (name in ("bits", "group_size", "rotate", "clip") and self.quant == "none") or (
                    name == "storage" and self.comp == "none"):
                return 0
            return getattr(self, name)

        return [zlib.crc32(v.encode()) if isinstance(v, str) else -1 if v is None else int(v)
                for v in map(value, self._AGREED)]

    def _agree(self, rows: list, codes: list) -> None:
        """Raises ValueError on every rank when two ranks were built differently."""
        for r, row in enumerate(rows):
            for name, theirs, ours in zip(self._AGREED, row, codes):
                if theirs != ours:
                    raise ValueError(f"EchoAllReduce: rank {r} and rank {self.rank} were built with different {name} "
                                     f"(the arguments, or {config.ENV})")

    def _verdicts(self, failure: Optional[Exception], fields: Optional[list], width: int, refused: str) -> list:
        """Collective: every rank's failure bit and its `width` ints. Raises on every rank when any
        rank failed: that rank its own error, the others RuntimeError(refused with {r} the first
        failing rank). Else every rank's ints, in rank order."""
        rows = self._gather_ints([1] + [0] * width if failure is not None else [0] + list(fields))
        if failure is not None:
            try:
                raise failure
            finally:
                failure = None
        for r, row in enumerate(rows):
            if row[0]:
                raise RuntimeError(refused.format(r=r))
        return [row[1:] for row in rows]

    def _gather_ints(self, mine: list) -> list:
        """Collective: every rank's list of ints (all of one length) over the group."""
        if "nccl" in str(dist.get_backend(self.group)):
            where = self.device if self.device is not None else torch.device("cuda", torch.cuda.current_device())
        else:
            where = torch.device("cpu")
        t = torch.tensor(mine, dtype=torch.int64, device=where)
        parts = [torch.empty_like(t) for _ in range(self.world_size)]
        dist.all_gather(parts, t, group=self.group)
        return [p.cpu().tolist() for p in parts]

    # ---- chains -------------------------------------------------------------------------------
    def state_bytes(self, n: int) -> int:
        """Bytes of chain state a call on n elements needs (0 without a compensator)."""
        if self.backend == "cuda":
            return torch.ops.echo.state_bytes(self._handle, n)
        return 0

    def new_chain(self, capacity: Optional[int] = None):
        """A fresh chain for calls of up to ``capacity`` elements (default max_elements).

        cuda: a zeroed uint8 tensor of state_bytes(capacity) bytes on this rank's device, owned by
        the caller (all zero = fresh; ``chain.zero_()`` at a pass boundary). reference: an object
        with the same ``zero_()``. off, or comp 'none': an empty tensor (ignored by the calls).
        """
        capacity = self.max_elements if capacity is None else int(capacity)
        if self.backend == "reference":
            state = reference.ChainState(self.world_size, capacity, self.storage) if self.keeps_state else None
            chain = _RefChain(state, capacity)
        elif self.backend == "cuda":
            chain = torch.zeros(self.state_bytes(capacity), dtype=torch.uint8, device=self.device)
        else:
            chain = torch.empty(0, dtype=torch.uint8)
        self._info(chain).capacity = capacity
        if self.keeps_state and self.backend == "cuda":
            key = id(chain)
            _CHAIN_FORMATS[key] = self._format()
            weakref.finalize(chain, _CHAIN_FORMATS.pop, key, None)
        return chain

    def _format(self) -> tuple:
        # A chain's errors are laid out by the storage and kept for the elements this rank owns
        # under this quantizer at this P, so a chain made for another of these would be read
        # wrong without any check failing on the device.
        q = (self.quant,) if self.quant == "none" else (self.quant, self.bits, self.group_size, self.rotate, self.clip)
        return (self.comp, self.storage, q, self.world_size, self.rank)

    def _info(self, chain) -> _ChainInfo:
        key = id(chain)
        info = self._chains.get(key)
        if info is None:
            info = self._chains[key] = _ChainInfo()
            weakref.finalize(chain, self._chains.pop, key, None)
        return info

    # ---- calls --------------------------------------------------------------------------------
    def should_use(self, x: torch.Tensor) -> bool:
        """Whether all_reduce(x) is Echo's to take: a float32 / float16 / bfloat16 contiguous tensor
        of 1 to max_elements elements and a multiple of 16 bytes; for cuda also on this rank's
        device and 16-byte aligned. False when Echo is off."""
        if self.backend == "off" or x.dtype not in _DTYPES or not x.is_contiguous():
            return False
        n = x.numel()
        if not (0 < n <= self.max_elements) or (n * x.element_size()) % 16:
            return False
        if self.backend == "cuda":
            if x.device != self.device:
                return False
            if not _compiling() and x.data_ptr() % 16:
                return False
        return True

    def fits(self, x: torch.Tensor, chain=None) -> bool:
        """Whether all_reduce(x, chain=chain) takes x by what every rank of a tensor-parallel group
        shares: dtype (float32 / float16 / bfloat16), size (1 to max_elements, and the chain's
        capacity). The autograd functions send what does not fit to torch.distributed instead.
        Device, layout and alignment are not judged here: a tensor on another device is an error,
        and the callers make x contiguous and aligned."""
        if self.backend == "off" or x.dtype not in _DTYPES:
            return False
        n = x.numel()
        if not 0 < n <= self.max_elements:
            return False
        if self.keeps_state and chain is not None:
            if self.backend == "reference":
                return n <= chain.capacity
            if not _compiling():  # (traced code skips it: the op still refuses a short chain)
                info = self._chains.get(id(chain))
                capacity = info.capacity if info is not None else None
                return n <= capacity if capacity is not None else chain.numel() >= self.state_bytes(n)
        return True

    def all_reduce(self, x: torch.Tensor, out: Optional[torch.Tensor] = None, chain=None, mode: str = "fused",
                   closes: bool = False):
        """out = sum of x over the ranks; in place (returns x) when out is None.

        chain: the call's chain (new_chain) when comp is 'error_feedback'. mode 'deferred' writes
        only this rank's own errors into the chain; update(x, chain) must follow before the chain's
        next call (it needs out, not in place). closes: the chain's last call (the last all-reduce
        of a forward pass): x plus the chain's stored errors go at 8 bits, no error is kept, and the
        chain is left fresh (fused only). Errors: ValueError for a bad argument (wrong dtype,
        device, layout, size, chain), RuntimeError for a failure on the device.
        """
        deferred = mode == "deferred"
        if closes and deferred:
            raise ValueError("EchoAllReduce.all_reduce: a closing call keeps no error: it cannot be deferred")
        closes = bool(closes) and self.keeps_state
        target = x if out is None else out
        eager = not _compiling()
        if self.backend == "reference":
            # Every rank's verdict is exchanged before the data (_reference_call): raising here on
            # one rank alone would leave its peers in gloo until the group's timeout.
            failure, prepared = None, None
            try:
                self._judge_call(x, out, chain, mode, eager)
                prepared = self._prepare_reference_call(x, target, chain, closes)
            except Exception as e:
                failure = e
            try:
                head = None if failure else [x.numel(), list(_DTYPES).index(x.dtype)]
                rows = self._verdicts(failure, head, 2,
                                      "EchoAllReduce.all_reduce: rank {r}'s call was refused (its own error says why)")
            finally:
                failure = None  # its traceback holds this frame: a cycle keeping x, out and self alive
            self._reference_call(x, target, prepared, head, rows)
        else:
            self._judge_call(x, out, chain, mode, eager)
            if self.backend == "off":
                if out is None:
                    dist.all_reduce(x, group=self.group)
                    return x
                out.copy_(x)
                dist.all_reduce(out, group=self.group)
                return out
            state = chain if self.keeps_state else None
            torch.ops.echo.all_reduce(self._handle, x, target, state, deferred, closes)
        if eager:  # only a call that was accepted leaves a deferred update pending
            self._accepted(chain, x, deferred)
        return target

    def all_reduce_add_rms_norm(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float,
                                out: Optional[torch.Tensor] = None, chain=None, mode: str = "fused",
                                closes: bool = False) -> torch.Tensor:
        """The all-reduce with vLLM's ``fused_add_rms_norm`` after it, in one launch on the cuda
        backend: ``residual += sum of x over the ranks`` (in place, one rounding to x's dtype) and
        returns ``RMSNorm(residual) * weight`` over rows of ``weight.numel()`` values, written to
        ``out`` (to x when out is None). The norm follows Llama's order: fp32 sum of squares in a
        fixed order, the row scaled and rounded to x's dtype, then times weight
        (epilogue/residual_rms_norm.cuh). chain, mode, closes: as for all_reduce. Bit-identical on
        every rank and between the cuda and reference backends; 'off' computes it with torch ops.
        """
        target = x if out is None else out
        self._judge_epilogue(x, residual, weight, epsilon)
        if self.backend == "cuda":
            deferred = mode == "deferred"
            if closes and deferred:
                raise ValueError("EchoAllReduce.all_reduce_add_rms_norm: a closing call keeps no error: it cannot be deferred")
            eager = not _compiling()
            self._judge_call(x, out, chain, mode, eager)
            state = chain if self.keeps_state else None
            torch.ops.echo.all_reduce_rms_norm(self._handle, x, target, residual, weight, float(epsilon), state, deferred,
                                               bool(closes) and self.keeps_state)
            if eager:
                self._accepted(chain, x, deferred)
            return target
        self.all_reduce(x, out, chain, mode, closes)
        if self.backend == "off":
            return add_rms_norm_torch(target, residual, weight, epsilon)
        # reference: the spec itself on this rank's arrays
        t = _DTYPES[x.dtype]
        npdt = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}[t]
        as_np = lambda a: a.detach().reshape(-1).contiguous().cpu().view(  # noqa: E731
            {"f32": torch.float32, "f16": torch.float16, "bf16": torch.int16}[t]).numpy().view(npdt).copy()
        o, r = as_np(target), as_np(residual)
        reference.residual_rms_norm(o, r, as_np(weight), float(epsilon), t)
        with torch.no_grad():
            for dst, a in ((target, o), (residual, r)):
                dst.copy_(torch.from_numpy(a.view(np.uint8)).view(x.dtype).view(dst.shape))
        return target

    # ---- sequence parallelism -----------------------------------------------------------------
    def reduce_scatter(self, x: torch.Tensor, out: Optional[torch.Tensor] = None, chain=None) -> torch.Tensor:
        """Sequence parallelism's reduce-scatter: this rank's segment of the sum of x over the
        ranks, the ``x.numel() / P`` values from ``rank * x.numel() / P`` on of the flattened sum
        (Megatron-LM's layout: contiguous along x's first dimension, so x of shape (s, ...) gives
        (s / P, ...)). Each value is quantized once, on its way to its owner, and the owner's fp32
        sum is rounded once to x's dtype; with comp 'error_feedback' the chain keeps the send
        errors (a reduce-scatter and an all-reduce of one size continue one chain). A segment is
        whole quantizer groups. Returns out (new when None: (s / P, ...) where P divides
        x.shape[0], else flat). Not in place. Needs ``sequence_parallel=True``. Errors as for
        all_reduce."""
        return self._segments("reduce_scatter", x, out, chain)

    def all_gather(self, x: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Sequence parallelism's all-gather: the ranks' x (m values each, whole quantizer groups)
        one after the other, rank r's at ``[r m, (r + 1) m)`` (x of shape (s, ...) gives (P s,
        ...)). Each rank's x is sent as one code and decoded on every rank, its own included, so
        every rank holds the same bits. The codes are the closing call's (8 bits, the same group
        and rotation, no clip): no chain takes back what an all-gather injects, since its output
        is the next GEMM's input and not a residual stream (at 4 bits a TP = 2 training run
        diverged, docs/quality.md). Returns out (new when None). Not in place. Needs
        ``sequence_parallel=True``."""
        return self._segments("all_gather", x, out, None)

    def fits_segments(self, x: torch.Tensor, scatter: bool, chain=None) -> bool:
        """Whether reduce_scatter(x) (scatter) or all_gather(x) takes x by what every rank shares:
        dtype, size (the message up to max_elements and the chain's capacity) and P segments of
        whole groups. The autograd functions send what does not fit to torch.distributed."""
        if self.backend == "off" or not self.sequence_parallel or x.dtype not in _DTYPES:
            return False
        P = self.world_size
        n = x.numel() if scatter else x.numel() * P
        granule = 256 if self.quant == "none" else self.group_size
        if not 0 < n <= self.max_elements or n % P or (n // P) % granule:
            return False
        return self.fits(x, chain) if scatter else True

    def _segments(self, op: str, x: torch.Tensor, out: Optional[torch.Tensor], chain) -> torch.Tensor:
        what = f"EchoAllReduce.{op}"
        scatter = op == "reduce_scatter"
        eager = not _compiling()
        if self.backend == "reference":
            # collective verdicts first, as for all_reduce: a call refused on one rank raises on all
            failure, prepared = None, None
            try:
                out = self._judge_segments(what, x, out, chain, scatter, eager)
                prepared = self._prepare_reference_segments(x, chain, scatter)
            except Exception as e:
                failure = e
            try:
                head = None if failure else [x.numel(), list(_DTYPES).index(x.dtype)]
                rows = self._verdicts(failure, head, 2, what + ": rank {r}'s call was refused (its own error says why)")
            finally:
                failure = None
            self._reference_segments(what, x, out, prepared, head, rows, scatter)
        else:
            out = self._judge_segments(what, x, out, chain, scatter, eager)
            if self.backend == "off":
                (exact_reduce_scatter if scatter else exact_all_gather)(x, out, self.group)
            elif scatter:
                torch.ops.echo.reduce_scatter(self._handle, x, out, chain if self.keeps_state else None)
            else:
                torch.ops.echo.all_gather(self._handle, x, out)
        if eager and scatter and self.backend != "off":
            self._accepted(chain, x, False)
        return out

    def _judge_segments(self, what: str, x: torch.Tensor, out: Optional[torch.Tensor], chain, scatter: bool,
                        eager: bool) -> torch.Tensor:
        """What the front refuses before a reduce-scatter or all-gather; returns out (made when None)."""
        if not self.sequence_parallel:
            raise ValueError(f"{what}: this object does not serve sequence parallelism (EchoAllReduce(..., "
                             "sequence_parallel=True))")
        if not isinstance(x, torch.Tensor) or (out is not None and not isinstance(out, torch.Tensor)):
            raise TypeError(f"{what}: x and out must be tensors")
        if x.dtype not in _DTYPES:
            raise ValueError(f"{what}: dtype must be float32, float16 or bfloat16, got {x.dtype}")
        P = self.world_size
        if scatter and x.numel() % P:
            raise ValueError(f"{what}: x's {x.numel()} elements are not P = {P} equal segments")
        if out is None:
            out = torch.empty(_segment_shape(x, P, scatter), dtype=x.dtype, device=x.device)
        want = x.numel() // P if scatter else x.numel() * P
        if out.dtype != x.dtype or out.numel() != want:
            raise ValueError(f"{what}: out must be {want} elements of x's dtype {x.dtype}, got {out.numel()} {out.dtype}")
        if self.backend != "off":
            n = x.numel() if scatter else want
            if n > self.max_elements:
                raise ValueError(f"{what}: a message of {n} elements exceeds max_elements = {self.max_elements}")
            if scatter and self.keeps_state:
                if chain is None:
                    raise ValueError(f"{what}: comp 'error_feedback' needs a chain (new_chain())")
                if eager:
                    self._begin(chain)
        return out

    def _prepare_reference_segments(self, x: torch.Tensor, chain, scatter: bool) -> tuple:
        """The reference call's quantizer, compensator and chain, as the cuda backend dispatches:
        below unquantized_below_bytes the 16-bit path, where a segment is whole granules of 256."""
        n = x.numel() if scatter else x.numel() * self.world_size
        quant = self.quant
        if self.unquantized_below_bytes is not None and n * x.element_size() < self.unquantized_below_bytes \
                and (n // self.world_size) % 256 == 0:
            quant = "none"
        keeps = scatter and self.keeps_state
        if keeps and x.numel() > chain.capacity:
            raise ValueError(f"EchoAllReduce.reduce_scatter: {x.numel()} elements exceed the chain's capacity "
                             f"{chain.capacity}")
        flat = x.detach().reshape(-1).contiguous().view(torch.uint8)
        return flat, quant, self.comp if keeps else "none", chain.state if keeps else None

    def _reference_segments(self, what: str, x: torch.Tensor, out: torch.Tensor, prepared: tuple, head: list,
                            rows: list, scatter: bool) -> None:
        for r, row in enumerate(rows):
            if row != head:
                raise RuntimeError(f"{what}: ranks made different calls (n, element type): rank {r} {row}, rank "
                                   f"{self.rank} {head}; nothing was summed and the chain is unchanged")
        flat, quant, comp, state = prepared
        parts = [torch.empty_like(flat) for _ in range(self.world_size)]
        dist.all_gather(parts, flat, group=self.group)
        t = _DTYPES[x.dtype]
        npdt = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}[t]
        arrays = [p.cpu().numpy().view(npdt) for p in parts]
        rot, clip = (self.rotate, self.clip / 1024) if quant != "none" else (False, 1.0)
        kw = dict(quant=quant, bits=self.bits, group_size=self.group_size, dtype=t, rotate=rot,
                  clip=None if clip == 1 else clip)
        if scatter:
            outs = reference.reduce_scatter(arrays, comp=comp, storage=self.storage if comp != "none" else "",
                                            chain=state, **kw)
        else:
            outs = reference.all_gather(arrays, **kw)
        mine = torch.from_numpy(outs[self.rank].view(np.uint8)).view(x.dtype).view(out.shape)
        with torch.no_grad():
            out.copy_(mine)

    def _judge_epilogue(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
        what = "EchoAllReduce.all_reduce_add_rms_norm"
        for name, t in (("residual", residual), ("weight", weight)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{what}: {name} must be a tensor")
            if t.dtype != x.dtype or t.device != x.device:
                raise ValueError(f"{what}: {name} must have x's dtype and device ({x.dtype}, {x.device}), "
                                 f"got {t.dtype}, {t.device}")
            if not t.is_contiguous():
                raise ValueError(f"{what}: {name} must be contiguous")
        h = weight.numel()
        if residual.numel() != x.numel():
            raise ValueError(f"{what}: residual has {residual.numel()} elements, x {x.numel()}")
        if h == 0 or h % 8 or h > 16384 or x.numel() % h:
            raise ValueError(f"{what}: rows of weight.numel() = {h} values: a multiple of 8 up to 16384 that divides "
                             f"x.numel() = {x.numel()}")
        if not (math.isfinite(epsilon) and epsilon >= 0):
            raise ValueError(f"{what}: epsilon must be finite and >= 0, got {epsilon}")

    def _judge_call(self, x: torch.Tensor, out: Optional[torch.Tensor], chain, mode: str, eager: bool) -> None:
        """What the front refuses before a call (the op and the reference judge the tensors)."""
        if mode not in _MODES:
            raise ValueError(f"EchoAllReduce.all_reduce: mode must be 'fused' or 'deferred', got {mode!r}")
        if mode == "deferred" and (out is None or out is x):
            raise ValueError("EchoAllReduce.all_reduce: a deferred call needs an out tensor apart from x")
        if self.backend == "off":
            if out is not None and (out.dtype != x.dtype or out.shape != x.shape):  # copy_ would broadcast, cast
                raise ValueError("EchoAllReduce.all_reduce: out must have x's dtype and shape")
            return
        if self.keeps_state and chain is None:
            raise ValueError("EchoAllReduce.all_reduce: comp 'error_feedback' needs a chain (new_chain())")
        if eager:
            self._begin(chain)

    def update(self, x: torch.Tensor, chain) -> None:
        """The deferred half of ``all_reduce(x, out, chain, mode='deferred')``: same x, unchanged."""
        if self.backend == "off" or not self.keeps_state:
            return
        if not _compiling():
            info = self._info(chain)
            if info.pending is None:
                raise RuntimeError("EchoAllReduce.update: this chain has no deferred call awaiting its update")
            if info.pending != (self._ptr(x), x.numel(), x.dtype):  # the dtype too: a view as another type
                raise ValueError("EchoAllReduce.update: x must be the input of the chain's deferred call")
        if self.backend == "cuda":
            torch.ops.echo.update(self._handle, x, chain)
        if not _compiling():  # settled only once the op took it
            self._info(chain).pending = None

    def reset_chain(self, chain) -> None:
        """Start ``chain`` afresh (a pass boundary), stream-ordered and capturable in a CUDA graph.

        cuda: zeroes only the chain's tag, the first 8 bytes of its header (comp/compensator.cuh):
        a call on a chain whose tag is 0 reads its stored errors as zero and writes every one it
        keeps, so the rest of the memory need not be cleared. ``chain.zero_()`` gives the same
        results but writes the whole state (state_bytes(capacity)): at a 16k-token capacity about
        45 us a reset on H200, paid every decode step (docs/python.md).
        reference: ``chain.zero_()``. Clears a pending deferred update as a fresh chain would.
        """
        if not self.keeps_state or chain is None:
            return
        if self.backend == "cuda":
            if chain.numel() < _TAG_BYTES:
                raise ValueError("EchoAllReduce.reset_chain: not a chain of this object (new_chain())")
            chain[:_TAG_BYTES].zero_()
        else:
            chain.zero_()
        if not _compiling():
            self._info(chain).pending = None

    def _begin(self, chain) -> None:
        """Chain bookkeeping (eager only), so misuse raises here rather than pass unnoticed: no call
        while a deferred call awaits its update, no chain of another state format. (A shape change
        needs nothing: the chain's header records n, and a quantized call with another n starts a
        fresh chain, on the device as in the reference; calls on an exact path (the one-shot kernel,
        NCCL's own) leave it untouched.)"""
        if not self.keeps_state:
            return
        fmt = _CHAIN_FORMATS.get(id(chain)) if self.backend == "cuda" else None
        if fmt is not None and fmt != self._format():
            raise ValueError(f"EchoAllReduce.all_reduce: the chain was made for (comp, storage, quantizer, ranks, rank) "
                             f"{fmt}; this object is {self._format()} (use its own new_chain())")
        if self._info(chain).pending is not None:
            raise RuntimeError("EchoAllReduce.all_reduce: the chain's deferred call awaits update(x, chain) first")

    def _accepted(self, chain, x: torch.Tensor, deferred: bool) -> None:
        if not self.keeps_state:
            return
        info = self._info(chain)
        info.n = x.numel()
        info.pending = (self._ptr(x), info.n, x.dtype) if deferred else None

    @staticmethod
    def _ptr(x: torch.Tensor) -> int:
        return x.data_ptr()

    def _prepare_reference_call(self, x: torch.Tensor, target: torch.Tensor, chain, closes: bool = False) -> tuple:
        """Everything of a reference call that can fail on one rank alone, before any exchange."""
        if not isinstance(x, torch.Tensor) or not isinstance(target, torch.Tensor):
            raise TypeError("EchoAllReduce.all_reduce: x and out must be tensors")
        if x.dtype not in _DTYPES:
            raise ValueError(f"EchoAllReduce.all_reduce: dtype must be float32, float16 or bfloat16, got {x.dtype}")
        if x.layout != torch.strided or target.layout != torch.strided:
            raise ValueError("EchoAllReduce.all_reduce: x and out must be dense (strided) tensors")
        if target.dtype != x.dtype or target.shape != x.shape:
            raise ValueError("EchoAllReduce.all_reduce: out must have x's dtype and shape")
        if x.numel() > self.max_elements:
            raise ValueError(f"EchoAllReduce.all_reduce: {x.numel()} elements exceed max_elements = {self.max_elements}")
        if self.keeps_state and x.numel() > chain.capacity:
            raise ValueError(f"EchoAllReduce.all_reduce: {x.numel()} elements exceed the chain's capacity {chain.capacity}")
        nbytes = x.numel() * x.element_size()
        quant, comp, state = self.quant, self.comp, chain.state if self.keeps_state else None
        if self.unquantized_below_bytes is not None and nbytes < self.unquantized_below_bytes:
            # The cuda backend's unquantized paths: exact, the chain untouched (the one-shot kernel,
            # NCCL's own all-reduce), or the 16-bit pipeline, which keeps the chain.
            quant, closes = "none", False  # (an exact call closes nothing: the chain is as it was)
            if self.transport == "nccl" or nbytes <= _ONESHOT_BYTES:
                comp, state = "none", None
        # Raw bytes travel: every backend all-gathers uint8, whatever the dtype.
        flat = x.detach().reshape(-1).contiguous().view(torch.uint8)
        return flat, quant, comp, state, closes

    def _reference_call(self, x: torch.Tensor, target: torch.Tensor, prepared: tuple, head: list, rows: list) -> None:
        # Collective even for a refused call (all_reduce): the verdicts, n and the element type
        # are exchanged before the data, so a call refused on one rank raises on every rank (its
        # own error on the rank that made it), and ranks of different n never hand gloo buffers of
        # different sizes.
        for r, row in enumerate(rows):
            if row != head:
                types = list(_DTYPES)
                raise RuntimeError(f"EchoAllReduce.all_reduce: ranks made different calls (n, element type): rank {r} "
                                   f"{row[0]} {types[row[1]]}, rank {self.rank} {head[0]} {x.dtype}; nothing was "
                                   "summed and the chain is unchanged")
        flat, quant, comp, state, closes = prepared
        parts = [torch.empty_like(flat) for _ in range(self.world_size)]
        dist.all_gather(parts, flat, group=self.group)
        t = _DTYPES[x.dtype]
        npdt = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}[t]
        arrays = [p.cpu().numpy().view(npdt) for p in parts]
        rot, clip = (self.rotate, self.clip / 1024) if quant != "none" else (False, None)
        outs = reference.all_reduce(arrays, quant=quant, bits=self.bits, group_size=self.group_size, comp=comp,
                                    storage=self.storage if comp != "none" else "", chain=state, dtype=t,
                                    rotate=rot, clip=None if clip == 1 else clip, closes=closes)
        mine = torch.from_numpy(outs[self.rank].view(np.uint8)).view(x.dtype).view(x.shape)
        with torch.no_grad():
            target.copy_(mine)

    def _check_reference_entry(self) -> None:
        names = (self.quant, self.comp)
        for e in reference.instantiations():
            if (e["quant"], e["comp"]) == names and (self.quant == "none" or (
                    e["bits"], e["group_size"], e["rotate"], e["clip"]) == (self.bits, self.group_size, self.rotate, self.clip)) \
                    and (self.comp == "none" or e["storage"] == self.storage) \
                    and (not self.sequence_parallel or e["reduce_scatter"]):
                return
        raise ValueError(f"EchoAllReduce: no compiled reference entry quant={self.quant!r} bits={self.bits} "
                         f"group_size={self.group_size} comp={self.comp!r} storage={self.storage!r}"
                         f"{' with reduce_scatter' if self.sequence_parallel else ''}; see "
                         "echo_allreduce.reference.instantiations()")

    # ---- health and tear-down -----------------------------------------------------------------
    def check(self) -> None:
        """Raise if a launch gave up on a peer (timeout) or saw a mismatch; synchronizes the stream."""
        if self.backend == "cuda" and self._handle:
            torch.cuda.current_stream(self.device).synchronize()
            torch.ops.echo.check(self._handle)

    def close(self) -> None:
        """Collective: waits for this rank's work and for every rank (a peer may still be writing
        into this rank's workspace), then frees Echo's resources. Idempotent."""
        if self.backend == "cuda" and self._handle:
            torch.cuda.synchronize(self.device)
            dist.barrier(group=self.group)
            torch.ops.echo.destroy(self._handle)
            self._handle = 0

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        # close() is collective: leaving by an exception, which may be this rank's alone, must not
        # enter a barrier its peers are not in (on NCCL it would pair with a peer's next
        # all-reduce). The object then stays open; close() on every rank frees it.
        if exc_type is None:
            self.close()
        return False

    def __repr__(self):
        q = self.quant if self.quant == "none" else f"{self.quant} {self.bits}-bit g{self.group_size}" + (
            " rotated" if self.rotate else "") + (f" clip {self.clip}/1024" if self.clip != 1024 else "")
        c = self.comp if self.comp == "none" else f"{self.comp} ({self.storage})"
        sp = ", sequence_parallel" if self.sequence_parallel else ""
        return (f"EchoAllReduce(rank {self.rank}/{self.world_size}, backend={self.backend}, {q}, {c}, "
                f"max_elements={self.max_elements}{sp})")
