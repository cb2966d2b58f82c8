"""Echo's algorithm written again in numpy, independently of the C++ reference, for the tests:
quant 'none' (the exact fp32 rank-order sum, rounded once) and 'zero_aware' (docs/design.md and
include/echo/quant/zero_aware.cuh: the grid, fp16 parameters, a code rounded once from the fused
x * (1/s) + z, nearest even), comp none.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(F32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round to nearest even; NaN stays NaN (quiet)."""
    u = np.asarray(x, dtype=F32).view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded)


def widen(x: np.ndarray, dtype: str) -> np.ndarray:
    return bf16_to_f32(x) if dtype == "bf16" else x.astype(F32)


def narrow(x: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bf16":
        return f32_to_bf16(x)
    return x.astype(np.float16 if dtype == "f16" else F32)


def partition(n: int, granule: int, ranks: int) -> list[tuple[int, int]]:
    """[begin, end) of each rank's segment: whole granules, the first (G % P) one extra."""
    G = -(-n // granule)
    base, rem = divmod(G, ranks)
    starts = [min(n, (j * base + min(j, rem)) * granule) for j in range(ranks + 1)]
    return [(starts[j], starts[j + 1]) for j in range(ranks)]


def fp16_up(s: F32) -> F32:
    """The smallest fp16 >= s (s > 0), clamped to the largest finite fp16."""
    h = np.float16(s)
    if F32(h) < s:
        h = np.nextafter(h, np.float16(np.inf), dtype=np.float16)
    return F32(min(F32(h), F32(65504.0)))


def rint_fused(a: np.ndarray, b: F32, c: F32) -> np.ndarray:
    """rint(a * b + c) of the exact real value (an fma's single rounding, then nearest even), for
    float32 a, b and an integer c. The product is exact in float64; TwoSum gives what the float64
    sum drops, which decides a value that float64 rounded onto a tie."""
    p = a.astype(np.float64) * np.float64(b)
    c = np.float64(c)
    v = p + c
    bb = v - p
    lost = (p - (v - bb)) + (c - bb)
    r = np.rint(v)
    tie = (np.abs(v - np.floor(v) - 0.5) == 0) & (lost != 0)
    return np.where(tie, np.where(lost > 0, np.ceil(v), np.floor(v)), r)


def zero_aware_round_trip(v: np.ndarray, bits: int, group: int) -> np.ndarray:
    """D(Q(v)) group by group for finite v that starts on a group boundary."""
    max_code = F32(2**bits - 1)
    out = np.empty_like(v)
    for first in range(0, len(v), group):
        x = v[first:first + group]
        lo, hi = min(F32(x.min()), F32(0)), max(F32(x.max()), F32(0))
        s = F32(F32(hi - lo) / max_code)
        s = fp16_up(s) if s > 0 else F32(0)
        inv = F32(F32(1) / s) if s > 0 else F32(0)
        z = np.clip(np.rint(F32(-lo * inv)), 0, max_code)
        q = np.clip(rint_fused(x, inv, z), 0, max_code)
        out[first:first + group] = ((q - z).astype(F32) * s).astype(F32)
    return out


def all_reduce(inputs: list[np.ndarray], dtype: str, quant: str, bits: int = 4, group: int = 128) -> np.ndarray:
    """The output every rank gets (comp none)."""
    P, n = len(inputs), inputs[0].size
    xs = [widen(x.reshape(-1), dtype) for x in inputs]
    out = np.empty(n, dtype=F32)
    granule = 256 if quant == "none" else group
    for j, (b, e) in enumerate(partition(n, granule, P)):
        if b == e:
            continue
        terms = [x[b:e] if (i == j or quant == "none") else zero_aware_round_trip(x[b:e], bits, group)
                 for i, x in enumerate(xs)]
        S = terms[0].copy()
        for t in terms[1:]:
            S = (S + t).astype(F32)  # fp32, rank order
        out[b:e] = S if quant == "none" else zero_aware_round_trip(S, bits, group)
    return narrow(out, dtype)
