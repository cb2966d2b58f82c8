"""The Python front on CPU: EchoAllReduce's reference backend over a 2-process gloo group (bit for
bit equal to echo_allreduce.reference, so to the GPU op), the env switch, chain bookkeeping, the
autograd functions, and torch.compile tracing of the ops through their fake implementations."""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the front's CPU tests need it")
import torch.distributed as dist  # noqa: E402

import _ranks  # noqa: E402
from _ranks import run_ranks, same_bits, to_numpy  # noqa: E402
from echo_allreduce import reference  # noqa: E402
from echo_allreduce.front import RECOMMENDED_CLIP  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is unavailable", allow_module_level=True)

P = 2
TD = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
STORAGES = sorted({e["storage"] for e in reference.instantiations() if e["comp"] == "error_feedback"})


def rank_inputs(call, n, dtype, world=P):
    return _ranks.rank_inputs(call, n, dtype, world)


CONFIGS = [
    dict(quant="zero_aware", bits=4, group_size=128, rotate=False, clip=1.0, comp="error_feedback", storage=STORAGES[0]),
    dict(quant="zero_aware", bits=8, group_size=64, comp="none"),
    dict(quant="symmetric", bits=4, group_size=128, comp="error_feedback", storage="int8"),
    dict(quant="naive_zero_point", bits=4, group_size=128, comp="error_feedback", storage="step8"),
    dict(quant="naive_zero_point", bits=4, group_size=128, comp="none"),
    dict(quant="none", comp="none"),
]


def _reference_backend_is_the_reference(rank, world):
    from echo_allreduce import EchoAllReduce

    n = 3001
    for cfg in CONFIGS:
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            comm = EchoAllReduce(None, n, backend="reference", **cfg)
            assert comm.backend == "reference"
            chain = comm.new_chain()
            ef = cfg["comp"] == "error_feedback"
            mine = reference.ChainState(world, n, cfg["storage"]) if ef else None
            for call in range(4):
                xs = rank_inputs(call, n - call % 2 * 1000, dtype)  # a shape change mid-chain
                x = xs[rank].clone()
                if call % 2:
                    got = comm.all_reduce(x, out=torch.empty_like(x), chain=chain)
                else:
                    got = comm.all_reduce(x, chain=chain)
                    assert got is x
                want = reference.all_reduce([to_numpy(t) for t in xs], chain=mine, dtype=TD[dtype],
                                            **{k: v for k, v in cfg.items() if k != "storage" or ef})[rank]
                assert same_bits(got, torch.from_numpy(want.view(np.uint8)).view(dtype)), (cfg, dtype, call)
                every = [torch.empty_like(got) for _ in range(world)]
                dist.all_gather(every, got)
                assert all(same_bits(e, got) for e in every)


def test_reference_backend_is_bit_identical_to_the_reference():
    run_ranks(_reference_backend_is_the_reference)


def _deferred_equals_fused(rank, world):
    from echo_allreduce import EchoAllReduce

    n = 2048
    comm = EchoAllReduce(None, n, comp="error_feedback", storage=STORAGES[0], backend="reference")
    fused, deferred = comm.new_chain(), comm.new_chain()
    for call in range(3):
        x = rank_inputs(call, n, torch.bfloat16)[rank]
        a = comm.all_reduce(x, out=torch.empty_like(x), chain=fused)
        b = comm.all_reduce(x, out=torch.empty_like(x), chain=deferred, mode="deferred")
        comm.update(x, deferred)
        assert same_bits(a, b)


def test_deferred_then_update_equals_fused():
    run_ranks(_deferred_equals_fused)


def _reset_chain_starts_afresh(rank, world):
    from echo_allreduce import EchoAllReduce

    n = 2048
    comm = EchoAllReduce(None, n, comp="error_feedback", storage=STORAGES[0], backend="reference")
    used, fresh = comm.new_chain(), comm.new_chain()
    for call in range(2):
        comm.all_reduce(rank_inputs(call, n, torch.bfloat16)[rank].clone(), chain=used)
    x = rank_inputs(2, n, torch.bfloat16)[rank]
    comm.all_reduce(x, out=torch.empty_like(x), chain=used, mode="deferred")
    comm.reset_chain(used)  # also ends the pending deferred call, as a fresh chain would
    x = rank_inputs(3, n, torch.bfloat16)[rank]
    a = comm.all_reduce(x, out=torch.empty_like(x), chain=used)
    b = comm.all_reduce(x, out=torch.empty_like(x), chain=fresh)
    assert same_bits(a, b)


