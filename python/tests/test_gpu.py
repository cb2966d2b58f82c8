"""The torch ops on 2 GPUs (one process per GPU, an NCCL group): bit for bit equal to
echo_allreduce.reference through the torch path, CUDA graph capture and replay, torch.compile,
autograd against the exact all-reduce, the env switch, bad inputs, a missing peer. Skipped, with
the reason shown (pytest -rs), where torch, the torch ops or 2 GPUs are absent.

With one GPU and ECHO_TEST_RANKS=2 (as for the C++ GPU tests, docs/testing.md) the two ranks
share it: NCCL refuses two ranks on one GPU, so the group is gloo and the ops are asked for the cuda
backend explicitly; what needs NCCL or a second device (transport::nccl, a tensor on the other
rank's GPU) is in tests of its own that report themselves skipped there."""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the GPU tests need it")
from echo_allreduce import ops, reference  # noqa: E402

if not ops.ops_available():
    pytest.skip("echo_allreduce was built without its torch ops (ECHO_BUILD_TORCH=OFF)", allow_module_level=True)
GPUS = torch.cuda.device_count()
SHARED = GPUS < 2  # the ranks share one GPU (ECHO_TEST_RANKS=2 only)
if GPUS == 0 or (SHARED and os.environ.get("ECHO_TEST_RANKS") != "2"):
    pytest.skip(f"needs 2 GPUs (or 1 with ECHO_TEST_RANKS=2), found {GPUS}", allow_module_level=True)
BACKEND = "gloo" if SHARED else "nccl"
# A gloo group defaults to the reference backend: ask for the ops (with NCCL the default picks them)
SHARED_KW = {"backend": "cuda"} if SHARED else {}

import torch.distributed as dist  # noqa: E402

from _ranks import dtype_name, from_numpy, rank_inputs, run_ranks, same_bits, to_numpy  # noqa: E402

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
STORAGES = ("step8", "int8", "bf16", "float")
# (quant, bits, group_size, comp, storage): a sample of the table covering every quantizer,
# every group size and every storage.
CONFIGS = [
    ("zero_aware", 4, 128, "error_feedback", "step8"),
    ("zero_aware", 4, 128, "error_feedback", "int8"),
    ("zero_aware", 4, 32, "none", ""),
    ("zero_aware", 4, 64, "error_feedback", "bf16"),
    ("zero_aware", 8, 128, "error_feedback", "float"),
    ("zero_aware", 8, 32, "error_feedback", "int8"),
    ("zero_aware", 8, 64, "none", ""),
    ("symmetric", 4, 128, "error_feedback", "int8"),
    ("naive_zero_point", 4, 128, "none", ""),
    ("naive_zero_point", 4, 128, "error_feedback", "step8"),  # step8 with its own step
    ("none", 4, 128, "none", ""),
    ("none", 4, 128, "error_feedback", "int8"),
]


def device(rank):
    """This rank's GPU, made current."""
    d = torch.device("cuda", rank % GPUS)
    torch.cuda.set_device(d)
    return d


def make(cfg, max_elements, **kw):
    from echo_allreduce import EchoAllReduce

    quant, bits, group, comp, storage = cfg
    kw = {"rotate": False, "clip": 1.0, **kw}  # the configs name plain quantizers (the default: below)
    return EchoAllReduce(None, max_elements, quant=quant, bits=bits, group_size=group, comp=comp,
                         storage=storage or "int8", **SHARED_KW, **kw)


class Expect:
    """The reference's output for this rank along one chain (a ChainState over all ranks)."""

    def __init__(self, cfg, world, capacity):
        self.quant, self.bits, self.group, self.comp, self.storage = cfg
        self.chain = reference.ChainState(world, capacity, self.storage) if self.comp == "error_feedback" else None

    def __call__(self, xs, rank, quant=None, chain=True):
        """chain=False: a call that leaves the chain untouched (the one-shot kernel, NCCL's own)."""
        out = reference.all_reduce([to_numpy(x) for x in xs], quant=quant or self.quant, bits=self.bits,
                                   group_size=self.group, chain=self.chain if chain else None,
                                   dtype=dtype_name(xs[0].dtype))
        return from_numpy(out[rank], xs[0].dtype, xs[0])


def _bit_for_bit(rank, world):
    dev = device(rank)
    n = 300_007  # no multiple of any group or of the ranks
    for cfg in CONFIGS:
        comm = make(cfg, n, unquantized_below_bytes=0)  # the quantizer itself at every size
        assert comm.backend == "cuda"
        for dtype in DTYPES:
            chain = comm.new_chain()
            expect = Expect(cfg, world, n)
            for call in range(4):
                xs = rank_inputs(call, n - (call == 3) * 1001, dtype, world)  # the last call: a shape change
                x = xs[rank].to(dev)
                got = comm.all_reduce(x, chain=chain) if call % 2 else comm.all_reduce(x, out=torch.empty_like(x), chain=chain)
                assert same_bits(got, expect(xs, rank)), (cfg, dtype, call)
        comm.check()
        comm.close()


