"""The one seam through which every all-reduce of the Python examples goes.

A backend is named by a spec string, so that a flag switches it:

    nccl                      torch.distributed.all_reduce (NCCL on GPUs, gloo on the CPU): exact
    noop                      no communication at all (times the step without its all-reduce)
    echo[:QUANT][:k=v...]     echo_allreduce.EchoAllReduce on the GPU
    reference[:QUANT]         all-gather the ranks' tensors over the group, run
                              echo_allreduce.reference on the CPU, keep this rank's output
    sim[:QUANT]               the same, through sim_all_reduce below (a numpy model of the
                              algorithm with fp32 error state) for machines without echo_allreduce

QUANT is <za|nz|sym|none><bits>g<group>[+ef], e.g. za4g128+ef (zero_aware, 4 bits, groups of
128, error_feedback); options after colons: storage=int8|int4|float|bf16|f16,
transport=cuda_ipc|nccl, below=<unquantized_below_bytes>. `echo` alone takes the package's
defaults.

Chains: `new_chain()` gives one chain (one residual stream: a forward pass, or a backward pass);
`reset(chain)` starts it again at the next pass. An all-zero chain is a fresh one.
"""
import re

import numpy as np
import torch
import torch.distributed as dist

QUANTS = {"za": "zero_aware", "nz": "naive_zero_point", "sym": "symmetric", "none": "none"}


def parse(spec):
    """'echo:za4g128+ef:below=0' -> (backend, options dict)."""
    backend, *fields = spec.split(":")
    q = fields[0] if fields and "=" not in fields[0] else ""
    rest = fields[1:] if q else fields
    if backend not in ("nccl", "noop", "echo", "reference", "sim"):
        raise ValueError(f"unknown all-reduce backend {backend!r} in {spec!r}")
    opts = {}
    if q:
        m = re.fullmatch(r"(za|nz|sym|none)(\d+)?(?:g(\d+))?(\+ef)?", q)
        if not m:
            raise ValueError(f"bad quantizer {q!r} in {spec!r}: expected e.g. za4g128+ef")
        opts["quant"] = QUANTS[m.group(1)]
        if m.group(2):
            opts["bits"] = int(m.group(2))
        if m.group(3):
            opts["group_size"] = int(m.group(3))
        opts["comp"] = "error_feedback" if m.group(4) else "none"
    for kv in rest:
        k, _, v = kv.partition("=")
        key = {"below": "unquantized_below_bytes"}.get(k, k)
        opts[key] = int(v) if key == "unquantized_below_bytes" else v
    return backend, opts


class AllReduce:
    """x -> the sum of x over the group's ranks, in place (returns x)."""

    def __init__(self, spec, group=None, max_elements=1 << 24):
        self.spec = spec
        self.backend, self.opts = parse(spec)
        self.group = group
        self.ranks = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.max_elements = max_elements
        self.fallbacks = 0  # echo calls that should_use() sent to NCCL
        self.comp = self.opts.get("comp", "error_feedback" if self.backend == "echo" else "none")
        if self.backend == "echo":
            import echo_allreduce as ear
            self.impl = ear.EchoAllReduce(group or dist.group.WORLD, max_elements, **self.opts)
        elif self.backend in ("reference", "sim"):
            self.quant = self.opts.get("quant", "zero_aware")
            self.bits = self.opts.get("bits", 4)
            self.group_size = self.opts.get("group_size", 128)
            if self.backend == "reference":
                import echo_allreduce as ear
                self.ref = ear.reference

    @property
    def keeps_state(self):
        return self.backend in ("echo", "reference", "sim") and self.comp == "error_feedback"

    def new_chain(self, capacity=None):
        """One chain's state; None where the backend keeps none."""
        if not self.keeps_state:
            return None
        capacity = capacity or self.max_elements
        if self.backend == "echo":
            return self.impl.new_chain(capacity)
        if self.backend == "reference":
            kw = {"storage": self.opts["storage"]} if "storage" in self.opts else {}
            return self.ref.ChainState(self.ranks, capacity, **kw)
        return SimChain(self.ranks, capacity)

    @staticmethod
    def reset(chain):
        if chain is None:
            return
        if isinstance(chain, torch.Tensor):
            chain.zero_()
        else:
            chain.reset()

    def __call__(self, x, chain=None):
        b = self.backend
        if b == "noop" or self.ranks == 1:
            return x
        if b == "nccl":
            dist.all_reduce(x, group=self.group)
            return x
        if b == "echo":
            if not self.impl.should_use(x):
                self.fallbacks += 1
                dist.all_reduce(x, group=self.group)
                return x
            return self.impl.all_reduce(x, chain=chain)
        # reference / sim: every rank computes every rank's result on the CPU, keeps its own
        flat = x.contiguous().view(-1)
        parts = [torch.empty_like(flat) for _ in range(self.ranks)]
        dist.all_gather(parts, flat, group=self.group)
        dtype = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}[x.dtype]
        if b == "reference":  # bf16 travels as its bit pattern in uint16 arrays
            arrays = [(p.view(torch.int16) if dtype == "bf16" else p).cpu().numpy() for p in parts]
            if dtype == "bf16":
                arrays = [a.view(np.uint16) for a in arrays]
            outs = self.ref.all_reduce(arrays, quant=self.quant, bits=self.bits, group_size=self.group_size,
                                       comp=self.comp, chain=chain, dtype=dtype)
            o = outs[self.rank]
            o = torch.from_numpy(o.view(np.int16)).view(torch.bfloat16) if dtype == "bf16" else torch.from_numpy(o)
            x.copy_(o.view(x.shape))
            return x
        arrays = [p.float().cpu().numpy() for p in parts]  # exact: bf16/f16 values in fp32
        outs = sim_all_reduce(arrays, self.quant, self.bits, self.group_size, chain, dtype)
        x.copy_(torch.from_numpy(np.asarray(outs[self.rank], dtype=np.float32)).view(x.shape).to(x.dtype))
        return x

    def exact(self, x):
        """An exact sum for bookkeeping (a gradient norm, a loss): always torch.distributed."""
        if self.ranks > 1:
            dist.all_reduce(x, group=self.group)
        return x