def test_reset_chain_starts_afresh():
    run_ranks(_reset_chain_starts_afresh)


def _misuse(rank, world):
    from echo_allreduce import EchoAllReduce

    comm = EchoAllReduce(None, 1000, comp="error_feedback", storage=STORAGES[0], backend="reference")
    chain = comm.new_chain()
    x = torch.randn(1000)
    with pytest.raises(ValueError, match="needs a chain"):
        comm.all_reduce(x)
    with pytest.raises(ValueError, match="out tensor"):
        comm.all_reduce(x, chain=chain, mode="deferred")
    with pytest.raises(ValueError, match="mode"):
        comm.all_reduce(x, chain=chain, mode="later")
    with pytest.raises(RuntimeError, match="no deferred call"):
        comm.update(x, chain)
    comm.all_reduce(x, out=torch.empty_like(x), chain=chain, mode="deferred")
    with pytest.raises(RuntimeError, match="awaits update"):
        comm.all_reduce(x, out=torch.empty_like(x), chain=chain)
    with pytest.raises(ValueError, match="input of the chain's deferred call"):
        comm.update(x.clone(), chain)
    comm.update(x, chain)
    h = x.to(torch.float16)  # an update given the deferred input viewed as another dtype is refused
    comm.all_reduce(h, out=torch.empty_like(h), chain=chain, mode="deferred")
    with pytest.raises(ValueError, match="input of the chain's deferred call"):
        comm.update(h.view(torch.bfloat16), chain)
    comm.update(h, chain)  # and the chain is still awaiting the right one
    with pytest.raises(ValueError, match="max_elements"):
        comm.all_reduce(torch.randn(1001), chain=chain)
    with pytest.raises(ValueError, match="capacity"):
        comm.all_reduce(torch.randn(900), chain=comm.new_chain(800))
    with pytest.raises(ValueError, match="dtype"):
        comm.all_reduce(torch.zeros(16, dtype=torch.int32), chain=chain)
    with pytest.raises(ValueError, match="no compiled reference entry"):
        EchoAllReduce(None, 100, bits=3, backend="reference")
    with pytest.raises(ValueError, match="unquantized_below_bytes must be >= 0, or None"):
        EchoAllReduce(None, 100, unquantized_below_bytes=-1, backend="reference")  # unset is None, not -1
    assert comm.should_use(torch.zeros(64)) and not comm.should_use(torch.zeros(63, dtype=torch.float16))
    assert not comm.should_use(torch.zeros(64, 2).t()) and not comm.should_use(torch.zeros(2000))
    assert not comm.should_use(torch.zeros(64, dtype=torch.int32))


def test_misuse_raises_clear_errors():
    run_ranks(_misuse)


def _refused_deferred_call(rank, world):
    """A deferred call that is refused leaves no update pending: the chain goes on."""
    from echo_allreduce import EchoAllReduce

    n = 1000
    comm = EchoAllReduce(None, n, comp="error_feedback", storage=STORAGES[0], backend="reference")
    chain, twin = comm.new_chain(), comm.new_chain()
    x = rank_inputs(0, n, torch.float32)[rank]
    with pytest.raises(ValueError, match="shape"):
        comm.all_reduce(x, out=torch.empty(n - 1), chain=chain, mode="deferred")
    with pytest.raises(ValueError, match="max_elements"):
        comm.all_reduce(torch.randn(n + 1), out=torch.empty(n + 1), chain=chain, mode="deferred")
    a = comm.all_reduce(x, out=torch.empty_like(x), chain=chain)  # raised "awaits update" before
    b = comm.all_reduce(x, out=torch.empty_like(x), chain=twin)
    assert same_bits(a, b)


def test_a_refused_deferred_call_leaves_the_chain_usable():
    run_ranks(_refused_deferred_call)


