"""echo_allreduce.reference (the C++ host reference on numpy arrays): no GPU, no torch.

Checked against numpy_model.py (the algorithm written again in numpy) and against the properties
Echo promises: identical outputs on every rank, error within the quantizer's step, telescoping
with error feedback along a chain."""

import shutil
import subprocess
import sys

import numpy as np
import pytest

import numpy_model as M
from echo_allreduce import reference as R

DTYPES = ("f32", "f16", "bf16")
SIZES = (1, 7, 127, 128, 129, 255, 257, 1000, 4097, 12289)
STORAGES = sorted({e["storage"] for e in R.instantiations() if e["comp"] == "error_feedback"})
QUANTS = sorted({(e["quant"], e["bits"], e["group_size"]) for e in R.instantiations()})


def inputs(rng, P, n, dtype, scale=None):
    """P ranks' values of mixed magnitudes (a different scale per rank unless given)."""
    xs = []
    for _ in range(P):
        s = scale if scale is not None else rng.choice([1e-3, 0.1, 1.0, 30.0])
        xs.append(M.narrow((rng.standard_normal(n) * s).astype(np.float32), dtype))
    return xs


def bits_of(a):
    return a.view(np.uint8)


def kw(q):
    quant, bits, group = q
    return dict(quant=quant, bits=bits or 4, group_size=group or 128)


def test_table_has_the_documented_entries():
    names = {(e["quant"], e["bits"], e["group_size"]) for e in R.instantiations()}
    for g in (32, 64, 128):
        assert ("zero_aware", 4, g) in names and ("zero_aware", 8, g) in names
    assert {("symmetric", 4, 128), ("naive_zero_point", 4, 128), ("none", 0, 0)} <= names
    assert {"bf16", "float"} <= set(STORAGES)


