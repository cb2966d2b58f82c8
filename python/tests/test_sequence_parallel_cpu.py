"""The sequence-parallel pair from Python on CPU: EchoAllReduce's reduce_scatter / all_gather on the
reference backend over gloo ranks (bit for bit echo_allreduce.reference, so the GPU op), the 'off'
backend, misuse, the autograd functions and the sequence-parallel TP layers against their
single-device twin."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the front's CPU tests need it")
import torch.distributed as dist  # noqa: E402

from _ranks import rank_inputs, run_ranks, same_bits, to_numpy  # noqa: E402
from echo_allreduce import reference  # noqa: E402
from echo_allreduce.front import RECOMMENDED_CLIP  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is unavailable", allow_module_level=True)

TD = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def _as(a, like):
    return torch.from_numpy(a.view(np.uint8)).view(like.dtype).view(like.shape)


def _pair_is_the_reference(rank, world):
    """Reduce-scatters and all-reduces along one chain, all-gathers, every dtype, three entries
    (the default, plain 4-bit with float state, 8-bit without state) and the 16-bit path below
    unquantized_below_bytes where a segment is whole granules of 256."""
    from echo_allreduce import EchoAllReduce

    n = world * 128 * 9
    configs = [
        ({}, dict(rotate=True, clip=RECOMMENDED_CLIP), "int8"),
        (dict(rotate=False, clip=1.0, storage="float"), {}, "float"),
        (dict(bits=8, comp="none"), dict(bits=8), None),
    ]
    for kw, ref_kw, storage in configs:
        comm = EchoAllReduce(None, n, backend="reference", sequence_parallel=True, **kw)
        assert comm.sequence_parallel and (storage is None or comm.storage == storage), comm
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            chain = comm.new_chain()
            mine = reference.ChainState(world, n, storage) if storage else None
            r = dict(ref_kw, dtype=TD[dtype], chain=mine)
            for call, op in enumerate(("rs", "ar", "rs", "rs")):
                size = n - (call == 3) * world * 128 * 2  # a shape change: the chain starts afresh
                xs = rank_inputs(call, size, dtype, world)
                arrays = [to_numpy(x) for x in xs]
                if op == "rs":
                    x = xs[rank].view(-1, 128)
                    got = comm.reduce_scatter(x, chain=chain)
                    assert got.shape == (size // 128 // world, 128)
                    want = reference.reduce_scatter(arrays, **r)[rank]
                else:
                    got = comm.all_reduce(xs[rank].clone(), chain=chain)
                    want = reference.all_reduce(arrays, **r)[rank]
                assert same_bits(got, _as(want, got)), (kw, dtype, call)
            segs = rank_inputs(5, 128 * 3, dtype, world)
            out = torch.empty(world, 128 * 3, dtype=dtype)
            got = comm.all_gather(segs[rank], out=out)
            assert got is out
            want = reference.all_gather([to_numpy(s) for s in segs], **{k: v for k, v in r.items() if k != "chain"})[rank]
            assert same_bits(got, _as(want, got)), (kw, dtype)
    # below unquantized_below_bytes: the 16-bit path where a segment is whole granules of 256
    comm = EchoAllReduce(None, n * 4, backend="reference", sequence_parallel=True, unquantized_below_bytes=1 << 20)
    chain, mine = comm.new_chain(), reference.ChainState(world, n * 4, "int8")
    for call, size in enumerate((world * 256 * 4, world * 128 * 5, world * 256 * 4)):
        xs = rank_inputs(call, size, torch.bfloat16, world)
        q = dict(quant="none") if (size // world) % 256 == 0 else dict(rotate=True, clip=RECOMMENDED_CLIP)
        got = comm.reduce_scatter(xs[rank], chain=chain)
        outs = reference.reduce_scatter([to_numpy(x) for x in xs], chain=mine, dtype="bf16", **q)
        assert same_bits(got, _as(outs[rank], got)), (call, q)
        gathered = comm.all_gather(got)
        assert same_bits(gathered, _as(reference.all_gather(outs, dtype="bf16", **q)[rank], gathered)), call


def test_reduce_scatter_and_all_gather_equal_the_reference():
    run_ranks(_pair_is_the_reference)


def test_the_pair_at_three_ranks():
    run_ranks(_pair_is_the_reference, world=3)


def _off_and_misuse(rank, world):
    from echo_allreduce import EchoAllReduce

    n = world * 128 * 4
    xs = rank_inputs(0, n, torch.float32, world)
    # 'off': torch.distributed, exact (gloo: the all-reduce cut to the segment)
    off = EchoAllReduce(None, n, backend="off", sequence_parallel=True)
    total = sum(xs)
    m = n // world
    assert torch.equal(off.reduce_scatter(xs[rank]), total[rank * m:(rank + 1) * m])
    assert torch.equal(off.all_gather(xs[rank][:m]), torch.cat([x[:m] for x in xs]))
    # refused at construction, on every rank
    with pytest.raises(ValueError, match="storage 'step8'"):
        EchoAllReduce(None, n, backend="reference", sequence_parallel=True, rotate=False, clip=1.0, storage="step8")
    with pytest.raises(ValueError, match="cuda_ipc"):
        EchoAllReduce(None, n, backend="reference", sequence_parallel=True, transport="nccl")
    with pytest.raises(ValueError, match="different sequence_parallel"):
        EchoAllReduce(None, n, backend="reference", sequence_parallel=rank == 0)
    # refused calls, the chain left as it was
    comm = EchoAllReduce(None, n, backend="reference", sequence_parallel=True)
    chain, mine = comm.new_chain(), reference.ChainState(world, n, "int8")
    comm.reduce_scatter(xs[rank], chain=chain)
    reference.reduce_scatter([to_numpy(x) for x in xs], chain=mine, rotate=True, clip=RECOMMENDED_CLIP)
    x = xs[rank]
    with pytest.raises(ValueError, match="needs a chain"):
        comm.reduce_scatter(x)
    with pytest.raises(ValueError, match="P = .* equal segments"):
        comm.reduce_scatter(x[:-1], chain=chain)
    with pytest.raises(ValueError, match="out must be"):
        comm.reduce_scatter(x, out=torch.empty(m + 1), chain=chain)
    with pytest.raises(ValueError, match="out must be"):
        comm.all_gather(x[:m], out=torch.empty(n, dtype=torch.float16))
    with pytest.raises(ValueError, match="exceeds max_elements"):
        comm.all_gather(x)
    with pytest.raises(ValueError, match="groups"):  # a segment of 127 values: not whole groups
        comm.reduce_scatter(x[: world * 127], chain=chain)
    with pytest.raises(RuntimeError, match="different calls"):  # ranks that disagree: on every rank
        comm.reduce_scatter(x[: world * 128 * (1 + rank)], chain=chain)
    plain = EchoAllReduce(None, n, backend="reference")
    with pytest.raises(ValueError, match="sequence_parallel=True"):
        plain.reduce_scatter(x, chain=plain.new_chain())
    xs = rank_inputs(1, n, torch.float32, world)
    got = comm.reduce_scatter(xs[rank], chain=chain)
    want = reference.reduce_scatter([to_numpy(x) for x in xs], chain=mine, rotate=True, clip=RECOMMENDED_CLIP)[rank]
    assert same_bits(got, _as(want, got))


def test_off_backend_and_misuse():
    run_ranks(_off_and_misuse)


def _autograd(rank, world):
    """reduce_scatter_to_sp: forward the reference's reduce-scatter (forward chain), backward the
    all-gather of the gradient; gather_from_sp: forward the all-gather, backward the
    reduce-scatter of the gradient (backward chain). What does not fit goes exact."""
    from echo_allreduce import EchoAllReduce
    from echo_allreduce.autograd import gather_from_sp, reduce_scatter_to_sp

    n = world * 128 * 8
    m = n // world
    comm = EchoAllReduce(None, n, backend="reference", sequence_parallel=True)
    fwd, bwd = comm.new_chain(), comm.new_chain()
    ref_fwd, ref_bwd = (reference.ChainState(world, n, "int8") for _ in range(2))
    q = dict(rotate=True, clip=RECOMMENDED_CLIP)
    for call in range(2):
        parts = rank_inputs(call, n, torch.float32, world)
        grads = rank_inputs(100 + call, m, torch.float32, world)
        p = parts[rank].clone().requires_grad_()
        y = reduce_scatter_to_sp(p, comm, fwd)
        assert np.array_equal(to_numpy(y), reference.reduce_scatter([to_numpy(t) for t in parts], chain=ref_fwd, **q)[rank])
        y.backward(grads[rank])
        assert np.array_equal(to_numpy(p.grad), reference.all_gather([to_numpy(g) for g in grads], **q)[rank])

        s = parts[rank][:m].clone().requires_grad_()
        z = gather_from_sp(s, comm, bwd)
        assert np.array_equal(to_numpy(z), reference.all_gather([to_numpy(t[:m]) for t in parts], **q)[rank])
        full = rank_inputs(200 + call, n, torch.float32, world)
        z.backward(full[rank])
        assert np.array_equal(to_numpy(s.grad), reference.reduce_scatter([to_numpy(g) for g in full], chain=ref_bwd,
                                                                          **q)[rank])
    # a first dimension that does not split over the ranks: a flat segment, x's shape back in backward
    x = rank_inputs(7, 3 * 256, torch.float32, world)[rank].view(3, 256).requires_grad_()
    y = reduce_scatter_to_sp(x, comm, fwd)
    assert y.shape == (3 * 256 // world,)
    y.backward(torch.ones_like(y))
    assert x.grad.shape == (3, 256)
    # segments of 64 values (not whole groups of 128) and float64: exact, by torch.distributed
    for size, dtype in ((world * 64, torch.float32), (n, torch.float64)):
        parts = rank_inputs(9, size, torch.float32, world)
        x = parts[rank].to(dtype).requires_grad_()
        y = reduce_scatter_to_sp(x, comm, fwd)
        k = size // world
        assert torch.equal(y.detach(), sum(t.to(dtype) for t in parts)[rank * k:(rank + 1) * k])
        y.backward(torch.ones_like(y))
        assert torch.equal(x.grad, torch.ones_like(x))


def test_sequence_parallel_autograd():
    run_ranks(_autograd)


def _sp_mlp(rank, world):
    """Norm -> column -> gelu -> row on the sequence segment, with the residual add, equals its
    single-device twin: quant none to fp32 rounding, the default 4-bit within its steps. The norm's
    weight gradient is summed over the ranks (TensorParallel.sum_replicated_grads)."""
    from echo_allreduce import EchoAllReduce
    from echo_allreduce.tp import ColumnParallelLinear, RowParallelLinear, TensorParallel, _full_weight

    d, h, tokens = 128, 256, 32
    g = torch.Generator().manual_seed(5)
    x = torch.randn(tokens, d, generator=g)
    w1, w2 = _full_weight(h, d, 1), _full_weight(d, h, 2)
    norm_t = torch.nn.RMSNorm(d)
    xt = x.clone().requires_grad_()
    want = xt + torch.nn.functional.linear(torch.nn.functional.gelu(norm_t(xt) @ w1.t()), w2)
    want.sum().backward()
    rows = slice(rank * tokens // world, (rank + 1) * tokens // world)
    for quant, tol in (("none", 1e-5), ("zero_aware", 0.2)):
        comm = EchoAllReduce(None, tokens * d, quant=quant, backend="reference", sequence_parallel=True)
        tp = TensorParallel(comm, sequence_parallel=True)
        fc1 = ColumnParallelLinear(d, h, tp, bias=False, seed=1)
        fc2 = RowParallelLinear(h, d, tp, seed=2)  # its bias (zeros) applies to the segment
        norm = torch.nn.RMSNorm(d)
        tp.new_pass()
        xe = x[rows].clone().requires_grad_()
        y = xe + fc2(torch.nn.functional.gelu(fc1(norm(xe))))
        assert y.shape == (tokens // world, d)
        y.sum().backward()
        tp.sum_replicated_grads([*norm.parameters(), fc2.bias])
        assert (y - want[rows]).abs().max().item() <= tol * want.abs().max().item(), quant
        assert (xe.grad - xt.grad[rows]).abs().max().item() <= tol * xt.grad.abs().max().item(), quant
        assert (norm.weight.grad - norm_t.weight.grad).abs().max().item() <= tol * norm_t.weight.grad.abs().max().item()
        assert torch.equal(fc2.bias.grad, torch.full((d,), float(tokens)))  # d sum(y) / d bias: every token's 1
    with pytest.raises(ValueError, match="sequence_parallel=True"):
        TensorParallel(EchoAllReduce(None, 1024, backend="reference"), sequence_parallel=True)
    with pytest.raises(ValueError, match="does not close"):
        RowParallelLinear(h, d, tp, closes=True)


def test_sequence_parallel_mlp_matches_its_single_device_twin():
    run_ranks(_sp_mlp)