def test_op_equals_the_reference_bit_for_bit():
    run_ranks(_bit_for_bit, backend=BACKEND)


def _dispatch_deferred(rank, world):
    dev = device(rank)
    cfg = ("zero_aware", 4, 128, "error_feedback", "int8")
    # Default dispatch: below unquantized_below_bytes the 16-bit path (the reference's quant none):
    # up to 1 MiB the one-shot kernel, which passes the chain through untouched; then the 16-bit
    # pipeline, which keeps the rounding errors in the chain.
    comm = make(cfg, 4 << 20)
    below = torch.ops.echo.unquantized_below_bytes(comm._handle)
    for n in (1000, 32_771, 600_001, 3 << 20):
        chain = comm.new_chain()
        expect = Expect(cfg, world, n)
        for call in range(2):
            xs = rank_inputs(call, n, torch.bfloat16, world)
            got = comm.all_reduce(xs[rank].to(dev), out=torch.empty(n, dtype=torch.bfloat16, device=dev), chain=chain)
            unquantized = 2 * n < below
            want = expect(xs, rank, quant="none" if unquantized else None, chain=not (unquantized and 2 * n <= 1 << 20))
            assert same_bits(got, want), (n, below)
    # Deferred: all_reduce writes this rank's own errors, update the rest; equal to fused.
    fused, deferred = comm.new_chain(), comm.new_chain()
    side = torch.cuda.Stream()
    for call in range(3):
        x = rank_inputs(call, 3 << 20, torch.float16, world)[rank].to(dev)
        a = comm.all_reduce(x, out=torch.empty_like(x), chain=fused)
        b = comm.all_reduce(x, out=torch.empty_like(x), chain=deferred, mode="deferred")
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            comm.update(x, deferred)
        torch.cuda.current_stream().wait_stream(side)
        assert same_bits(a, b), call
    torch.cuda.synchronize()
    # The stored errors agree (past the chain's 256-byte header, comp/compensator.cuh, whose
    # bookkeeping of the deferred update differs).
    assert torch.equal(fused[256:], deferred[256:])
    comm.close()


def _default_config(rank, world):
    """EchoAllReduce's defaults (echo::default_quantizer: rotated, clipped 4-bit + int8 state),
    a chain of calls closed by its last, equal to the reference's bits."""
    from echo_allreduce import EchoAllReduce
    from echo_allreduce.front import RECOMMENDED_CLIP

    dev = device(rank)
    n = 576 * 97
    comm = EchoAllReduce(None, n, unquantized_below_bytes=0, **SHARED_KW)
    assert (comm.rotate, comm.clip, comm.storage) == (True, 870, "int8"), comm
    for dtype in (torch.bfloat16, torch.float32):
        chain = comm.new_chain()
        mine = reference.ChainState(world, n, "int8")
        for call in range(6):
            closes = call == 5
            xs = rank_inputs(call, n, dtype, world)
            got = comm.all_reduce(xs[rank].to(dev), chain=chain, closes=closes)
            want = reference.all_reduce([to_numpy(x) for x in xs], chain=mine, dtype=dtype_name(dtype), rotate=True,
                                        clip=RECOMMENDED_CLIP, closes=closes)[rank]
            assert same_bits(got, from_numpy(want, dtype, xs[rank])), (dtype, call)
    comm.close()


def test_the_default_configuration_and_its_closing_call_equal_the_reference():
    run_ranks(_default_config, backend=BACKEND)


def test_default_dispatch_and_deferred_update():
    run_ranks(_dispatch_deferred, backend=BACKEND)


def _nccl_transport(rank, world):
    dev = device(rank)
    for cfg in (("zero_aware", 4, 128, "error_feedback", "int8"), ("zero_aware", 8, 128, "none", ""),
                ("none", 4, 128, "error_feedback", "int8")):
        comm = make(cfg, 100_000, transport="nccl", unquantized_below_bytes=0)
        chain = comm.new_chain()
        expect = Expect(cfg, world, 100_000)
        for call in range(3):
            xs = rank_inputs(call, 99_999, torch.bfloat16, world)
            assert same_bits(comm.all_reduce(xs[rank].to(dev), chain=chain), expect(xs, rank)), (cfg, call)
        comm.close()