@pytest.mark.parametrize("dtype", DTYPES)
def test_none_is_the_exact_fp32_rank_order_sum_rounded_once(dtype):
    rng = np.random.default_rng(11)
    for P in (1, 2, 3, 5, 8):
        for n in SIZES:
            xs = inputs(rng, P, n, dtype)
            outs = R.all_reduce(xs, quant="none", dtype=dtype)
            acc = M.widen(xs[0], dtype)
            for x in xs[1:]:
                acc = (acc + M.widen(x, dtype)).astype(np.float32)
            want = M.narrow(acc, dtype)
            for o in outs:
                assert np.array_equal(bits_of(o), bits_of(want)), (P, n, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bits,group", [(4, 32), (4, 64), (4, 128), (8, 32), (8, 64), (8, 128)])
def test_zero_aware_matches_the_numpy_model_bit_for_bit(dtype, bits, group):
    rng = np.random.default_rng(bits * 1000 + group)
    for P in (2, 3, 4):
        for n in SIZES:
            xs = inputs(rng, P, n, dtype)
            outs = R.all_reduce(xs, quant="zero_aware", bits=bits, group_size=group, dtype=dtype)
            want = M.all_reduce(xs, dtype, "zero_aware", bits, group)
            assert np.array_equal(bits_of(outs[0]), bits_of(want)), (P, n)


@pytest.mark.parametrize("q", QUANTS, ids=lambda q: f"{q[0]}{q[1]}g{q[2]}")
def test_every_rank_gets_identical_outputs(q):
    rng = np.random.default_rng(3)
    for storage in [None] + STORAGES:
        for dtype in DTYPES:
            P, n = int(rng.integers(2, 7)), int(rng.choice(SIZES))
            chain = R.ChainState(P, n, storage) if storage else None
            for _ in range(3):
                outs = R.all_reduce(inputs(rng, P, n, dtype), chain=chain, dtype=dtype, **kw(q))
                for o in outs[1:]:
                    assert np.array_equal(bits_of(o), bits_of(outs[0])), (storage, dtype, P, n)


def step_bound(v, bits, group):
    """Per element: the largest step any of the three quantizers uses for v's group, from its
    largest magnitude (symmetric spends one code on each side of 0: 2 max|x| / (2^b - 2); the
    fp16 scale is rounded up, hence the margin)."""
    n = v.size
    pad = (-n) % group
    m = np.abs(np.concatenate([v, np.zeros(pad, np.float32)])).reshape(-1, group).max(axis=1)
    return np.repeat(2 * m / (2**bits - 2) * (1 + 2**-9), group)[:n]


@pytest.mark.parametrize("q", [q for q in QUANTS if q[0] != "none"], ids=lambda q: f"{q[0]}{q[1]}g{q[2]}")
def test_error_is_within_the_quantizer_step(q):
    """Each value is quantized at most twice: once as a send (one half step of every sender's
    group) and once as a sum; then rounded to the output type."""
    quant, bits, group = q
    rng = np.random.default_rng(5)
    for dtype in DTYPES:
        for P in (2, 3, 4):
            n = int(rng.choice(SIZES[3:]))
            xs = inputs(rng, P, n, dtype)
            wide = [M.widen(x, dtype).astype(np.float64) for x in xs]
            exact = np.sum(wide, axis=0)
            out = M.widen(R.all_reduce(xs, dtype=dtype, **kw(q))[0], dtype).astype(np.float64)
            send = sum(step_bound(w.astype(np.float32), bits, group) / 2 for w in wide)
            total = send + step_bound((np.abs(exact) + send).astype(np.float32), bits, group) / 2
            ulp = {"f32": 2.0**-23, "f16": 2.0**-10, "bf16": 2.0**-7}[dtype]
            bound = total + np.abs(exact + total) * ulp + 1e-30
            err = np.abs(out - exact)
            assert np.all(err <= bound), (dtype, P, n, float((err / bound).max()))
            assert err.max() > 0  # the quantizer did quantize: the bound is not vacuous


def stream_error(rng, P, n, K, storage, dtype="f32"):
    """RMS error of a residual stream h += all_reduce(partials) after each of K calls, against the
    exact stream, with (storage) or without (None) error feedback."""
    chain = R.ChainState(P, n, storage) if storage else None
    h = np.zeros(n)
    exact = np.zeros(n)
    err = []
    for _ in range(K):
        xs = inputs(rng, P, n, dtype, scale=0.5)
        out = R.all_reduce(xs, quant="zero_aware", bits=4, group_size=128, chain=chain, dtype=dtype)[0]
        exact += np.sum([M.widen(x, dtype).astype(np.float64) for x in xs], axis=0)
        h += M.widen(out, dtype)
        err.append(np.sqrt(np.mean((h - exact) ** 2)))
    return np.array(err)


@pytest.mark.parametrize("storage", STORAGES)
def test_error_feedback_telescopes_over_a_chain(storage):
    K, n = 32, 4097
    for P in (2, 4):
        none = stream_error(np.random.default_rng(P), P, n, K, None)
        ef = stream_error(np.random.default_rng(P), P, n, K, storage)
        early = max(ef[0], ef[1])
        assert none[-1] >= 3 * none[0]  # independent errors pile up (about sqrt(32) = 5.7x)
        assert np.all(ef <= 2 * early)  # with feedback the stream keeps one call's error
        assert ef[-1] < none[-1] / 2


def test_chain_state_object():
    c = R.ChainState(ranks=3, capacity=1000, storage="float")
    assert (c.ranks, c.capacity, c.storage, c.size) == (3, 1000, "float", 0)
    rng = np.random.default_rng(7)
    xs = inputs(rng, 3, 999, "f32")
    first = R.all_reduce(xs, chain=c)[0]
    assert c.size == 999 and np.any(c.errors(0) != 0)
    second = R.all_reduce(xs, chain=c)[0]
    assert not np.array_equal(first, second)  # the stored errors were fed into the second call
    c.reset()
    assert c.size == 0 and not np.any(c.errors(1))
    assert np.array_equal(R.all_reduce(xs, chain=c)[0], first)  # a reset chain is a fresh chain
    # A shape change ends the chain, as a reset does.
    R.all_reduce(inputs(rng, 3, 500, "f32"), chain=c)
    assert np.array_equal(R.all_reduce(xs, chain=c)[0], first)


def test_in_place_equals_out_of_place():
    rng = np.random.default_rng(8)
    for dtype in DTYPES:
        xs = inputs(rng, 3, 4097, dtype)
        want = R.all_reduce(xs, dtype=dtype)
        copies = [x.copy() for x in xs]
        got = R.all_reduce(copies, out=copies, dtype=dtype)
        for g, c, w in zip(got, copies, want):
            assert g is c and np.array_equal(bits_of(c), bits_of(w))


def test_bad_arguments_raise_value_error():
    rng = np.random.default_rng(9)
    xs = inputs(rng, 2, 100, "f32")
    with pytest.raises(ValueError, match="no compiled instantiation"):
        R.all_reduce(xs, quant="zero_aware", bits=3, group_size=128)
    with pytest.raises(ValueError, match="shape"):
        R.all_reduce([xs[0], xs[1][:50]])
    with pytest.raises(ValueError, match="element type"):
        R.all_reduce(xs, dtype="bf16")  # float32 arrays declared as bf16
    with pytest.raises(ValueError, match="capacity"):
        R.all_reduce(xs, chain=R.ChainState(2, 10, "float"))
    with pytest.raises(ValueError, match="ranks"):
        R.all_reduce(xs, chain=R.ChainState(3, 100, "float"))
    with pytest.raises(ValueError, match="keeps no state"):
        R.all_reduce(xs, comp="none", chain=R.ChainState(2, 100, "float"))
    with pytest.raises(ValueError, match="storage"):
        R.all_reduce(xs, storage="bf16", chain=R.ChainState(2, 100, "float"))
    with pytest.raises(ValueError, match="storage"):
        R.ChainState(2, 100, "int3")
    with pytest.raises(ValueError, match="unsupported dtype"):
        R.all_reduce([x.astype(np.float64) for x in xs])


def test_out_arrays_that_would_be_written_through_a_copy_are_refused():
    # A Fortran-order or strided output used to receive the results in a temporary copy: the
    # call returned, the caller's arrays untouched.
    rng = np.random.default_rng(10)
    xs = [rng.standard_normal((4, 64)).astype(np.float32) for _ in range(2)]
    want = R.all_reduce(xs, quant="none")
    for bad in ([np.zeros((4, 64), np.float32, order="F") for _ in xs],
                [np.zeros((4, 128), np.float32)[:, ::2] for _ in xs],
                [np.zeros((4, 64), np.float64) for _ in xs],
                [np.zeros((4, 63), np.float32) for _ in xs],
                [np.zeros((4, 64), np.float32)]):
        with pytest.raises(ValueError, match="out"):
            R.all_reduce(xs, quant="none", out=bad)
    ro = [np.zeros((4, 64), np.float32) for _ in xs]
    for o in ro:
        o.setflags(write=False)
    with pytest.raises(ValueError, match="writeable"):
        R.all_reduce(xs, quant="none", out=ro)
    good = [np.zeros((4, 64), np.float32) for _ in xs]
    got = R.all_reduce(xs, quant="none", out=good)
    assert all(g is o for g, o in zip(got, good))
    assert all(np.array_equal(o, w) for o, w in zip(good, want))


def test_one_rank_is_an_exact_copy():
    x = inputs(np.random.default_rng(10), 1, 4097, "bf16")[0]
    assert np.array_equal(R.all_reduce([x], dtype="bf16")[0], x)


@pytest.mark.skipif(sys.platform != "linux" or shutil.which("readelf") is None, reason="needs Linux and readelf")
def test_module_uses_the_shared_libstdcxx():
    # A static libstdc++ inside the module (a compiler wrapper adding -static-libstdc++) crashed the
    # first ostringstream it used on a GPU image (docs/python.md); python/CMakeLists.txt links the
    # shared one explicitly.
    import echo_allreduce._reference as mod

    dyn = subprocess.run(["readelf", "-d", mod.__file__], capture_output=True, text=True, check=True).stdout
    assert "libstdc++.so" in dyn, f"{mod.__file__} does not load the shared libstdc++:\n{dyn}"


# ---- the sequence-parallel reduce-scatter and all-gather ---------------------------------------

SP = sorted({(e["quant"], e["bits"], e["group_size"], e["rotate"], e["clip"]) for e in R.instantiations()
             if e["all_gather"]})


def sp_kw(e):
    quant, bits, group, rotate, clip = e
    return dict(quant=quant, bits=bits or 4, group_size=group or 128, rotate=rotate, clip=None if clip == 1024 else clip / 1024)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("P", (2, 3, 4))
def test_reduce_scatter_without_quantization_is_the_all_reduce_split(dtype, P):
    """quant 'none': both are the exact fp32 sum in rank order rounded once, so rank r's segment
    of the reduce-scatter is segment r of the all-reduce, bit for bit, and the all-gather of the
    segments is the all-reduce."""
    rng = np.random.default_rng(P)
    n = P * 256 * 3
    xs = inputs(rng, P, n, dtype)
    ar = R.all_reduce(xs, quant="none", dtype=dtype)
    rs = R.reduce_scatter(xs, quant="none", dtype=dtype)
    m = n // P
    for r in range(P):
        assert rs[r].shape == (m,)
        assert np.array_equal(bits_of(rs[r]), bits_of(ar[0][r * m:(r + 1) * m]))
    for g in R.all_gather(rs, quant="none", dtype=dtype):
        assert np.array_equal(bits_of(g), bits_of(ar[0]))


@pytest.mark.parametrize("entry", SP)
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_gather_gives_every_rank_the_same_bits(entry, dtype):
    """Each segment is quantized once and every rank, its owner included, decodes the same codes;
    the error of a segment is the closing quantizer's (8 bits; within a step of its group's range)."""
    rng = np.random.default_rng(7)
    P, m = 3, 512
    xs = inputs(rng, P, m, dtype, scale=1.0)
    out = R.all_gather(xs, dtype=dtype, **sp_kw(entry))
    for o in out:
        assert o.shape == (P * m,)
        assert np.array_equal(bits_of(o), bits_of(out[0]))
    got = M.widen(out[0], dtype).astype(np.float64)
    want = np.concatenate([M.widen(x, dtype).astype(np.float64) for x in xs])
    bits = 8 if entry[1] else 16  # the entry's closing quantizer codes the all-gather
    assert np.max(np.abs(got - want)) <= 8.0 * np.max(np.abs(want)) / (2 ** bits - 1) + 1e-3


@pytest.mark.parametrize("storage", ("int8", "bf16", "float"))
def test_reduce_scatter_error_feedback_keeps_the_running_sum_close(storage):
    """Along a chain the send errors are fed into the next call: the running sum of K calls'
    outputs misses the exact one by about one call's error, while without compensation the
    errors add up (sqrt(K))."""
    rng = np.random.default_rng(11)
    P, n, K = 4, 4 * 128 * 4, 32
    kwargs = dict(quant="zero_aware", bits=4, group_size=128)
    chain = R.ChainState(P, n, storage)
    exact = np.zeros(n, dtype=np.float64)
    with_ef = np.zeros(n, dtype=np.float64)
    without = np.zeros(n, dtype=np.float64)
    for _ in range(K):
        xs = [rng.standard_normal(n).astype(np.float32) for _ in range(P)]
        exact += np.sum(np.array(xs, dtype=np.float64), axis=0)
        with_ef += np.concatenate(R.reduce_scatter(xs, chain=chain, **kwargs))
        without += np.concatenate(R.reduce_scatter(xs, comp="none", **kwargs))
    assert chain.size == n
    err_ef, err_none = np.linalg.norm(with_ef - exact), np.linalg.norm(without - exact)
    assert err_ef < err_none / 3, (err_ef, err_none)


def test_reduce_scatter_and_all_gather_refuse_what_they_cannot_do():
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(4 * 128).astype(np.float32) for _ in range(4)]
    with pytest.raises(ValueError, match="not compiled for this entry"):
        R.reduce_scatter(xs, chain=R.ChainState(4, 512, "step8"))  # no step on the owner's own segment
    with pytest.raises(ValueError, match="whole number of the quantizer's groups"):
        R.reduce_scatter([x[:400] for x in xs], comp="none")
    with pytest.raises(ValueError, match="equal segments"):
        R.reduce_scatter([x[:510] for x in xs], quant="none", comp="none")
    with pytest.raises(ValueError, match="out\\[0\\] must be a numpy array of shape"):
        R.reduce_scatter(xs, comp="none", out=[np.empty(512, np.float32) for _ in range(4)])
    with pytest.raises(ValueError, match="not compiled for this quantizer"):
        R.all_gather(xs, quant="symmetric", bits=4, group_size=128)
    with pytest.raises(ValueError, match="ChainState has 2 ranks"):
        R.reduce_scatter(xs, chain=R.ChainState(2, 512, "int8"))
