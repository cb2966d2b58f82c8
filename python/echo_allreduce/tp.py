"""Megatron-style tensor-parallel linear layers on Echo's all-reduce.

    comm = EchoAllReduce(group, max_elements=tokens * hidden)
    tp = TensorParallel(comm)                 # holds the forward and the backward chain
    fc1 = ColumnParallelLinear(d, 4 * d, tp)  # weight rows split over the ranks
    fc2 = RowParallelLinear(4 * d, d, tp)     # weight columns split; output all-reduced
    tp.new_pass()                             # before each forward pass: both chains start fresh
    y = fc2(gelu(fc1(x)))

Error feedback is sound only where the all-reduced output is added, unscaled, to the residual
stream that the chain's next call also adds into (pre-norm blocks: x = x + f(norm(x))): the error
one call re-injects then cancels the one the last call made. A block that normalizes or rescales
its output before the residual add (sandwich or post-block norms, x = x + norm(f(x))) scales the
two differently, and feedback can amplify instead of cancel. Such layers take
``into_residual=False``: their calls keep out of the chain (no stored error is added or kept).
The last row-parallel layer of a forward pass takes ``closes=True``: its call closes the chain
at 8 bits (EchoAllReduce.all_reduce's ``closes``).

Sequence parallelism (Megatron-LM's): ``TensorParallel(comm, sequence_parallel=True)`` on an
``EchoAllReduce(..., sequence_parallel=True)``. Between the layers every rank then holds its
segment of the sequence (the first dimension, s / P rows): a column-parallel layer all-gathers its
input (its gradient reduce-scattered on the backward chain), a row-parallel layer reduce-scatters
its output (on the forward chain; its gradient all-gathered). Norms, residual adds and dropout
between them run on the segment; parameters they hold see only their segment's rows, so their
gradients are summed over the ranks (``TensorParallel.sum_replicated_grads``), and so are those of
the row-parallel layers' biases (added to the segment after the reduce-scatter).

Weights are drawn for the full layer from ``torch.Generator`` seeded with ``seed`` and then sliced,
so a TP model equals its single-device twin built with the same seeds (what the tests compare).
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .autograd import copy_to_tp, gather_from_sp, reduce_from_tp, reduce_scatter_to_sp
from .front import add_rms_norm_torch


class TensorParallel:
    """A model's tensor-parallel context: the communicator and the two chains (forward residual
    stream, backward residual-gradient stream), each of capacity elements."""

    def __init__(self, comm, capacity: Optional[int] = None, sequence_parallel: bool = False):
        if sequence_parallel and not getattr(comm, "sequence_parallel", False):
            raise ValueError("TensorParallel: sequence_parallel needs an EchoAllReduce(..., sequence_parallel=True)")
        self.comm = comm
        self.sequence_parallel = sequence_parallel
        self.rank = comm.rank
        self.world_size = comm.world_size
        self.fwd_chain = comm.new_chain(capacity)
        self.bwd_chain = comm.new_chain(capacity)
        # Calls kept out of the chains (into_residual=False) run on this one, started fresh before
        # each: they add no stored error and what they keep is never read.
        self.unchained = comm.new_chain(capacity)

    def fresh_unchained(self):
        """The chain for a call that error feedback must not touch, reset for it."""
        self.comm.reset_chain(self.unchained)
        return self.unchained

    def new_pass(self) -> None:
        """A pass boundary: both chains start from zero errors (reset_chain: the tag only, and any
        deferred update left pending is dropped)."""
        self.comm.reset_chain(self.fwd_chain)
        self.comm.reset_chain(self.bwd_chain)

    def sum_replicated_grads(self, params) -> None:
        """Sequence parallelism: sum the gradients of parameters every rank holds whole but applies
        to its own segment only (norm weights, a shared embedding, a RowParallelLinear's bias),
        exactly over the ranks."""
        import torch.distributed as dist

        for p in params:
            if p.grad is not None:
                dist.all_reduce(p.grad, group=self.comm.group)

    def split(self, size: int, what: str) -> int:
        if size % self.world_size:
            raise ValueError(f"{what} = {size} is not divisible by the tensor-parallel size {self.world_size}")
        return size // self.world_size


def _full_weight(out_features: int, in_features: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.empty(out_features, in_features)
    bound = 1.0 / math.sqrt(in_features)
    return w.uniform_(-bound, bound, generator=g)


class ColumnParallelLinear(nn.Module):
    """y_r = x W_r^T + b_r with W's output rows split over the ranks; the input is replicated, its
    gradient all-reduced (copy_to_tp on the backward chain); with sequence parallelism the input is
    this rank's sequence segment, all-gathered (its gradient reduce-scattered on the backward
    chain). Output: this rank's slice of the features, for the whole sequence."""

    def __init__(self, in_features: int, out_features: int, tp: TensorParallel, bias: bool = True, seed: int = 0,
                 device=None, dtype=None):
        super().__init__()
        self.tp = tp
        self.in_features, self.out_features = in_features, out_features
        part = tp.split(out_features, "out_features")
        rows = slice(tp.rank * part, (tp.rank + 1) * part)
        self.weight = nn.Parameter(_full_weight(out_features, in_features, seed)[rows].to(device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(part, device=device, dtype=dtype)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp.sequence_parallel:
            return F.linear(gather_from_sp(x, self.tp.comm, self.tp.bwd_chain), self.weight, self.bias)
        return F.linear(copy_to_tp(x, self.tp.comm, self.tp.bwd_chain), self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """y = sum_r x_r W_r^T + b with W's input columns split over the ranks; the partial outputs are
    all-reduced (reduce_from_tp on the forward chain), then the bias is added once. With sequence
    parallelism they are reduce-scattered instead (reduce_scatter_to_sp): the output is this rank's
    sequence segment.

    into_residual: whether y is added, unscaled, to the residual stream (False: the block
    normalizes or rescales it first, so its call keeps out of the error-feedback chain). closes:
    the forward pass's last all-reduce (it closes the chain at 8 bits)."""

    def __init__(self, in_features: int, out_features: int, tp: TensorParallel, bias: bool = True, seed: int = 0,
                 device=None, dtype=None, into_residual: bool = True, closes: bool = False):
        super().__init__()
        if closes and not into_residual:
            raise ValueError("RowParallelLinear: a call kept out of the chain cannot close it")
        if closes and tp.sequence_parallel:
            raise ValueError("RowParallelLinear: a reduce-scatter does not close its chain (closes is for all-reduces)")
        self.tp = tp
        self.into_residual, self.closes = into_residual, closes
        self.in_features, self.out_features = in_features, out_features
        part = tp.split(in_features, "in_features")
        cols = slice(tp.rank * part, (tp.rank + 1) * part)
        self.weight = nn.Parameter(_full_weight(out_features, in_features, seed)[:, cols].contiguous().to(device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(out_features, device=device, dtype=dtype)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        chain = self.tp.fwd_chain if self.into_residual else self.tp.fresh_unchained()
        if self.tp.sequence_parallel:
            y = reduce_scatter_to_sp(F.linear(x, self.weight), self.tp.comm, chain)
        else:
            y = reduce_from_tp(F.linear(x, self.weight), self.tp.comm, chain, self.closes)
        return y if self.bias is None else y + self.bias

    def forward_add_rms_norm(self, x: torch.Tensor, residual: torch.Tensor, norm_weight: torch.Tensor,
                             eps: float) -> torch.Tensor:
        """Inference, the way engines end a block: ``residual += self(x)`` in place and returns
        ``RMSNorm(residual) * norm_weight`` (the next layer's input), the all-reduce, the add and
        the norm in one launch (EchoAllReduce.all_reduce_add_rms_norm). The bias is added by rank 0
        before the sum. A message Echo cannot take falls back to torch.distributed and torch's ops.
        No autograd: the residual is updated in place."""
        if torch.is_grad_enabled() and (x.requires_grad or residual.requires_grad or self.weight.requires_grad):
            raise RuntimeError("RowParallelLinear.forward_add_rms_norm is for inference: call it under torch.no_grad()")
        if not self.into_residual:
            raise ValueError("RowParallelLinear.forward_add_rms_norm: the layer is kept out of the residual stream")
        if self.tp.sequence_parallel:
            raise ValueError("RowParallelLinear.forward_add_rms_norm: an all-reduce epilogue; with sequence "
                             "parallelism the layer reduce-scatters (call it, then add and normalise the segment)")
        y = F.linear(x, self.weight)
        if self.bias is not None and self.tp.rank == 0:
            y = y + self.bias
        comm, chain = self.tp.comm, self.tp.fwd_chain
        if comm.fits(y, chain):
            return comm.all_reduce_add_rms_norm(y, residual, norm_weight, eps, chain=chain, closes=self.closes)
        import torch.distributed as dist

        dist.all_reduce(y, group=comm.group)
        return add_rms_norm_torch(y, residual, norm_weight, eps)
