"""Megatron-style tensor-parallel pieces over allreduce_backends.AllReduce, and a launcher.

A column-parallel linear holds a slice of the output features (its input gradient needs an
all-reduce in backward); a row-parallel linear holds a slice of the input features (its output
needs an all-reduce in forward). Forward and backward all-reduces are different residual streams,
so each keeps its own chain (Chains.fwd, Chains.bwd), reset at the start of every pass.

With sequence parallelism (an AllReduce made with sequence_parallel=True) the activations between
the layers are this rank's segment of the tokens: a column-parallel linear all-gathers its input
(its gradient reduce-scattered on the backward chain), a row-parallel linear reduce-scatters its
output (on the forward chain; its gradient all-gathered).
"""
import os
import socket

import torch
import torch.distributed as dist
import torch.nn.functional as F


class Chains:
    """The forward and the backward chain of one model, on one all-reduce object."""

    def __init__(self, ar, capacity=None):
        self.ar = ar
        self.fwd = ar.new_chain(capacity)
        self.bwd = ar.new_chain(capacity)

    def start_forward(self):
        self.ar.reset(self.fwd)

    def start_backward(self):
        self.ar.reset(self.bwd)


class _CopyToTP(torch.autograd.Function):
    """Identity forward; all-reduce of the input gradient backward (on the backward chain)."""

    @staticmethod
    def forward(ctx, x, chains):
        ctx.chains = chains
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous().clone()
        return ctx.chains.ar(g, ctx.chains.bwd), None


class _ReduceFromTP(torch.autograd.Function):
    """All-reduce forward (on the forward chain, in place); identity backward."""

    @staticmethod
    def forward(ctx, y, chains):
        ctx.mark_dirty(y)
        return chains.ar(y, chains.fwd)

    @staticmethod
    def backward(ctx, g):
        return g, None


class _GatherFromSP(torch.autograd.Function):
    """All-gather of the token segments forward; reduce-scatter of the gradient (backward chain)."""

    @staticmethod
    def forward(ctx, x, chains):
        ctx.chains = chains
        return chains.ar.all_gather(x.contiguous())

    @staticmethod
    def backward(ctx, g):
        return ctx.chains.ar.reduce_scatter(g.contiguous(), ctx.chains.bwd), None


class _ScatterToSP(torch.autograd.Function):
    """Reduce-scatter into this rank's token segment forward (forward chain); all-gather of the
    gradient backward."""

    @staticmethod
    def forward(ctx, y, chains):
        ctx.chains = chains
        return chains.ar.reduce_scatter(y.contiguous(), chains.fwd)

    @staticmethod
    def backward(ctx, g):
        return ctx.chains.ar.all_gather(g.contiguous()), None


def gather_from_sp(x, chains):
    if torch.is_grad_enabled() and x.requires_grad:
        return _GatherFromSP.apply(x, chains)
    return chains.ar.all_gather(x.contiguous())


def scatter_to_sp(y, chains):
    if torch.is_grad_enabled() and y.requires_grad:
        return _ScatterToSP.apply(y, chains)
    return chains.ar.reduce_scatter(y.contiguous(), chains.fwd)


def copy_to_tp(x, chains):
    return _CopyToTP.apply(x, chains) if torch.is_grad_enabled() and x.requires_grad else x


def reduce_from_tp(y, chains):
    y = y.contiguous()
    if torch.is_grad_enabled() and y.requires_grad:
        return _ReduceFromTP.apply(y, chains)
    return chains.ar(y, chains.fwd)


class ColumnParallelLinear(torch.nn.Module):
    """y_local = x W_local^T; W_local: this rank's rows (output features) of the full weight."""

    def __init__(self, weight_shard, chains, compute_dtype=None):
        super().__init__()
        self.weight = torch.nn.Parameter(weight_shard)
        self.chains = chains
        self.compute_dtype = compute_dtype

    def forward(self, x):
        if self.compute_dtype is not None:  # so the backward all-reduce carries compute_dtype
            x = x.to(self.compute_dtype)
        if self.chains.ar.sequence_parallel:
            return F.linear(gather_from_sp(x, self.chains), self.weight)
        return F.linear(copy_to_tp(x, self.chains), self.weight)


class RowParallelLinear(torch.nn.Module):
    """y = sum over ranks of x_local W_local^T; W_local: this rank's columns (input features)."""

    def __init__(self, weight_shard, chains):
        super().__init__()
        self.weight = torch.nn.Parameter(weight_shard)
        self.chains = chains

    def forward(self, x):
        if self.chains.ar.sequence_parallel:
            return scatter_to_sp(F.linear(x, self.weight), self.chains)
        return reduce_from_tp(F.linear(x, self.weight), self.chains)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, world, port, fn, args):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    _init_and_run(fn, args)


def _init_and_run(fn, args):
    rank = int(os.environ["RANK"])
    # A GPU a rank on this node, or none: with fewer GPUs than local ranks (one GPU, two spawned
    # ranks) the ranks would share a device NCCL refuses, and one of them hang the others.
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))
    # share_gpu: ranks share the GPUs there are (rank r on GPU r % count) over a gloo group; for
    # numerics, not speed (Echo's cuda_ipc serves ranks that share a GPU; NCCL does not).
    share = getattr(args, "share_gpu", False) and torch.cuda.is_available() and not getattr(args, "cpu", False)
    use_cuda = share or (torch.cuda.is_available() and torch.cuda.device_count() >= local_world
                         and not getattr(args, "cpu", False))
    if use_cuda:
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local % torch.cuda.device_count() if share else local)
    else:  # ranks share the cores
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["WORLD_SIZE"])))
    nccl = use_cuda and not share
    dist.init_process_group("nccl" if nccl else "gloo",
                            device_id=torch.device("cuda", torch.cuda.current_device()) if nccl else None)
    try:
        fn(args, torch.device("cuda", torch.cuda.current_device()) if use_cuda else torch.device("cpu"))
        dist.barrier()  # not after a failure: the peers, still in a collective, would never reach it
    finally:
        dist.destroy_process_group()


def launch(fn, args, nproc=2):
    """Run fn(args, device) on nproc ranks: under torchrun as is, otherwise spawned here."""
    if "RANK" in os.environ:
        _init_and_run(fn, args)
    else:
        torch.multiprocessing.spawn(_entry, args=(nproc, _free_port(), fn, args), nprocs=nproc, join=True)