# ---- sim: a numpy model of Echo's algorithm (docs/design.md), for machines without the package.
# It follows the reference's operation order (fp16 parameters rounded outward, scale inverse in
# fp32, round half to even, rank-order fp32 sum) but keeps the error in fp32 where the package's
# default stores a compact int8 code, and is not tested bit for bit: use `reference` for claims.

class SimChain:
    def __init__(self, ranks, capacity):
        self.ranks, self.capacity = ranks, capacity
        self.err = None

    def reset(self):
        self.err = None


def _half_round(s, up):
    s = np.asarray(s, np.float32)
    h = s.astype(np.float16)
    off = (h.astype(np.float32) < s) if up else (h.astype(np.float32) > s)
    h = np.where(off & np.isfinite(s), np.nextafter(h, np.float16(np.inf if up else -np.inf)), h)
    return np.clip(h, np.float16(-65504), np.float16(65504)).astype(np.float32)


def _round_to(v, dtype):
    if dtype == "f32":
        return v
    if dtype == "f16":
        return v.astype(np.float16).astype(np.float32)
    u = v.astype(np.float32).view(np.uint32)
    u = (u + (((u >> 16) & 1) + 0x7FFF)) & 0xFFFF0000  # bf16, round to nearest even
    return np.where(np.isnan(v), v, u.view(np.float32))


def _round_trip(v, quant, bits, g, dtype):
    """D(Q(v)) for a message whose groups start at index 0 (segments are whole groups)."""
    if quant == "none":
        return _round_to(v, dtype)
    n = v.size
    pad = (-n) % g
    x = np.concatenate([v, np.repeat(v[-1:], pad)]).reshape(-1, g).astype(np.float32)
    maxc = np.float32(2 ** bits - 1)
    lo, hi = x.min(1, keepdims=True), x.max(1, keepdims=True)
    finite = np.isfinite(x).all(1, keepdims=True)
    with np.errstate(all="ignore"):
        if quant == "zero_aware":
            lo0, hi0 = np.minimum(lo, 0), np.maximum(hi, 0)
            s = np.where(hi0 - lo0 > 0, _half_round((hi0 - lo0) / maxc, True), 0).astype(np.float32)
            inv = np.where(s > 0, np.float32(1) / s, 0).astype(np.float32)
            z = np.clip(np.rint(-lo0 * inv), 0, maxc)
            q = np.clip(np.rint(x * inv) + z, 0, maxc)
            r = (q - z) * s
        elif quant == "symmetric":
            c = np.float32(2 ** (bits - 1))
            m = np.maximum(-lo, hi)
            s = np.where(m > 0, _half_round(m / (c - 1), True), 0).astype(np.float32)
            inv = np.where(s > 0, np.float32(1) / s, 0).astype(np.float32)
            q = np.clip(np.rint(x * inv) + c, 0, maxc)
            r = (q - c) * s
        elif quant == "naive_zero_point":
            lo_h = _half_round(lo, False)
            s = np.where(hi - lo_h > 0, _half_round((hi - lo_h) / maxc, True), 0).astype(np.float32)
            inv = np.where(s > 0, np.float32(1) / s, 0).astype(np.float32)
            q = np.clip(np.rint((x - lo_h) * inv), 0, maxc)
            r = lo_h + q * s
        else:
            raise ValueError(f"sim: unknown quantizer {quant!r}")
    r = np.where(finite, r, np.nan).astype(np.float32)
    return r.reshape(-1)[:n]


def sim_all_reduce(arrays, quant, bits, g, chain, dtype):
    P, n = len(arrays), arrays[0].size
    granule = 256 if quant == "none" else g
    G = -(-n // granule)
    owner = np.empty(n, np.int64)
    for j in range(P):  # segment j: whole granules, the first G % P segments one more
        b = min((j * (G // P) + min(j, G % P)) * granule, n)
        e = min(((j + 1) * (G // P) + min(j + 1, G % P)) * granule, n)
        owner[b:e] = j
    xp = [a.astype(np.float32).reshape(-1) for a in arrays]
    ef = chain is not None
    if ef:
        if chain.err is None or chain.err[0].size != n:
            chain.err = [np.zeros(n, np.float32) for _ in range(P)]
        xp = [x + e for x, e in zip(xp, chain.err)]
    recv = [_round_trip(x, quant, bits, g, dtype) for x in xp]
    terms = [np.where(owner == i, xp[i], recv[i]) for i in range(P)]
    S = terms[0].copy()
    for i in range(1, P):
        S = S + terms[i]
    out = _round_to(_round_trip(S, quant, bits, g, dtype), dtype)
    if ef:
        err = [np.where(owner == i, S - out, xp[i] - recv[i]) for i in range(P)]
        chain.err = [np.where(np.isfinite(e), e, 0).astype(np.float32) for e in err]
    return [out] * P
