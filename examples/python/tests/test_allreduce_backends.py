"""The examples' torch model of Echo (allreduce_backends.sim_all_reduce) against the compiled host
reference (echo_allreduce.reference), bit for bit, and the spec parser. Needs numpy and torch;
the comparison skips visibly where echo_allreduce is not installed."""
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from allreduce_backends import SimChain, parse, sim_all_reduce  # noqa: E402


def test_parse():
    assert parse("nccl") == ("nccl", {})
    assert parse("echo:za4g128+ef:below=0:storage=float") == (
        "echo", {"quant": "zero_aware", "bits": 4, "group_size": 128, "rotate": False, "clip": 1.0,
                 "comp": "error_feedback", "unquantized_below_bytes": 0, "storage": "float"})
    assert parse("echo:za4g128+rot+clip85+ef+close")[1] == {
        "quant": "zero_aware", "bits": 4, "group_size": 128, "rotate": True, "clip": 0.85, "comp": "error_feedback",
        "close": True}
    assert parse("reference:sym4g128")[1]["comp"] == "none"
    assert parse("sim:za4g128+rot+fit+ef+close16")[1] == {
        "quant": "zero_aware", "bits": 4, "group_size": 128, "rotate": True, "clip": "fit", "comp": "error_feedback",
        "close": 16}
    with pytest.raises(ValueError):
        parse("echo:za4x128")
    for bad in ("sim:za4g128+clip0", "sim:za4g128+clip150"):
        with pytest.raises(ValueError, match="clip"):
            parse(bad)
    assert parse("echo:storage=float") == ("echo", {"storage": "float"})
    with pytest.raises(ValueError):
        parse("mpi")


def _bf16_bits(a):
    return torch.from_numpy(a).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def _bits_f32(u):
    return torch.from_numpy(u.view(np.int16)).view(torch.bfloat16).float().numpy()


@pytest.mark.parametrize("quant,bits,g", [("zero_aware", 4, 128), ("zero_aware", 4, 32), ("zero_aware", 8, 64),
                                          ("symmetric", 4, 128), ("naive_zero_point", 4, 128), ("none", 0, 0)])
@pytest.mark.parametrize("comp", ["none", "error_feedback"])
@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("ranks", [2, 3])
def test_sim_equals_reference(quant, bits, g, comp, dtype, ranks):
    R = pytest.importorskip("echo_allreduce.reference", reason="echo_allreduce is not installed")
    rng = np.random.default_rng([bits, g, ranks, len(quant), len(comp), len(dtype)])
    n = int(rng.integers(1000, 5000))  # awkward: a short last group, uneven segments
    ch = R.ChainState(ranks, n, storage="float") if comp == "error_feedback" else None
    sc = SimChain(ranks, n) if comp == "error_feedback" else None
    for call in range(4):  # a chain: later calls carry the earlier errors
        xs = [rng.standard_normal(n).astype(np.float32) * (1 + 9 * call) for _ in range(ranks)]
        xs[0][int(rng.integers(n))] = 300.0
        ins = [_bf16_bits(x) for x in xs] if dtype == "bf16" else xs
        vals = [_bits_f32(i) for i in ins] if dtype == "bf16" else xs
        ref = R.all_reduce(ins, quant=quant, bits=bits or 4, group_size=g or 128, comp=comp, chain=ch, dtype=dtype)
        ref = [_bits_f32(o) for o in ref] if dtype == "bf16" else ref
        sim = [o.numpy() for o in sim_all_reduce([torch.from_numpy(v) for v in vals], quant, bits, g, sc, dtype)]
        for a, b in zip(ref, sim):
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), f"call {call}"


@pytest.mark.parametrize("quant,bits,g,clip", [("zero_aware", 4, 128, 0.85), ("zero_aware", 4, 64, 1.0),
                                               ("zero_aware", 8, 128, 1.0), ("zero_aware", 4, 128, 0.93)])
@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("ranks", [2, 3])
def test_sim_equals_reference_rotated(quant, bits, g, clip, dtype, ranks):
    # rotation, clip and the closing call: the sim's butterflies, signs and shrink are the spec's
    R = pytest.importorskip("echo_allreduce.reference", reason="echo_allreduce is not installed")
    rng = np.random.default_rng([bits, g, ranks, int(clip * 100), len(dtype)])
    n = int(rng.integers(1000, 5000))
    ch, sc = R.ChainState(ranks, n, storage="float"), SimChain(ranks, n)
    for call in range(5):  # the last call closes the chain
        xs = [rng.standard_normal(n).astype(np.float32) * (1 + 9 * call) for _ in range(ranks)]
        xs[0][int(rng.integers(n))] = 300.0
        ins = [_bf16_bits(x) for x in xs] if dtype == "bf16" else xs
        vals = [_bits_f32(i) for i in ins] if dtype == "bf16" else xs
        closes = call == 4
        ref = R.all_reduce(ins, quant=quant, bits=bits, group_size=g, comp="error_feedback", chain=ch, dtype=dtype,
                           rotate=True, clip=None if clip == 1.0 else clip, closes=closes)
        ref = [_bits_f32(o) for o in ref] if dtype == "bf16" else ref
        sim = [o.numpy() for o in sim_all_reduce([torch.from_numpy(v) for v in vals], quant, bits, g, sc, dtype,
                                                 rotate=True, clip=clip, close=True if closes else None)]
        for a, b in zip(ref, sim):
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), f"call {call}"
    assert sc.err is None  # closed: fresh


def test_sim_fit_and_close16():
    # +fit errs no more than any one fixed clip of its candidates, group by group; a 16-bit
    # closing call pays the chain's errors back to within the 16-bit rounding
    from allreduce_backends import FIT_RATIOS, _round_trip
    rng = np.random.default_rng(11)
    v = torch.from_numpy((rng.standard_normal(128 * 40) * np.repeat(rng.uniform(0.1, 10, 40), 128)).astype(np.float32))
    v[5] = 400.0
    fit = _round_trip(v, "zero_aware", 4, 128, "f32", "fit")
    sse = lambda t: (t - v).double().square().view(-1, 128).sum(1)  # noqa: E731
    for r in FIT_RATIOS:
        assert bool((sse(fit) <= sse(_round_trip(v, "zero_aware", 4, 128, "f32", r))).all())
    n, ch = 4096, SimChain(2, 4096)
    exact, got = np.zeros(n), np.zeros(n)
    for call in range(6):
        xs = [rng.standard_normal(n).astype(np.float32) for _ in range(2)]
        exact += xs[0].astype(np.float64) + xs[1]
        got += sim_all_reduce([torch.from_numpy(x) for x in xs], "zero_aware", 4, 128, ch, "f32", rotate=True,
                              clip="fit", close=16 if call == 5 else None)[0].double().numpy()
    assert ch.err is None
    np.testing.assert_allclose(got, exact, atol=1e-5 * np.abs(exact).max())


def test_sim_error_feedback_telescopes():
    # with error feedback, the sum over calls of the outputs misses only the last call's error
    rng = np.random.default_rng(7)
    n, ch = 4096, SimChain(2, 4096)
    exact, got = np.zeros(n), np.zeros(n)
    for _ in range(20):
        xs = [rng.standard_normal(n).astype(np.float32) for _ in range(2)]
        exact += xs[0].astype(np.float64) + xs[1]
        got += sim_all_reduce([torch.from_numpy(x) for x in xs], "zero_aware", 4, 128, ch, "f32")[0].double().numpy()
    last = sum(e.double().numpy() for e in ch.err)
    np.testing.assert_allclose(got + last, exact, atol=1e-4)
