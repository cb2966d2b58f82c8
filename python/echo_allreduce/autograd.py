"""The two all-reduces of Megatron-style tensor parallelism as autograd functions.

- ``reduce_from_tp``: forward all-reduce (a row-parallel layer's partial outputs), backward
  identity. Its chain is the forward pass's residual stream.
- ``copy_to_tp``: forward identity (a column-parallel layer's replicated input), backward
  all-reduce of the input gradient. Its chain is the backward pass's residual gradient stream.

So the forward and the backward all-reduces each keep their own chain: pass a forward chain to
every reduce_from_tp and a backward chain to every copy_to_tp of a model (tp.TensorParallel does).
"""

from __future__ import annotations

import torch


class _ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, comm, chain):
        return comm.all_reduce(x.contiguous(), out=torch.empty_like(x, memory_format=torch.contiguous_format), chain=chain)

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


class _CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, comm, chain):
        ctx.comm = comm
        ctx.chain = chain
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        return ctx.comm.all_reduce(grad, out=torch.empty_like(grad), chain=ctx.chain), None, None


def reduce_from_tp(x: torch.Tensor, comm, chain=None) -> torch.Tensor:
    """Sum of x over the ranks (forward); the gradient passes through unchanged."""
    return _ReduceFromTP.apply(x, comm, chain)


def copy_to_tp(x: torch.Tensor, comm, chain=None) -> torch.Tensor:
    """x unchanged (forward); the gradient is summed over the ranks."""
    return _CopyToTP.apply(x, comm, chain)
