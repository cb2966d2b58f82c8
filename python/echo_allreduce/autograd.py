"""The two all-reduces of Megatron-style tensor parallelism as autograd functions.

- ``reduce_from_tp``: forward all-reduce (a row-parallel layer's partial outputs), backward
  identity. Its chain is the forward pass's residual stream.
- ``copy_to_tp``: forward identity (a column-parallel layer's replicated input), backward
  all-reduce of the input gradient. Its chain is the backward pass's residual gradient stream.

So the forward and the backward all-reduces each keep their own chain: pass a forward chain to
every reduce_from_tp and a backward chain to every copy_to_tp of a model (tp.TensorParallel does).

With sequence parallelism (Megatron-LM's) the pair becomes a reduce-scatter and an all-gather:

- ``reduce_scatter_to_sp``: forward reduce-scatter of a row-parallel layer's partial outputs into
  this rank's sequence segment (forward chain), backward all-gather of the segment's gradient.
- ``gather_from_sp``: forward all-gather of the sequence segments into a column-parallel layer's
  input, backward reduce-scatter of its gradient (backward chain).
"""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist

from .front import _segment_shape, exact_all_gather, exact_reduce_scatter


def _sum(x: torch.Tensor, comm, chain, closes: bool = False) -> torch.Tensor:
    """x summed over the ranks, out of place: Echo's all-reduce when x fits it (comm.fits: dtype
    and size, the same on every rank, so every rank takes the same path), else torch.distributed's
    (exact; the chain untouched), where Echo would raise: a float64 tensor, more elements than
    max_elements or the chain's capacity (a prefill longer than planned)."""
    x = x.contiguous()
    if comm.fits(x, chain):
        if not torch.compiler.is_compiling() and x.data_ptr() % 16:
            x = x.clone()  # a contiguous view at an odd offset: Echo needs 16-byte alignment
        return comm.all_reduce(x, out=torch.empty_like(x), chain=chain, closes=closes)
    if comm.backend != "off" and x.numel() > 0:
        warnings.warn(f"echo_allreduce: {x.numel()} {x.dtype} elements do not fit this EchoAllReduce "
                      f"(max_elements {comm.max_elements}, or the chain's capacity); summed by torch.distributed")
    out = x.clone()
    dist.all_reduce(out, group=comm.group)
    return out


class _ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, comm, chain, closes):
        return _sum(x, comm, chain, closes)

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None, None


class _CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, comm, chain):
        ctx.comm = comm
        ctx.chain = chain
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _sum(grad, ctx.comm, ctx.chain), None, None


def reduce_from_tp(x: torch.Tensor, comm, chain=None, closes: bool = False) -> torch.Tensor:
    """Sum of x over the ranks (forward); the gradient passes through unchanged. closes: the
    chain's last call of the pass (EchoAllReduce.all_reduce)."""
    return _ReduceFromTP.apply(x, comm, chain, closes)


def copy_to_tp(x: torch.Tensor, comm, chain=None) -> torch.Tensor:
    """x unchanged (forward); the gradient is summed over the ranks."""
    return _CopyToTP.apply(x, comm, chain)


def _aligned(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    if not torch.compiler.is_compiling() and x.data_ptr() % 16:
        x = x.clone()  # a contiguous view at an odd offset: Echo needs 16-byte alignment
    return x


def _scatter(x: torch.Tensor, comm, chain) -> torch.Tensor:
    """This rank's segment of the sum of x: Echo's reduce-scatter where x fits it
    (comm.fits_segments, the same on every rank), else torch.distributed's (exact)."""
    x = _aligned(x)
    if comm.fits_segments(x, True, chain):
        return comm.reduce_scatter(x, chain=chain)
    out = torch.empty(_segment_shape(x, comm.world_size, True), dtype=x.dtype, device=x.device)
    return exact_reduce_scatter(x, out, comm.group)


def _gather(x: torch.Tensor, comm) -> torch.Tensor:
    """The ranks' segments one after the other: Echo's all-gather where x fits it, else exact."""
    x = _aligned(x)
    if comm.fits_segments(x, False):
        return comm.all_gather(x)
    out = torch.empty(_segment_shape(x, comm.world_size, False), dtype=x.dtype, device=x.device)
    return exact_all_gather(x, out, comm.group)


class _ReduceScatterToSP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, comm, chain):
        ctx.comm, ctx.shape = comm, x.shape
        return _scatter(x, comm, chain)

    @staticmethod
    def backward(ctx, grad):  # (a flat segment when x's first dimension does not split: x's shape back)
        return _gather(grad, ctx.comm).view(ctx.shape), None, None


class _GatherFromSP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, comm, chain):
        ctx.comm, ctx.chain, ctx.shape = comm, chain, x.shape
        return _gather(x, comm)

    @staticmethod
    def backward(ctx, grad):
        return _scatter(grad, ctx.comm, ctx.chain).view(ctx.shape), None, None


def reduce_scatter_to_sp(x: torch.Tensor, comm, chain=None) -> torch.Tensor:
    """This rank's sequence segment of the sum of x over the ranks (forward, on the forward
    chain); the gradient is all-gathered. x: (s, ...) -> (s / P, ...)."""
    return _ReduceScatterToSP.apply(x, comm, chain)


def gather_from_sp(x: torch.Tensor, comm, chain=None) -> torch.Tensor:
    """The ranks' sequence segments one after the other (forward); the gradient is
    reduce-scattered on the backward chain. x: (s / P, ...) -> (s, ...)."""
    return _GatherFromSP.apply(x, comm, chain)
