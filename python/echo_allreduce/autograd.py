"""The two all-reduces of Megatron-style tensor parallelism as autograd functions.

- ``reduce_from_tp``: forward all-reduce (a row-parallel layer's partial outputs), backward
  identity. Its chain is the forward pass's residual stream.
- ``copy_to_tp``: forward identity (a column-parallel layer's replicated input), backward
  all-reduce of the input gradient. Its chain is the backward pass's residual gradient stream.

So the forward and the backward all-reduces each keep their own chain: pass a forward chain to
every reduce_from_tp and a backward chain to every copy_to_tp of a model (tp.TensorParallel does).
"""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist


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