def _one_rank_refused(rank, world):
    """The reference backend: a call refused on one rank only raises on every rank (that rank its
    own error, its peers the rank's number), as do calls of different n or element type, instead
    of leaving the peers in gloo until the group's timeout; the chain goes on unchanged."""
    from echo_allreduce import EchoAllReduce

    n = 1000
    comm = EchoAllReduce(None, n, comp="error_feedback", storage=STORAGES[0], backend="reference")
    chain, twin = comm.new_chain(), comm.new_chain()
    x = rank_inputs(0, n, torch.float32)[rank]
    bad = {
        "dtype must be": dict(x=x.double()),
        "dtype and shape": dict(out=torch.empty(n - 1)),
        "dense": dict(x=x.to_sparse()),
        "needs a chain": dict(chain=None),
        "capacity": dict(chain=comm.new_chain(n // 2)),
        "mode must be": dict(mode="later"),
        "max_elements": dict(x=torch.randn(n + 1), out=torch.empty(n + 1)),
    }

    def unchanged(k, dtype):
        """The chain equals its twin, which saw none of the refused calls: a call of the same n
        and type as the refused ones continues the chain (a call of another n would restart it)."""
        y = rank_inputs(7, k, dtype)[rank]
        a = comm.all_reduce(y, out=torch.empty_like(y), chain=chain)
        b = comm.all_reduce(y, out=torch.empty_like(y), chain=twin)
        assert same_bits(a, b), (k, dtype)
        comm.reset_chain(chain)
        comm.reset_chain(twin)

    for culprit in range(world):
        for why, change in bad.items():
            args = dict(x=x, out=torch.empty_like(x), chain=chain, mode="deferred")
            if rank == culprit:
                args.update(change)
                with pytest.raises(ValueError, match=why):
                    comm.all_reduce(**args)
            else:
                with pytest.raises(RuntimeError, match=f"rank {culprit}'s call was refused"):
                    comm.all_reduce(**args)
        unchanged(n, torch.float32)  # what the peers asked for
    # Different calls: the culprit's (n, type) is the first of a pair, the others' the second. The
    # check after each is at the culprit's, on every rank; the loops make every rank the culprit.
    f32, f16 = torch.float32, torch.float16
    for culprit in range(world):
        for k, dtype in (((n, n - 1), (f32, f32)), ((n - 1, n), (f32, f32)), ((n, n), (f32, f16)), ((n, n), (f16, f32))):
            mine = 0 if rank == culprit else 1
            y = rank_inputs(1, k[mine], dtype[mine])[rank]
            with pytest.raises(RuntimeError, match="different calls"):
                comm.all_reduce(y, out=torch.empty_like(y), chain=chain, mode="deferred")
            unchanged(k[0], dtype[0])


def test_a_call_refused_on_one_rank_raises_on_every_rank():
    run_ranks(_one_rank_refused, timeout=120)


def _unquantized_below(rank, world):
    """The reference backend honours unquantized_below_bytes as the cuda backend does: below it
    the exact sum, the chain untouched up to the one-shot size."""
    from echo_allreduce import EchoAllReduce

    n = 4096
    ef = dict(comp="error_feedback", storage=STORAGES[0], backend="reference")
    exact = EchoAllReduce(None, n, unquantized_below_bytes=1 << 20, **ef)
    quantized = EchoAllReduce(None, n, unquantized_below_bytes=0, **ef)
    ce, cq = exact.new_chain(), quantized.new_chain()
    xs = rank_inputs(0, n, torch.float32)
    got = exact.all_reduce(xs[rank].clone(), chain=ce)
    want = reference.all_reduce([to_numpy(t) for t in xs], quant="none")[rank]
    assert np.array_equal(to_numpy(got), want)
    # the chain passed through: its next quantized call equals a fresh chain's
    ys = rank_inputs(1, n, torch.float32)
    a = quantized.all_reduce(ys[rank].clone(), chain=ce)
    b = quantized.all_reduce(ys[rank].clone(), chain=cq)
    assert same_bits(a, b)


def test_reference_backend_honours_unquantized_below_bytes():
    run_ranks(_unquantized_below)


def _autograd_falls_back(rank, world):
    """What does not fit Echo (more elements than max_elements or the chain holds, float64) is
    summed by torch.distributed in the autograd functions, exactly, instead of raising."""
    from echo_allreduce import EchoAllReduce
    from echo_allreduce.autograd import copy_to_tp, reduce_from_tp

    comm = EchoAllReduce(None, 1000, comp="error_feedback", storage=STORAGES[0], backend="reference")
    fwd = comm.new_chain()
    for n, dtype, chain in ((1500, torch.float32, fwd), (64, torch.float64, fwd), (900, torch.float32, comm.new_chain(800))):
        parts = rank_inputs(7, n, torch.float32)
        p = parts[rank].to(dtype).requires_grad_()
        with pytest.warns(UserWarning, match="do not fit"):
            y = reduce_from_tp(p, comm, chain)
        want = parts[rank].to(dtype).clone()
        dist.all_reduce(want)
        assert same_bits(y.detach(), want)
        x = parts[rank].to(dtype).requires_grad_()
        z = copy_to_tp(x, comm, chain)
        with pytest.warns(UserWarning, match="do not fit"):
            z.backward(torch.ones_like(z))
        assert same_bits(x.grad, torch.full_like(x, float(world)))


def test_autograd_falls_back_to_torch_distributed_for_what_does_not_fit():
    run_ranks(_autograd_falls_back)


def _env_switch(rank, world):
    """ECHO_ALLREDUCE is read when an EchoAllReduce is constructed (config.py)."""
    from echo_allreduce import EchoAllReduce

    x = rank_inputs(0, 4096, torch.float32)[rank]
    for value in ("off", "int4", "int8", "none", "bogus", ""):
        os.environ["ECHO_ALLREDUCE"] = value
        if value == "bogus":
            with pytest.raises(ValueError, match="ECHO_ALLREDUCE"):
                EchoAllReduce(None, 100)
            continue
        comm = EchoAllReduce(None, 4096, quant="symmetric", bits=4, comp="none", backend="reference")
        got = comm.all_reduce(x.clone())
        if value == "off":
            assert comm.backend == "off" and not comm.should_use(x)
            for bad in (torch.empty(2, 4096), torch.empty(4096, dtype=torch.float64)):  # no broadcast, no cast
                with pytest.raises(ValueError, match="dtype and shape"):
                    comm.all_reduce(x.clone(), out=bad)
            want = x.clone()
            dist.all_reduce(want)
            assert same_bits(got, want)
            continue
        quant, bits = {"int4": ("zero_aware", 4), "int8": ("zero_aware", 8), "none": ("none", 4), "": ("symmetric", 4)}[value]
        assert (comm.backend, comm.quant, comm.bits) == ("reference", quant, bits), value
        # ECHO_ALLREDUCE=int4 names the recommended 4-bit setting: rotated, clipped (front.py)
        outlier = dict(rotate=True, clip=RECOMMENDED_CLIP) if value == "int4" else {}
        want = reference.all_reduce([to_numpy(t) for t in rank_inputs(0, 4096, torch.float32)], quant=quant, bits=bits,
                                    **outlier)
        assert np.array_equal(to_numpy(got), want[rank]), value


def test_env_switch():
    run_ranks(_env_switch)


def _mismatched_construction(rank, world):
    """A rank whose construction fails alone, or that is built differently (an argument, or
    ECHO_ALLREDUCE set on one rank only), makes every rank raise at once; none waits in the
    group, and the group works afterwards."""
    import time

    from echo_allreduce import EchoAllReduce

    t0 = time.monotonic()
    with pytest.raises((ValueError, RuntimeError)) as e:  # rank 0: its own error; rank 1: rank 0 failed
        EchoAllReduce(None, 0 if rank == 0 else 100, backend="reference")
    assert ("max_elements must be > 0" if rank == 0 else "rank 0 failed to set up") in str(e.value)
    with pytest.raises((TypeError, RuntimeError)) as e:  # not only ValueError: any error is held
        EchoAllReduce(None, 100, group_size=None if rank == 0 else 128, backend="reference")
    assert isinstance(e.value, TypeError) if rank == 0 else "rank 0 failed to set up" in str(e.value)
    with pytest.raises(ValueError, match="different bits"):
        EchoAllReduce(None, 100, bits=4 if rank == 0 else 8, comp="none", backend="reference")
    os.environ["ECHO_ALLREDUCE"] = "off" if rank == 1 else ""
    try:
        with pytest.raises(ValueError, match="different backend"):
            EchoAllReduce(None, 100, comp="none", backend="reference")
    finally:
        os.environ["ECHO_ALLREDUCE"] = ""
    with pytest.raises((ValueError, RuntimeError)) as e:
        EchoAllReduce(None, 100, comp="none", backend="reference" if rank == 0 else "bogus")
    assert ("rank 1 failed to set up" if rank == 0 else "backend must be") in str(e.value)
    # what a call ignores does not count: bits and group size of quant 'none'
    EchoAllReduce(None, 100, quant="none", comp="none", bits=4 if rank == 0 else 8, backend="reference")
    assert time.monotonic() - t0 < 60
    comm = EchoAllReduce(None, 1000, comp="none", backend="reference")  # the group still works
    x = rank_inputs(0, 1000, torch.float32)[rank]
    got = comm.all_reduce(x.clone())
    want = reference.all_reduce([to_numpy(t) for t in rank_inputs(0, 1000, torch.float32)], comp="none", rotate=True,
                                clip=RECOMMENDED_CLIP)[rank]  # the defaults: the recommended 4-bit setting
    assert np.array_equal(to_numpy(got), want)


def test_mismatched_construction_raises_on_every_rank():
    run_ranks(_mismatched_construction)


def _autograd(rank, world):
    """reduce_from_tp: forward = Echo's sum (bit for bit the reference on the forward chain),
    backward = identity. copy_to_tp: forward = identity, backward = Echo's sum of the gradients
    (the reference on the backward chain), within the quantizer's bound of the exact sum."""
    from echo_allreduce import EchoAllReduce
    from echo_allreduce.autograd import copy_to_tp, reduce_from_tp

    n = 4096
    comm = EchoAllReduce(None, n, comp="error_feedback", storage=STORAGES[0], rotate=False, clip=1.0, backend="reference")
    fwd, bwd = comm.new_chain(), comm.new_chain()
    ref_fwd, ref_bwd = (reference.ChainState(world, n, STORAGES[0]) for _ in range(2))
    for call in range(3):
        parts = rank_inputs(call, n, torch.float32)
        grads = rank_inputs(100 + call, n, torch.float32)
        p = parts[rank].clone().requires_grad_()
        y = reduce_from_tp(p, comm, fwd)
        want = reference.all_reduce([to_numpy(t) for t in parts], chain=ref_fwd)[rank]
        assert np.array_equal(to_numpy(y), want)
        y.backward(grads[rank])
        assert same_bits(p.grad, grads[rank])

        x = parts[rank].clone().requires_grad_()
        z = copy_to_tp(x, comm, bwd)
        assert same_bits(z, x)
        z.backward(grads[rank])
        want = reference.all_reduce([to_numpy(t) for t in grads], chain=ref_bwd)[rank]
        assert np.array_equal(to_numpy(x.grad), want)
        exact = sum(g.double() for g in grads)
        # 4-bit: half a step (range / 15 <= 2 max / 15) for the send and for the sum, twice over:
        # error feedback adds the previous call's error back in.
        step = sum(g.abs().max().item() for g in grads) / 3.5
        assert (x.grad.double() - exact).abs().max().item() <= step


def test_autograd_functions_keep_their_own_chains():
    run_ranks(_autograd)


def _tp_mlp(rank, world):
    """A column -> gelu -> row MLP on 2 ranks equals its single-device twin (quant none: to fp32
    rounding; zero_aware 4-bit: within the 4-bit steps of the partials and the sum)."""
    from echo_allreduce import EchoAllReduce
    from echo_allreduce.tp import ColumnParallelLinear, RowParallelLinear, TensorParallel, _full_weight

    d, h, tokens = 64, 256, 32
    g = torch.Generator().manual_seed(5)
    x = torch.randn(tokens, d, generator=g)
    w1, w2 = _full_weight(h, d, 1), _full_weight(d, h, 2)
    xt = x.clone().requires_grad_()
    want = torch.nn.functional.linear(torch.nn.functional.gelu(xt @ w1.t()), w2)
    want.sum().backward()
    for quant, tol in (("none", 1e-5), ("zero_aware", 0.2)):
        comm = EchoAllReduce(None, tokens * d, quant=quant, comp="error_feedback", storage=STORAGES[0],
                             backend="reference")
        tp = TensorParallel(comm)
        fc1 = ColumnParallelLinear(d, h, tp, bias=False, seed=1)
        fc2 = RowParallelLinear(h, d, tp, bias=False, seed=2)
        tp.new_pass()
        xe = x.clone().requires_grad_()
        y = fc2(torch.nn.functional.gelu(fc1(xe)))
        y.sum().backward()
        scale = want.abs().max().item()
        assert (y - want).abs().max().item() <= tol * scale, quant
        assert (xe.grad - xt.grad).abs().max().item() <= tol * xt.grad.abs().max().item(), quant


def test_tp_mlp_matches_its_single_device_twin():
    run_ranks(_tp_mlp)


def _outlier_path(rank, world):
    """Rotated, clipped calls and the closing call through the front equal the reference's."""
    from echo_allreduce import EchoAllReduce

    n = 4099
    with pytest.raises(ValueError, match="a clip's errors exceed"):  # comp::holds_errors_of
        EchoAllReduce(None, n, rotate=True, clip=0.93, storage="step8", backend="reference")
    for dtype in (torch.bfloat16, torch.float32):
        comm = EchoAllReduce(None, n, rotate=True, clip=0.93, storage="int8", backend="reference")
        chain = comm.new_chain()
        mine = reference.ChainState(world, n, "int8")
        for call in range(5):
            closes = call == 4
            xs = rank_inputs(call, n, dtype)
            got = comm.all_reduce(xs[rank].clone(), chain=chain, closes=closes)
            want = reference.all_reduce([to_numpy(t) for t in xs], chain=mine, dtype=TD[dtype], rotate=True, clip=0.93,
                                        closes=closes)[rank]
            assert same_bits(got, torch.from_numpy(want.view(np.uint8)).view(dtype)), (dtype, call)
        assert mine.size == 0  # closed: the next call starts fresh
        with pytest.raises(ValueError, match="cannot be deferred"):
            comm.all_reduce(xs[rank].clone(), out=torch.empty_like(xs[rank]), chain=chain, mode="deferred", closes=True)


def test_outlier_path_through_the_front_equals_the_reference():
    run_ranks(_outlier_path)


def _sandwich(rank, world):
    """A model that normalizes each block's output before the residual add (a sandwich norm): its
    row-parallel layers take into_residual=False, so an error-feedback object gives exactly the
    outputs of one without compensation; chaining those sites would not."""
    from echo_allreduce import EchoAllReduce
    from echo_allreduce.tp import ColumnParallelLinear, RowParallelLinear, TensorParallel

    d, h, tokens, depth = 64, 256, 16, 6
    x0 = torch.randn(tokens, d, generator=torch.Generator().manual_seed(9))
    norm = lambda v: v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6)  # noqa: E731

    def run(comp, into_residual):
        comm = EchoAllReduce(None, tokens * d, comp=comp, storage="float", backend="reference")
        tp = TensorParallel(comm)
        blocks = [(ColumnParallelLinear(d, h, tp, bias=False, seed=10 + i),
                   RowParallelLinear(h, d, tp, bias=False, seed=20 + i, into_residual=into_residual)) for i in range(depth)]
        tp.new_pass()
        x = x0.clone()
        with torch.no_grad():
            for up, down in blocks:
                x = x + norm(down(torch.nn.functional.gelu(up(norm(x)))))
        return x

    plain = run("none", True)
    assert same_bits(run("error_feedback", False), plain)
    assert not same_bits(run("error_feedback", True), plain)  # the chain would act there


def test_sites_normalized_before_the_residual_add_keep_out_of_the_chain():
    run_ranks(_sandwich)


# ---- torch ops without a GPU: registration and torch.compile tracing -------------------------
ops = pytest.importorskip("echo_allreduce.ops")
needs_ops = pytest.mark.skipif(not ops.ops_available(), reason="echo_allreduce was built without its torch ops "
                               "(ECHO_BUILD_TORCH=OFF)")


@needs_ops
def test_ops_are_registered_with_their_schemas():
    schema = str(torch.ops.echo.all_reduce.default._schema)
    assert "Tensor(a!) out" in schema and "Tensor(b!)? state" in schema
    assert "Tensor(a!) state" in str(torch.ops.echo.update.default._schema)
    for op, mutated in (("reduce_scatter", ("Tensor(a!) out", "Tensor(b!)? state")), ("all_gather", ("Tensor(a!) out",))):
        assert all(m in str(getattr(torch.ops.echo, op).default._schema) for m in mutated), op
    table = torch.ops.echo.instantiations()  # the last field: 1 where the entry serves sequence parallelism
    for g in (32, 64):
        assert f"zero_aware 4 {g} 0 1024 none - cuda_ipc 0" in table and f"zero_aware 8 {g} 0 1024 none - cuda_ipc 0" in table
    for bits in (4, 8):
        assert f"zero_aware {bits} 128 0 1024 error_feedback step8 cuda_ipc 0" in table
    assert "zero_aware 4 128 1 870 none - cuda_ipc 1" in table
    assert "none 0 0 0 1024 none - cuda_ipc 1" in table and "zero_aware 4 128 0 1024 none - nccl 0" in table
    assert "zero_aware 4 128 1 870 error_feedback int8 cuda_ipc 1" in table  # echo::default_all_reduce
    assert not [e for e in table if " 870 error_feedback step" in e]  # comp::holds_errors_of
    assert not [e for e in table if e.endswith("nccl 1")]
    with pytest.raises(ValueError, match="cuda:"):
        torch.ops.echo.all_reduce(1, torch.zeros(16), torch.zeros(16), None, False)
    with pytest.raises(ValueError, match="names no live"):
        torch.ops.echo.state_bytes(12345, 16)


def _tracing_front():
    """A front whose ops are traced, never run: no handle is created (there is no GPU here)."""
    from echo_allreduce.front import EchoAllReduce

    comm = EchoAllReduce.__new__(EchoAllReduce)
    comm.backend, comm.keeps_state, comm._handle, comm._chains = "cuda", True, 7, {}
    comm.rank, comm.world_size, comm.max_elements, comm.device = 0, 2, 1 << 20, torch.device("meta")
    return comm


def _traced_graphs(block, x):
    """The code of the forward and the backward graph torch.compile makes of block (one graph
    each, fullgraph), after a forward and backward pass on x."""
    from torch._dynamo.backends.common import aot_autograd
    from functorch.compile import make_boxed_func

    graphs = []

    def keep(gm, _):
        graphs.append(gm.code)
        return make_boxed_func(gm.forward)

    f = torch.compile(block, backend=aot_autograd(fw_compiler=keep, bw_compiler=keep), fullgraph=True)
    f(x).sum().backward()
    return graphs


@needs_ops
def test_compile_traces_a_tp_block_in_one_graph_with_both_chains_mutated():
    from echo_allreduce.autograd import copy_to_tp, reduce_from_tp

    comm = _tracing_front()
    fwd_chain = torch.zeros(4096, dtype=torch.uint8, device="meta")
    bwd_chain = torch.zeros(4096, dtype=torch.uint8, device="meta")
    w1 = torch.randn(64, 32, device="meta", requires_grad=True)
    w2 = torch.randn(32, 64, device="meta", requires_grad=True)

    def block(x):
        h = torch.nn.functional.linear(copy_to_tp(x, comm, bwd_chain), w1)
        return x + reduce_from_tp(torch.nn.functional.linear(torch.nn.functional.gelu(h), w2), comm, fwd_chain)

    forward, backward = _traced_graphs(block, torch.randn(8, 32, device="meta", requires_grad=True))
    assert forward.count("torch.ops.echo.all_reduce.default") == 1  # the row-parallel output
    assert backward.count("torch.ops.echo.all_reduce.default") == 1  # the column-parallel input gradient
    assert "copy_" in backward  # the backward chain's mutation reaches the caller's tensor


@needs_ops
def test_compile_traces_a_sequence_parallel_block_with_both_chains_mutated():
    from echo_allreduce.autograd import gather_from_sp, reduce_scatter_to_sp

    comm = _tracing_front()
    comm.sequence_parallel, comm.quant, comm.group_size = True, "zero_aware", 128
    fwd_chain = torch.zeros(4096, dtype=torch.uint8, device="meta")
    bwd_chain = torch.zeros(4096, dtype=torch.uint8, device="meta")
    w1 = torch.randn(64, 128, device="meta", requires_grad=True)
    w2 = torch.randn(128, 64, device="meta", requires_grad=True)

    def block(x):  # x: this rank's 8 of 16 tokens
        h = torch.nn.functional.linear(gather_from_sp(x, comm, bwd_chain), w1)
        return x + reduce_scatter_to_sp(torch.nn.functional.linear(torch.nn.functional.gelu(h), w2), comm, fwd_chain)

    forward, backward = _traced_graphs(block, torch.randn(8, 128, device="meta", requires_grad=True))
    for graph in (forward, backward):  # forward: gather then scatter; backward: the reverse
        assert graph.count("torch.ops.echo.all_gather.default") == 1 and graph.count("torch.ops.echo.reduce_scatter.default") == 1
    assert "copy_" in backward  # the backward chain's mutation reaches the caller's tensor


def _fused_epilogue(rank, world):
    """all_reduce_add_rms_norm on the reference backend: the reference all-reduce, then
    reference.residual_rms_norm on this rank's out and residual, bit for bit, along a chain."""
    from echo_allreduce import EchoAllReduce
    from _ranks import from_numpy

    hidden, rows = 264, 5
    n = hidden * rows
    for cfg in (CONFIGS[0], CONFIGS[1], CONFIGS[5]):
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            comm = EchoAllReduce(None, n, backend="reference", **cfg)
            chain = comm.new_chain()
            ef = cfg["comp"] == "error_feedback"
            mine = reference.ChainState(world, n, cfg["storage"]) if ef else None
            for call in range(3):
                xs = rank_inputs(call, n, dtype)
                res0 = rank_inputs(call + 50, n, dtype)[rank]  # every rank's residual differs
                w = rank_inputs(call + 90, hidden, dtype, 1)[0] + 1
                x, res = xs[rank].clone(), res0.clone()
                out = torch.empty_like(x) if call % 2 else None
                got = comm.all_reduce_add_rms_norm(x, res, w, 1e-5, out=out, chain=chain, closes=call == 2 and ef)
                assert got is (x if out is None else out)
                want = reference.all_reduce([to_numpy(t) for t in xs], chain=mine, dtype=TD[dtype], closes=call == 2 and ef,
                                            **{k: v for k, v in cfg.items() if k != "storage" or ef})[rank]
                want_res = to_numpy(res0).copy()
                reference.residual_rms_norm(want, want_res, to_numpy(w), 1e-5, TD[dtype])
                assert same_bits(got, from_numpy(want, dtype, x)), (cfg, dtype, call)
                assert same_bits(res, from_numpy(want_res, dtype, x)), (cfg, dtype, call)
    # misuse: refused before anything is sent, on every rank alike
    comm = EchoAllReduce(None, n, backend="reference", **CONFIGS[1])
    x = torch.zeros(n, dtype=torch.bfloat16)
    w = torch.ones(hidden, dtype=torch.bfloat16)
    for args, match in (((x, torch.zeros(n), w), "residual must have x's dtype"),
                        ((x, torch.zeros(n - 8, dtype=torch.bfloat16), w), "residual has"),
                        ((x, torch.zeros(n, dtype=torch.bfloat16), torch.ones(12, dtype=torch.bfloat16)), "multiple of 8"),
                        ((x, torch.zeros(n, dtype=torch.bfloat16), torch.ones(2 * hidden, dtype=torch.bfloat16)), "divides")):
        with pytest.raises(ValueError, match=match):
            comm.all_reduce_add_rms_norm(*args, 1e-6)
    with pytest.raises(ValueError, match="epsilon"):
        comm.all_reduce_add_rms_norm(x, torch.zeros(n, dtype=torch.bfloat16), w, -1.0)


def test_fused_add_rms_norm_on_the_reference_backend_is_the_reference():
    run_ranks(_fused_epilogue)


def _tp_fused_block(rank, world):
    """RowParallelLinear.forward_add_rms_norm equals forward, the residual add and an fp32 RMSNorm
    within 8-bit quantization's error, and the residual it leaves equals residual + forward."""
    from echo_allreduce import EchoAllReduce
    from echo_allreduce.tp import RowParallelLinear, TensorParallel

    d, tokens = 256, 16
    comm = EchoAllReduce(None, tokens * d, quant="zero_aware", bits=8, group_size=128, comp="error_feedback",
                         storage="int8", backend="reference")
    fused_tp, plain_tp = TensorParallel(comm), TensorParallel(comm)
    fused = RowParallelLinear(4 * d, d, fused_tp, seed=3, dtype=torch.bfloat16)
    plain = RowParallelLinear(4 * d, d, plain_tp, seed=3, dtype=torch.bfloat16)
    with torch.no_grad():
        fused.bias.normal_(generator=torch.Generator().manual_seed(4))
        plain.bias.copy_(fused.bias)
    norm_w = (1 + 0.1 * torch.randn(d, generator=torch.Generator().manual_seed(5))).to(torch.bfloat16)
    for step in range(3):
        x = rank_inputs(step, tokens * 4 * d, torch.bfloat16, 1)[0].view(tokens, 4 * d)[:, rank * 2 * d:(rank + 1) * 2 * d]
        x = x.contiguous()
        res = rank_inputs(step + 10, tokens * d, torch.bfloat16, 1)[0].view(tokens, d)
        res_fused = res.clone()
        with torch.no_grad():
            h = fused.forward_add_rms_norm(x, res_fused, norm_w, 1e-6)
            y = plain(x)
        r = (res.float() + y.float()).to(torch.bfloat16)
        assert (res_fused.float() - r.float()).abs().max() <= 0.02 * r.float().abs().max(), step
        rf = r.float()
        want = (rf * torch.rsqrt(rf.pow(2).mean(-1, keepdim=True) + 1e-6)) * norm_w.float()
        assert (h.float() - want).abs().max() <= 0.03 * want.abs().max(), step
    with pytest.raises(RuntimeError, match="inference"):
        fused.forward_add_rms_norm(x, res_fused, norm_w, 1e-6)


def test_tp_row_parallel_fused_add_rms_norm():
    run_ranks(_tp_fused_block)