@pytest.mark.skipif(SHARED, reason="transport::nccl needs NCCL, which refuses two ranks on one GPU")
def test_nccl_transport():
    run_ranks(_nccl_transport, backend=BACKEND)


def _reset_chain(rank, world):
    # reset_chain zeroes only the chain's tag; the next call must equal a fresh chain's, eagerly
    # and inside a captured graph, although the stored errors stay in memory.
    dev = device(rank)
    cfg = ("zero_aware", 4, 128, "error_feedback", "bf16")
    n = 200_003
    comm = make(cfg, n, unquantized_below_bytes=0)
    chain = comm.new_chain()
    for call in range(2):
        comm.all_reduce(rank_inputs(call, n, torch.bfloat16, world)[rank].to(dev), chain=chain)
    comm.reset_chain(chain)
    assert chain[256:].any()  # the old errors are still there; only the tag was cleared
    xs = rank_inputs(7, n, torch.bfloat16, world)
    got = comm.all_reduce(xs[rank].to(dev), out=torch.empty(n, dtype=torch.bfloat16, device=dev), chain=chain)
    assert same_bits(got, Expect(cfg, world, n)(xs, rank))
    # captured: reset + call, replayed twice, each replay a fresh chain's result
    x = xs[rank].to(dev)
    out = torch.empty_like(x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the capture (it continues the chain)
        comm.all_reduce(x, out=out, chain=chain)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        comm.reset_chain(chain)
        comm.all_reduce(x, out=out, chain=chain)
    for _ in range(2):
        graph.replay()
        torch.cuda.synchronize()
        assert same_bits(out, Expect(cfg, world, n)(xs, rank))
    comm.check()
    comm.close()


def test_reset_chain_clears_the_tag_only_and_starts_afresh():
    run_ranks(_reset_chain, backend=BACKEND)


def _graph_and_compile(rank, world):
    dev = device(rank)
    cfg = ("zero_aware", 4, 128, "error_feedback", "int8")
    n = 65_537
    comm = make(cfg, n, unquantized_below_bytes=0)
    # CUDA graph: the call, its chain and its buffers captured once, replayed with new inputs.
    chain = comm.new_chain()
    static_in = torch.zeros(n, dtype=torch.bfloat16, device=dev)
    static_out = torch.empty_like(static_in)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the capture, then a fresh chain
        comm.all_reduce(static_in, out=static_out, chain=chain)
    torch.cuda.current_stream().wait_stream(s)
    chain.zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        comm.all_reduce(static_in, out=static_out, chain=chain)
    for p in range(2):  # two passes: zero_() between them restarts the chain
        chain.zero_()
        expect = Expect(cfg, world, n)
        for call in range(4):
            xs = rank_inputs(10 * p + call, n, torch.bfloat16, world)
            static_in.copy_(xs[rank])
            graph.replay()
            assert same_bits(static_out, expect(xs, rank)), (p, call)

    # torch.compile (fullgraph): the op inside a compiled function, bit for bit.
    chain = comm.new_chain()
    expect = Expect(cfg, world, n)

    @torch.compile(fullgraph=True)
    def doubled_sum(x):
        return comm.all_reduce(x * 2, out=torch.empty_like(x), chain=chain)

    for call in range(3):
        xs = rank_inputs(call, n, torch.bfloat16, world)
        got = doubled_sum(xs[rank].to(dev))
        assert same_bits(got, expect([x * 2 for x in xs], rank)), call

    # torch.compile (fullgraph) of a TP block, forward and backward, against the same block eager.
    # 8-bit: a code that flips between the two (their GEMMs and norms may round differently) moves
    # a value by 1/255 of its group's range, well inside the tolerance.
    from echo_allreduce.tp import ColumnParallelLinear, RowParallelLinear, TensorParallel

    d, tokens = 256, 64
    blocks = []
    for _ in range(2):
        tp = TensorParallel(make(("zero_aware", 8, 128, "error_feedback", "int8"), tokens * d, unquantized_below_bytes=0))
        fc1 = ColumnParallelLinear(d, 4 * d, tp, seed=1, device=dev, dtype=torch.bfloat16)
        fc2 = RowParallelLinear(4 * d, d, tp, seed=2, device=dev, dtype=torch.bfloat16)
        blocks.append((tp, fc1, fc2))

    def block(tp, fc1, fc2, x):
        return x + fc2(torch.nn.functional.gelu(fc1(torch.nn.functional.layer_norm(x, (d,)))))

    compiled = torch.compile(block, fullgraph=True)
    for step in range(3):
        x = rank_inputs(step, tokens * d, torch.bfloat16, 1)[0].view(tokens, d).to(dev)
        outs, grads = [], []
        for (tp, fc1, fc2), f in zip(blocks, (block, compiled)):
            tp.new_pass()
            xi = x.clone().requires_grad_()
            y = f(tp, fc1, fc2, xi)
            y.float().square().sum().backward()
            outs.append(y.float())
            grads.append(xi.grad.float())
        scale = outs[0].abs().max()
        assert (outs[0] - outs[1]).abs().max() <= 0.05 * scale, step
        assert (grads[0] - grads[1]).abs().max() <= 0.05 * grads[0].abs().max(), step
    comm.close()


def test_cuda_graph_replay_and_torch_compile():
    run_ranks(_graph_and_compile, backend=BACKEND, timeout=600)


def _autograd_and_env(rank, world):
    from echo_allreduce import EchoAllReduce
    from echo_allreduce.autograd import copy_to_tp, reduce_from_tp

    dev = device(rank)
    n = 1 << 18
    comm = make(("zero_aware", 4, 128, "error_feedback", "int8"), n, unquantized_below_bytes=0)
    fwd, bwd = comm.new_chain(), comm.new_chain()
    expect_fwd = Expect(("zero_aware", 4, 128, "error_feedback", "int8"), world, n)
    expect_bwd = Expect(("zero_aware", 4, 128, "error_feedback", "int8"), world, n)
    for call in range(3):
        parts = rank_inputs(call, n, torch.float32, world)
        grads = rank_inputs(100 + call, n, torch.float32, world)
        p = parts[rank].to(dev).requires_grad_()
        y = reduce_from_tp(p, comm, fwd)
        assert same_bits(y, expect_fwd(parts, rank))
        y.backward(grads[rank].to(dev))
        assert same_bits(p.grad, grads[rank])  # identity
        x = parts[rank].to(dev).requires_grad_()
        copy_to_tp(x, comm, bwd).backward(grads[rank].to(dev))
        assert same_bits(x.grad, expect_bwd(grads, rank))
        # ... and within the 4-bit bound of the exact all-reduce (NCCL)
        exact = grads[rank].to(dev).double()
        dist.all_reduce(exact)
        step = sum(g.abs().max().item() for g in grads) / 3.5  # as in test_front_cpu.py
        assert (x.grad.double() - exact).abs().max().item() <= step
    comm.close()

    # The env switch, read at construction.
    x = rank_inputs(0, 4096, torch.bfloat16, world)
    for value, want in (("off", None), ("int4", ("zero_aware", 4)), ("int8", ("zero_aware", 8)), ("none", ("none", 4))):
        os.environ["ECHO_ALLREDUCE"] = value
        comm = EchoAllReduce(None, 4096, quant="symmetric", comp="none", unquantized_below_bytes=0, rotate=False,
                             clip=1.0, **SHARED_KW)
        got = comm.all_reduce(x[rank].to(dev))
        if want is None:
            assert comm.backend == "off" and not comm.should_use(x[rank].to(dev))
            exact = x[rank].to(dev)
            dist.all_reduce(exact)
            assert same_bits(got, exact)
        else:
            assert (comm.backend, comm.quant, comm.bits) == ("cuda", *want)
            assert same_bits(got, Expect((*want, 128, "none", ""), world, 4096)(x, rank))
        comm.close()
    # int4 where the caller named no rotation or clip: the recommended 4-bit setting
    os.environ["ECHO_ALLREDUCE"] = "int4"
    comm = EchoAllReduce(None, 4096, quant="symmetric", comp="none", unquantized_below_bytes=0, **SHARED_KW)
    assert (comm.quant, comm.bits, comm.rotate, comm.clip) == ("zero_aware", 4, True, 870)
    comm.close()
    del os.environ["ECHO_ALLREDUCE"]


def test_autograd_and_env_switch():
    run_ranks(_autograd_and_env, backend=BACKEND)


def _bad_inputs(rank, world):
    dev = device(rank)
    n = 4096
    cfg = ("zero_aware", 4, 128, "error_feedback", "int8")
    comm = make(cfg, n, unquantized_below_bytes=0)
    chain = comm.new_chain()
    expect = Expect(cfg, world, n)
    xs = rank_inputs(0, n, torch.bfloat16, world)
    x = xs[rank].to(dev)
    assert same_bits(comm.all_reduce(x, out=torch.empty_like(x), chain=chain), expect(xs, rank))
    torch.cuda.synchronize()
    before = chain.clone()
    assert comm.should_use(x) and not comm.should_use(x[1:]) and not comm.should_use(x.cpu())
    other = make(("zero_aware", 4, 128, "error_feedback", "bf16"), n, unquantized_below_bytes=0)
    bad = [
        ("dtype", lambda: comm.all_reduce(x.to(torch.int32), chain=chain)),
        ("dtype", lambda: comm.all_reduce(x.double(), chain=chain)),
        ("cuda:", lambda: comm.all_reduce(x.cpu(), chain=chain)),
        ("contiguous", lambda: comm.all_reduce(x.view(64, 64).t(), chain=chain)),
        ("max_elements", lambda: comm.all_reduce(torch.zeros(n + 1, dtype=torch.bfloat16, device=dev), chain=chain)),
        ("16-byte", lambda: comm.all_reduce(x[1:], out=torch.empty(n - 1, dtype=x.dtype, device=dev), chain=chain)),
        ("16-byte", lambda: comm.all_reduce(torch.zeros(n + 1, dtype=x.dtype, device=dev)[1:], chain=chain)),
        ("elements", lambda: comm.all_reduce(x, out=torch.empty(n - 8, dtype=x.dtype, device=dev), chain=chain)),
        ("out is", lambda: comm.all_reduce(x, out=torch.empty(n, dtype=torch.float16, device=dev), chain=chain)),
        ("state_bytes", lambda: comm.all_reduce(x, out=torch.empty_like(x), chain=comm.new_chain(1000))),
        ("uint8", lambda: comm.all_reduce(x, out=torch.empty_like(x), chain=chain.float())),
        ("needs a chain", lambda: comm.all_reduce(x, out=torch.empty_like(x))),
        ("out tensor", lambda: comm.all_reduce(x, chain=chain, mode="deferred")),
        ("no deferred call", lambda: comm.update(x, chain)),
        # deferred calls the op refuses: none may leave an update pending (the next calls below)
        ("cannot be in place", lambda: comm.all_reduce(x, out=x.view(-1), chain=chain, mode="deferred")),
        ("16-byte", lambda: comm.all_reduce(x, out=torch.empty(n + 8, dtype=x.dtype, device=dev)[1:n + 1], chain=chain,
                                            mode="deferred")),
        ("elements", lambda: comm.all_reduce(x, out=torch.empty(n - 8, dtype=x.dtype, device=dev), chain=chain,
                                             mode="deferred")),
        # a chain of an object with another state format
        ("storage", lambda: comm.all_reduce(x, out=torch.empty_like(x), chain=other.new_chain())),
    ]
    for what, call in bad:
        with pytest.raises((ValueError, RuntimeError), match=what):
            call()
    torch.cuda.synchronize()
    assert torch.equal(chain, before)  # every refused call left the state untouched
    # ... and the chain goes on as if they never happened.
    xs = rank_inputs(1, n, torch.bfloat16, world)
    assert same_bits(comm.all_reduce(xs[rank].to(dev), chain=chain), expect(xs, rank))
    comm.check()
    other.close()
    handle = comm._handle
    comm.close()
    with pytest.raises(ValueError, match="names no live"):
        torch.ops.echo.all_reduce(handle, x, x, chain, False)


def test_bad_inputs_raise_and_leave_the_state_untouched():
    run_ranks(_bad_inputs, backend=BACKEND)


def _input_on_another_gpu(rank, world):
    dev = device(rank)
    cfg = ("zero_aware", 4, 128, "error_feedback", "int8")
    comm = make(cfg, 4096, unquantized_below_bytes=0)
    chain = comm.new_chain()
    expect = Expect(cfg, world, 4096)
    xs = rank_inputs(0, 4096, torch.bfloat16, world)
    assert same_bits(comm.all_reduce(xs[rank].to(dev), chain=chain), expect(xs, rank))
    torch.cuda.synchronize()
    before = chain.clone()
    with pytest.raises((ValueError, RuntimeError), match="cuda:"):
        comm.all_reduce(xs[rank].to(torch.device("cuda", 1 - rank)), chain=chain)
    torch.cuda.synchronize()
    assert torch.equal(chain, before)  # refused, the state untouched, and the chain goes on
    xs = rank_inputs(1, 4096, torch.bfloat16, world)
    assert same_bits(comm.all_reduce(xs[rank].to(dev), chain=chain), expect(xs, rank))
    comm.close()


@pytest.mark.skipif(SHARED, reason="needs a second GPU to put the input on")
def test_an_input_on_another_gpu_is_refused():
    run_ranks(_input_on_another_gpu, backend=BACKEND)


def _missing_peer(rank, world):
    dev = device(rank)
    comm = make(("zero_aware", 4, 128, "none", ""), 1 << 16, unquantized_below_bytes=0, spin_limit_s=1.0)
    x = torch.ones(1 << 16, device=dev)
    if rank == 0:  # rank 1 never calls
        comm.all_reduce(x)
        with pytest.raises(RuntimeError, match="timeout"):
            comm.check()
        with pytest.raises(RuntimeError, match="poisoned"):
            comm.all_reduce(x)
    dist.barrier()
    comm.close()


def test_a_missing_peer_is_a_clear_error_not_a_hang():
    run_ranks(_missing_peer, backend=BACKEND, timeout=120)


def same_values(got, want):
    """Bit for bit, except that a NaN may come back with another payload (both sides NaN)."""
    g, w = got.detach().cpu().float(), want.detach().cpu().float()
    nan = torch.isnan(w)
    return torch.equal(torch.isnan(g), nan) and same_bits(got[~nan.to(got.device)], want[~nan])


def _random_sequence(rank, world):
    """Long-lived objects under a random sequence that every rank draws alike (seeded): three
    objects of different quantizers, compensators and dispatch, two chains each, awkward sizes
    from 1 element up, three dtypes, in place / out of place / deferred with its update on another
    stream, resets, shape changes, a NaN or an Inf now and then, calls refused on every rank in
    between. Every output equals the reference along the same chain's history, and every refused
    call leaves the chain as it was."""
    import random

    dev = device(rank)
    objects = []
    for cfg, cap, kw in ((("zero_aware", 4, 128, "error_feedback", "step8"), 3 << 19, {}),  # default dispatch
                         (("zero_aware", 8, 64, "error_feedback", "int8"), 200_000, dict(unquantized_below_bytes=0)),
                         (("symmetric", 4, 128, "none", ""), 100_000, dict(unquantized_below_bytes=0))):
        comm = make(cfg, cap, **kw)
        below = torch.ops.echo.unquantized_below_bytes(comm._handle)
        chains = [(comm.new_chain(), Expect(cfg, world, cap)) for _ in range(2)]
        objects.append((cfg, comm, cap, below, chains))
    rng = random.Random(20261202)
    side = torch.cuda.Stream()
    counts = {}
    for call in range(int(os.environ.get("ECHO_PY_SOAK_CALLS", "240"))):
        cfg, comm, cap, below, chains = objects[rng.randrange(len(objects))]
        chain, expect = chains[rng.randrange(2)]
        ef = cfg[3] == "error_feedback"
        if ef and rng.random() < 0.05:
            comm.reset_chain(chain)
            expect.chain.reset()
        dtype = rng.choice(DTYPES)
        n = rng.choice((rng.randint(1, 300), rng.randint(1, 5000), rng.randint(1, cap)))
        xs = rank_inputs(1000 + call, n, dtype, world)
        if rng.random() < 0.05:  # the same position on one rank: its group's outputs are NaN / Inf
            xs[rng.randrange(world)][rng.randrange(n)] = rng.choice((float("nan"), float("inf")))
        if rng.random() < 0.05:  # refused on every rank: too large, or a deferred call in place
            big = torch.zeros(cap + 1, dtype=dtype, device=dev)
            torch.cuda.synchronize()
            before = chain.clone()
            with pytest.raises(ValueError):
                if rng.random() < 0.5:
                    comm.all_reduce(big, out=torch.empty_like(big), chain=chain)
                else:
                    comm.all_reduce(big[:n], out=big[:n], chain=chain, mode="deferred")
            torch.cuda.synchronize()
            assert torch.equal(chain, before), call
        x = xs[rank].to(dev)
        mode = rng.choice(("in place", "out", "deferred") if ef else ("in place", "out"))
        if mode == "in place":
            got = comm.all_reduce(x, chain=chain)
        elif mode == "out":
            got = comm.all_reduce(x, out=torch.empty_like(x), chain=chain)
        else:
            got = comm.all_reduce(x, out=torch.empty_like(x), chain=chain, mode="deferred")
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                comm.update(x, chain)
            torch.cuda.current_stream().wait_stream(side)
        nbytes = n * x.element_size()
        exact = nbytes < below  # the default dispatch's 16-bit paths; up to 1 MiB the chain passes through
        want = expect(xs, rank, quant="none" if exact else None, chain=not (exact and nbytes <= 1 << 20))
        assert same_values(got, want), (call, cfg, dtype, n, mode)
        counts[mode] = counts.get(mode, 0) + 1
    for _, comm, _, _, _ in objects:
        comm.check()
        comm.close()
    assert len(counts) == 3, counts


def test_a_random_sequence_on_long_lived_objects_equals_the_reference():
    run_ranks(_random_sequence, backend=BACKEND, timeout=400)


def _fused_epilogue(rank, world):
    """all_reduce_add_rms_norm through the op: the reference all-reduce, then the reference epilogue
    on this rank's out and residual, bit for bit; on the pipeline (forced) and the one-shot path
    (dispatch), eager, in a CUDA graph and under torch.compile."""
    dev = device(rank)
    hidden = 2048

    def expected(expect, xs, res0, w, quant=None, chain=True):
        want = to_numpy(expect(xs, rank, quant=quant, chain=chain)).copy()
        want_res = to_numpy(res0).copy()
        reference.residual_rms_norm(want, want_res, to_numpy(w), 1e-6, "bf16")
        return from_numpy(want, torch.bfloat16, xs[0]), from_numpy(want_res, torch.bfloat16, xs[0])

    def inputs(call, n):
        xs = rank_inputs(call, n, torch.bfloat16, world)
        res0 = rank_inputs(call + 50, n, torch.bfloat16, world)[rank]
        w = rank_inputs(call + 90, hidden, torch.bfloat16, 1)[0] + 1
        return xs, res0, w

    for cfg, tokens, forced in ((("zero_aware", 4, 128, "error_feedback", "int8"), 33, True),
                                (("none", 4, 128, "none", ""), 4, False)):
        n = tokens * hidden
        comm = make(cfg, n, unquantized_below_bytes=0 if forced else None)
        chain = comm.new_chain()
        expect = Expect(cfg, world, n)
        for call in range(3):
            xs, res0, w = inputs(call, n)
            x, res = xs[rank].to(dev), res0.to(dev)
            got = comm.all_reduce_add_rms_norm(x, res, w.to(dev), 1e-6, out=torch.empty_like(x) if call % 2 else None,
                                               chain=chain)
            want, want_res = expected(expect, xs, res0, w)
            assert same_bits(got, want), (cfg, call)
            assert same_bits(res, want_res), (cfg, call)
        comm.check()
        comm.close()

    # a CUDA graph of the fused call, replayed on fresh inputs and residuals
    cfg = ("zero_aware", 4, 128, "error_feedback", "int8")
    n = 16 * hidden
    comm = make(cfg, n, unquantized_below_bytes=0)
    chain = comm.new_chain()
    sx = torch.zeros(n, dtype=torch.bfloat16, device=dev)
    sres, sw, sout = torch.zeros_like(sx), torch.ones(hidden, dtype=torch.bfloat16, device=dev), torch.empty_like(sx)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        comm.all_reduce_add_rms_norm(sx, sres, sw, 1e-6, out=sout, chain=chain)
    torch.cuda.current_stream().wait_stream(s)
    chain.zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        comm.all_reduce_add_rms_norm(sx, sres, sw, 1e-6, out=sout, chain=chain)
    chain.zero_()
    expect = Expect(cfg, world, n)
    for call in range(3):
        xs, res0, w = inputs(10 + call, n)
        sx.copy_(xs[rank])
        sres.copy_(res0)
        sw.copy_(w)
        graph.replay()
        want, want_res = expected(expect, xs, res0, w)
        assert same_bits(sout, want), call
        assert same_bits(sres, want_res), call

    # torch.compile (fullgraph): the op through its fake implementation
    chain = comm.new_chain()
    expect = Expect(cfg, world, n)

    @torch.compile(fullgraph=True)
    def block_end(x, res, w):
        return comm.all_reduce_add_rms_norm(x * 2, res, w, 1e-6, out=torch.empty_like(x), chain=chain)

    for call in range(2):
        xs, res0, w = inputs(20 + call, n)
        res = res0.to(dev)
        got = block_end(xs[rank].to(dev), res, w.to(dev))
        want, want_res = expected(expect, [x * 2 for x in xs], res0, w)
        assert same_bits(got, want), call
        assert same_bits(res, want_res), call
    comm.close()


def test_fused_add_rms_norm_equals_the_reference():
    run_ranks(_fused_epilogue, backend=BACKEND, timeout=600)


# ---- the sequence-parallel pair ----------------------------------------------------------------
SP_CONFIGS = [  # the entries marked tool::torch_sp (echo/registry.cuh): the default quantizer and none
    ("zero_aware", 4, 128, "none", ""),
    ("none", 4, 128, "error_feedback", "int8"),
]


def _sequence_parallel(rank, world):
    """reduce_scatter and all_gather through the ops equal the reference bit for bit: every SP
    entry and dtype, a chain that mixes reduce-scatters and all-reduces of one size and changes
    size, the default configuration, the default dispatch (the 16-bit path below its size), shapes,
    and misuse."""
    from echo_allreduce import EchoAllReduce
    from echo_allreduce.front import RECOMMENDED_CLIP

    dev = device(rank)
    n = world * 256 * 515  # P segments of 515 granules of 256 (the 16-bit path's), 1030 groups of 128
    for cfg in SP_CONFIGS:
        quant, bits, group, comp, storage = cfg
        rot = dict(rotate=True, clip=RECOMMENDED_CLIP) if quant == "zero_aware" else {}  # the default quantizer
        comm = make(cfg, n, unquantized_below_bytes=0, sequence_parallel=True, **rot)
        for dtype in DTYPES:
            chain = comm.new_chain()
            mine = reference.ChainState(world, n, storage) if comp == "error_feedback" else None
            kw = dict(quant=quant, bits=bits, group_size=group, dtype=dtype_name(dtype), **rot)
            for call, (op, size) in enumerate([("rs", n), ("ar", n), ("rs", n), ("rs", n - world * 256 * 7), ("ar", n)]):
                xs = [x.view(-1, 128) for x in rank_inputs(call, size, dtype, world)]
                arrays = [to_numpy(x) for x in xs]
                if op == "rs":
                    got = comm.reduce_scatter(xs[rank].to(dev), chain=chain)
                    assert got.shape == (size // 128 // world, 128)
                    want = reference.reduce_scatter(arrays, comp=comp, storage=storage, chain=mine, **kw)[rank]
                else:
                    got = comm.all_reduce(xs[rank].to(dev), chain=chain)
                    want = reference.all_reduce(arrays, comp=comp, storage=storage, chain=mine, **kw)[rank]
                assert same_bits(got, from_numpy(want, dtype, got)), (cfg, dtype, call, op)
            for m in (256 * 515, 256 * 3):
                xs = rank_inputs(7, m, dtype, world)
                got = comm.all_gather(xs[rank].to(dev))
                want = reference.all_gather([to_numpy(x) for x in xs], **kw)[rank]
                assert got.shape == (world * m,) and same_bits(got, from_numpy(want, dtype, got)), (cfg, dtype, m)
        comm.check()
        comm.close()
    # the default configuration (rotated, clipped, int8 state) and the table's dispatch
    comm = EchoAllReduce(None, 8 << 20, sequence_parallel=True, **SHARED_KW)
    below = torch.ops.echo.unquantized_below_bytes(comm._handle)
    chain, mine = comm.new_chain(), reference.ChainState(world, 8 << 20, "int8")
    for call, size in enumerate((world * 128 * 41, world * 256 * 40, world * 256 * 3000, world * 256 * 3000)):
        xs = rank_inputs(call, size, torch.bfloat16, world)
        unquantized = 2 * size < below and (size // world) % 256 == 0
        q = dict(quant="none") if unquantized else dict(rotate=True, clip=RECOMMENDED_CLIP)
        got = comm.reduce_scatter(xs[rank].to(dev), chain=chain)
        outs = reference.reduce_scatter([to_numpy(x) for x in xs], chain=mine, dtype="bf16", **q)
        assert same_bits(got, from_numpy(outs[rank], torch.bfloat16, got)), (call, size, below)
        # the all-gather of the segments (the same dispatch rule: the message's size, whole granules)
        gathered = comm.all_gather(got)
        want = reference.all_gather(outs, dtype="bf16", **q)[rank]
        assert gathered.shape == (size,) and same_bits(gathered, from_numpy(want, torch.bfloat16, gathered)), (call, size)
    # misuse: refused with a clear error, the chain unchanged
    x = torch.randn(world * 128 * 4, device=dev, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="needs a chain"):
        comm.reduce_scatter(x)
    with pytest.raises(ValueError, match="whole number of the quantizer's groups|groups"):
        comm.reduce_scatter(torch.randn(world * 100, device=dev, dtype=torch.bfloat16), chain=chain)
    with pytest.raises(ValueError, match="out must be"):
        comm.reduce_scatter(x, out=torch.empty(7, device=dev, dtype=torch.bfloat16), chain=chain)
    with pytest.raises(ValueError, match="overlap"):
        comm.reduce_scatter(x, out=x[: x.numel() // world], chain=chain)
    xs = rank_inputs(9, world * 256 * 3000, torch.bfloat16, world)  # the chain went on as if they were not made
    got = comm.reduce_scatter(xs[rank].to(dev), chain=chain)
    want = reference.reduce_scatter([to_numpy(x) for x in xs], chain=mine, dtype="bf16", rotate=True,
                                    clip=RECOMMENDED_CLIP)[rank]
    assert same_bits(got, from_numpy(want, torch.bfloat16, got))
    comm.check()
    comm.close()
    plain = make(SP_CONFIGS[0], n, rotate=True, clip=RECOMMENDED_CLIP)
    with pytest.raises(ValueError, match="sequence_parallel=True"):
        plain.reduce_scatter(torch.zeros(n, device=dev), chain=plain.new_chain())
    plain.close()


def test_sequence_parallel_pair_equals_the_reference():
    run_ranks(_sequence_parallel, backend=BACKEND)
