"""Megatron-style layers of the examples (tp_layers.py) on 2 gloo ranks on the CPU: output and
gradients equal the un-split computation with the exact all-reduce, and the forward and backward
all-reduces go to their own chains."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tp_layers  # noqa: E402
from allreduce_backends import AllReduce  # noqa: E402


def _unsplit(x, w1, w2):
    """The un-split MLP's output and, after its backward, the leaves holding the gradients."""
    W1, W2 = w1.clone().requires_grad_(True), w2.clone().requires_grad_(True)
    xr = x.clone().requires_grad_(True)
    yr = torch.nn.functional.gelu(xr @ W1.T) @ W2.T
    yr.square().sum().backward()
    return yr, xr, W1, W2


def _mlp(args, dev):
    spec, out_dir = args
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(3)
    d, f, n = 48, 160, 37  # awkward sizes
    w1, w2 = torch.randn(f, d, generator=g), torch.randn(d, f, generator=g)
    x = torch.randn(n, d, generator=g)
    ar = AllReduce(spec, max_elements=n * d)
    calls = {"fwd": 0, "bwd": 0, "none": 0}
    inner = ar.__call__

    class Counting:  # which chain each call used
        def __call__(self, t, chain=None):
            calls["none" if chain is None else "fwd" if chain is chains.fwd else "bwd"] += 1
            return inner(t, chain)

        def __getattr__(self, k):
            return getattr(ar, k)

    chains = tp_layers.Chains(ar)
    chains.ar = Counting()
    fs = slice(rank * f // world, (rank + 1) * f // world)
    col = tp_layers.ColumnParallelLinear(w1[fs].clone(), chains)
    row = tp_layers.RowParallelLinear(w2[:, fs].clone(), chains)
    xi = x.clone().requires_grad_(True)
    chains.start_forward()
    y = row(torch.nn.functional.gelu(col(xi)))
    chains.start_backward()
    (y.square().sum()).backward()
    yr, xr, W1, W2 = _unsplit(x, w1, w2)
    torch.save({"y": (y - yr).abs().max().item(), "dx": (xi.grad - xr.grad).abs().max().item(),
                "dw1": (col.weight.grad - W1.grad[fs]).abs().max().item(),
                "dw2": (row.weight.grad - W2.grad[:, fs]).abs().max().item(), "calls": calls,
                "scale": yr.abs().max().item()}, os.path.join(out_dir, f"r{rank}.pt"))


@pytest.mark.parametrize("spec", ["nccl", "sim:za8g32+ef"])
def test_column_row_parallel(tmp_path, spec):
    tp_layers.launch(_mlp, (spec, str(tmp_path)), 2)
    for r in range(2):
        res = torch.load(tmp_path / f"r{r}.pt")
        assert res["calls"] == ({"fwd": 0, "bwd": 0, "none": 2} if spec == "nccl" else {"fwd": 1, "bwd": 1, "none": 0})
        tol = 1e-4 if spec == "nccl" else 0.05  # 8-bit codes: within a fraction of a percent
        assert res["y"] <= tol * res["scale"], res
        if spec == "nccl":
            assert max(res["dx"], res["dw1"], res["dw2"]) <= 1e-3 * res["scale"], res


def _sp_mlp(args, dev):
    spec, out_dir = args
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(4)
    d, f, n = 64, 160, 32  # a segment: 16 tokens of 64, 8 groups of 128
    w1, w2 = torch.randn(f, d, generator=g), torch.randn(d, f, generator=g)
    x = torch.randn(n, d, generator=g)
    ar = AllReduce(spec, max_elements=n * d, sequence_parallel=True)
    chains = tp_layers.Chains(ar)
    fs = slice(rank * f // world, (rank + 1) * f // world)
    rows = slice(rank * n // world, (rank + 1) * n // world)
    col = tp_layers.ColumnParallelLinear(w1[fs].clone(), chains)
    row = tp_layers.RowParallelLinear(w2[:, fs].clone(), chains)
    xi = x[rows].clone().requires_grad_(True)
    chains.start_forward()
    y = row(torch.nn.functional.gelu(col(xi)))
    chains.start_backward()
    (y.square().sum()).backward()
    yr, xr, W1, W2 = _unsplit(x, w1, w2)
    torch.save({"shape": tuple(y.shape), "y": (y - yr[rows]).abs().max().item(),
                "dx": (xi.grad - xr.grad[rows]).abs().max().item(),
                "dw1": (col.weight.grad - W1.grad[fs]).abs().max().item(),
                "dw2": (row.weight.grad - W2.grad[:, fs]).abs().max().item(), "fallbacks": ar.fallbacks,
                "scale": yr.abs().max().item(), "gscale": W1.grad.abs().max().item()}, os.path.join(out_dir, f"r{rank}.pt"))


@pytest.mark.parametrize("spec", ["nccl", "echo:za8g128+ef"])
def test_sequence_parallel_column_row(tmp_path, spec):
    if spec.startswith("echo"):
        pytest.importorskip("echo_allreduce.reference")  # the reference backend's compiled part
    tp_layers.launch(_sp_mlp, (spec, str(tmp_path)), 2)
    for r in range(2):
        res = torch.load(tmp_path / f"r{r}.pt")
        assert res["shape"] == (16, 64) and res["fallbacks"] == 0, res
        tol = 1e-4 if spec == "nccl" else 0.05  # 8-bit codes: within a fraction of a percent
        assert res["y"] <= tol * res["scale"], res
        assert max(res["dw1"], res["dw2"]) <= tol * res["gscale"] * 10, res
