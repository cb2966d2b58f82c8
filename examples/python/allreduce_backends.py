"""The one seam through which every all-reduce of the Python examples goes.

A backend is named by a spec string, so that a flag switches it:

    nccl                      torch.distributed.all_reduce (NCCL on GPUs, gloo on the CPU): exact
    noop                      no communication at all (times the step without its all-reduce)
    echo[:QUANT][:k=v...]     echo_allreduce.EchoAllReduce on the GPU
    reference[:QUANT]         all-gather the ranks' tensors over the group, run
                              echo_allreduce.reference on the CPU, keep this rank's output
    sim[:QUANT]               the same, through sim_all_reduce below (a torch model of the
                              algorithm with fp32 error state, on the device of the tensors)

QUANT is <za|nz|sym|none><bits>g<group>[+rot][+clipNN|+fit][+ef][+close[16]], e.g.
za4g128+rot+clip85+ef+close (zero_aware, 4 bits, groups of 128, Hadamard-rotated groups, each
group's range clipped to 0.85, error_feedback, the chain's last call closing it at 8 bits);
options after colons: storage=step8|int8|float|bf16, transport=cuda_ipc|nccl,
below=<unquantized_below_bytes>. `echo` alone takes the package's defaults. Two forms exist in
`sim` only, to measure what the library does not build: `+fit` (each group's clip searched among
FIT_RATIOS for the least squared error) and `+close16` (the closing call at 16 bits); they have no
oracle, nor do rotation or clip with nz / sym beyond the reference's compiled entries.

Sequence parallelism (`AllReduce(spec, ..., sequence_parallel=True)`): `reduce_scatter(x, chain)`
gives this rank's segment of the sum (x's first dimension split over the ranks, Megatron-LM's
layout) and `all_gather(x)` the ranks' segments one after the other; backends nccl (exact; over
gloo the all-reduce cut to the segment), noop and echo. Echo's all-gather codes with its object's closing
quantizer (8 bits, the reduce-scatter's group and transform); `gather=QUANT` runs it on an object
of its own instead, whose closing codes are then the ones sent (`gather=none`: the 16-bit path;
`gather=za8g128`: 8 bits without the rotation).

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
        m = re.fullmatch(r"(za|nz|sym|none)(\d+)?(?:g(\d+))?(\+rot)?(?:\+clip(\d+)|(\+fit))?(\+ef)?(\+close(?:16)?)?", q)
        if not m:
            raise ValueError(f"bad quantizer {q!r} in {spec!r}: expected e.g. za4g128+rot+clip85+ef+close")
        opts["quant"] = QUANTS[m.group(1)]
        if m.group(2):
            opts["bits"] = int(m.group(2))
        if m.group(3):
            opts["group_size"] = int(m.group(3))
        opts["rotate"] = bool(m.group(4))  # a spec names its quantizer whole: plain unless it says
        if m.group(5) and not 0 < int(m.group(5)) <= 100:
            raise ValueError(f"bad clip in {spec!r}: +clipNN takes NN in 1..100 (percent of the range)")
        opts["clip"] = "fit" if m.group(6) else int(m.group(5)) / 100 if m.group(5) else 1.0
        opts["comp"] = "error_feedback" if m.group(7) else "none"
        if m.group(8):
            opts["close"] = 16 if m.group(8) == "+close16" else True
    for kv in rest:
        k, _, v = kv.partition("=")
        key = {"below": "unquantized_below_bytes"}.get(k, k)
        opts[key] = int(v) if key == "unquantized_below_bytes" else v
    return backend, opts


class AllReduce:
    """x -> the sum of x over the group's ranks, in place (returns x)."""

    def __init__(self, spec, group=None, max_elements=1 << 24, device=None, sequence_parallel=False):
        self.spec = spec
        self.sequence_parallel = sequence_parallel
        self.backend, self.opts = parse(spec)
        self.group = group
        self.ranks = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.max_elements = max_elements
        self.fallbacks = 0  # echo calls that should_use() sent to NCCL
        self.comp = self.opts.get("comp", "error_feedback" if self.backend == "echo" else "none")
        self.closes = self.opts.pop("close", False)  # whether the pass's last call closes its chain
        if self.backend != "sim" and (self.opts.get("clip") == "fit" or self.closes == 16):
            raise ValueError(f"{spec!r}: +fit and +close16 exist in the sim backend only")
        if sequence_parallel and self.backend not in ("nccl", "noop", "echo"):
            raise ValueError(f"{spec!r}: sequence parallelism runs on the nccl, noop and echo backends")
        gather = self.opts.pop("gather", None)
        if gather is not None and not (sequence_parallel and self.backend == "echo"):
            raise ValueError(f"{spec!r}: gather= is an option of the echo backend's sequence parallelism")
        if sequence_parallel and self.backend == "echo":
            self.opts["sequence_parallel"] = True
        if self.backend == "echo":
            import echo_allreduce as ear
            if device is not None and torch.device(device).type == "cuda":  # the op, over any group (gloo too)
                self.opts.setdefault("backend", "cuda")
                self.opts.setdefault("device", torch.device(device))
            self.impl = ear.EchoAllReduce(group or dist.group.WORLD, max_elements, **self.opts)
            self.gather_impl = self.impl
            if gather is not None:  # the all-gather's own object: its quantizer, no compensator
                _, g = parse(f"echo:{gather}")
                keep = {k: v for k, v in self.opts.items() if k in ("backend", "device", "unquantized_below_bytes")}
                self.gather_impl = ear.EchoAllReduce(group or dist.group.WORLD, max_elements, sequence_parallel=True,
                                                     **{**g, "comp": "none", **keep})
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

    def reset(self, chain):
        if chain is None:
            return
        if self.backend == "echo":  # the chain's tag only: O(1), whatever its capacity
            self.impl.reset_chain(chain)
        elif hasattr(chain, "zero_"):  # the reference's chain
            chain.zero_()
        else:
            chain.reset()

    def __call__(self, x, chain=None, last=False):
        """last: the pass's last call on the chain (it closes the chain where the spec says +close)."""
        b = self.backend
        closes = last and self.closes and chain is not None
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
            self.impl.all_reduce(x, chain=chain, closes=closes)  # in place
            return x
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
                                       comp=self.comp, chain=chain, dtype=dtype, rotate=self.opts.get("rotate", False),
                                       clip=self.opts.get("clip", 1.0), closes=closes)
            o = outs[self.rank]
            o = torch.from_numpy(o.view(np.int16)).view(torch.bfloat16) if dtype == "bf16" else torch.from_numpy(o)
            x.copy_(o.view(x.shape))
            return x
        outs = sim_all_reduce(parts, self.quant, self.bits, self.group_size, chain, dtype,  # where x is
                              rotate=self.opts.get("rotate", False), clip=self.opts.get("clip", 1.0),
                              close=(self.closes if closes else None))
        x.copy_(outs[self.rank].view(x.shape))  # exact: the outputs are values of x's type
        return x

    def reduce_scatter(self, x, chain=None):
        """This rank's segment of the sum of x over the ranks (x's first dimension split)."""
        P, k = self.ranks, x.shape[0] // self.ranks
        if self.backend == "noop" or P == 1:
            return x.narrow(0, self.rank * k, k).contiguous()
        if self.backend == "echo":
            if self.impl.fits_segments(x, True, chain):
                return self.impl.reduce_scatter(x, chain=chain)
            self.fallbacks += 1
        out = torch.empty((k, *x.shape[1:]), dtype=x.dtype, device=x.device)
        if "nccl" in str(dist.get_backend(self.group)):
            dist.reduce_scatter_tensor(out, x.contiguous(), group=self.group)
            return out
        s = x.contiguous().clone()  # gloo has no reduce-scatter
        dist.all_reduce(s, group=self.group)
        return out.copy_(s.narrow(0, self.rank * k, k))

    def all_gather(self, x):
        """The ranks' x one after the other along the first dimension."""
        P = self.ranks
        if self.backend == "noop" or P == 1:
            return x.repeat(P, *([1] * (x.dim() - 1)))
        if self.backend == "echo":
            if self.gather_impl.fits_segments(x, False):
                return self.gather_impl.all_gather(x)
            self.fallbacks += 1
        out = torch.empty((P * x.shape[0], *x.shape[1:]), dtype=x.dtype, device=x.device)
        if "nccl" in str(dist.get_backend(self.group)):
            dist.all_gather_into_tensor(out, x.contiguous(), group=self.group)
            return out
        parts = [torch.empty_like(x) for _ in range(P)]
        dist.all_gather(parts, x.contiguous(), group=self.group)
        return torch.cat(parts, out=out)

    def exact(self, x):
        """An exact sum for bookkeeping (a gradient norm, a loss): always torch.distributed."""
        if self.ranks > 1:
            dist.all_reduce(x, group=self.group)
        return x


# ---- sim: a torch model of Echo's algorithm (docs/design.md), for what the package lacks (2 and 3
# bits today) and for machines without it. It follows the reference's operation order (fp16
# parameters rounded outward, the scale's inverse in fp32, the code as one rounding of x * inv + z
# (the reference's fma), ties to even, rank-order fp32 sum) and keeps the error in
# fp32. examples/python/tests checks it bit for bit against echo_allreduce.reference (fp32
# error storage); it runs on the device of its inputs.

class SimChain:
    def __init__(self, ranks, capacity):
        self.ranks, self.capacity = ranks, capacity
        self.err = None

    def reset(self):
        self.err = None


def _half_step(h, up):
    """The next fp16 value above (up) or below h, through the bit pattern."""
    b = h.view(torch.int16).int() & 0xFFFF
    neg, mag = (b >> 15) == 1, b & 0x7FFF
    away = neg ^ up  # moving away from zero
    nb = torch.where(away, (b & 0x8000) | (mag + 1), (b & 0x8000) | (mag - 1))
    nb = torch.where(~away & (mag == 0), torch.where(neg, 0x0001, 0x8001), nb)  # through zero
    return torch.where(nb >= 0x8000, nb - 0x10000, nb).to(torch.int16).view(torch.float16)


def _half_round(s, up):
    """fp32 -> fp16 rounded up (down), clamped to the finite range, back in fp32."""
    h = s.to(torch.float16)
    off = (h.float() < s) if up else (h.float() > s)
    h = torch.where(off & torch.isfinite(s), _half_step(h, up), h)
    return h.float().clamp(-65504.0, 65504.0)


def _round_to(v, dtype):
    return {"f32": v, "f16": v.half().float(), "bf16": v.bfloat16().float()}[dtype]


def _code(a, inv, z, maxc):
    """clamp(RN(a * inv + z)): the reference's fma into code_magic + z, one rounding. The product
    of two fp32 values is exact in fp64; a half-integer product is a tie, which goes to even."""
    p = a.double() * inv.double()
    r = torch.round(p)
    q = torch.where((p - r).abs() == 0.5, torch.round(p + z), r + z)
    return q.clamp(0, maxc).float()


FIT_RATIOS = (1.0, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65)  # +fit's candidates, searched per group


def _round_trip(v, quant, bits, g, dtype, clip=1.0):
    """D(Q(v)) for a message whose groups start at index 0 (segments are whole groups). clip: the
    ratio each group's range shrinks to before the fit (quant::clipped: a float of 1024ths), or
    "fit": per group the ratio of FIT_RATIOS whose round trip errs least (ties to the larger)."""
    if quant == "none":
        return _round_to(v, dtype)
    if clip == "fit":
        n = v.numel()
        pad = (-n) % g
        trips = torch.stack([_round_trip(v, quant, bits, g, dtype, r) for r in FIT_RATIOS])
        sse = torch.nn.functional.pad((trips - v).double().square(), (0, pad)).view(len(FIT_RATIOS), -1, g).sum(2)
        best = sse.nan_to_num(nan=float("inf")).argmin(0)  # the first (largest ratio) of equals
        return trips.gather(0, best.repeat_interleave(g)[:n].unsqueeze(0)).squeeze(0)
    n = v.numel()
    x = torch.cat([v, v[-1:].expand((-n) % g)]).view(-1, g)  # the tail group padded with its last value
    maxc = float(2 ** bits - 1)
    lo, hi = x.amin(1, keepdim=True), x.amax(1, keepdim=True)
    finite = torch.isfinite(x).all(1, keepdim=True)
    zero = torch.zeros((), device=v.device)
    if clip != 1.0:  # quant::clipped::shrink, in fp32 as it rounds
        r = torch.tensor(round(clip * 1024) / 1024, dtype=torch.float32, device=v.device)
        if quant == "naive_zero_point":
            mid, half = lo * 0.5 + hi * 0.5, (hi * 0.5 - lo * 0.5) * r
            lo, hi = mid - half, mid + half
        else:
            lo, hi = lo * r, hi * r

    def scale_inv(span, div):
        s = torch.where(span > 0, _half_round(span / div, True), zero)
        return s, torch.where(s > 0, 1.0 / s, zero)

    if quant == "zero_aware":
        lo0, hi0 = lo.clamp(max=0), hi.clamp(min=0)
        s, inv = scale_inv(hi0 - lo0, maxc)
        z = torch.round(-lo0 * inv).clamp(0, maxc)
        r = (_code(x, inv, z, maxc) - z) * s
    elif quant == "symmetric":
        c = float(2 ** (bits - 1))
        s, inv = scale_inv(torch.maximum(-lo, hi), c - 1)
        r = (_code(x, inv, c, maxc) - c) * s
    elif quant == "naive_zero_point":
        lo_h = _half_round(lo, False)
        s, inv = scale_inv(hi - lo_h, maxc)
        r = lo_h + _code(x - lo_h, inv, 0.0, maxc) * s
    else:
        raise ValueError(f"sim: unknown quantizer {quant!r}")
    return torch.where(finite, r, torch.nan).view(-1)[:n]


def _hadamard_signs(g, device):
    """quant::hadamard<g>'s sign vector: True where s_i = -1."""
    log2 = g.bit_length() - 1
    half = (log2 - 4) // 2
    i = torch.arange(g, device=device)
    low = (i & (i >> 2)) & 3
    neg = (low == 1) | (low == 2)
    h = i >> 4
    for j in range(half):
        neg ^= ((h >> j) & (h >> (j + half)) & 1) == 1
    return neg


def _butterflies(x, g):
    """quant::hadamard::butterflies on each row of x (rows of g), stage h = 1, 2, 4, ..."""
    h = 1
    while h < g:
        y = x.view(-1, g // (2 * h), 2, h)
        a, c = y[:, :, 0], y[:, :, 1]
        x = torch.stack((a + c, a - c), dim=2).view(-1, g)
        h *= 2
    return x


def _rotate(v, g, inverse=False):
    """quant::hadamard over every whole group of v (a short last group is left as it is):
    forward H (s * x); inverse s * H (y / g), the reference's operations in its order."""
    n = v.numel()
    whole = n - n % g
    if whole == 0:
        return v
    neg = _hadamard_signs(g, v.device)
    x = v[:whole].view(-1, g)
    if inverse:
        x = _butterflies(x * (1.0 / g), g)
        x = torch.where(neg, -x, x)
    else:
        x = _butterflies(torch.where(neg, -x, x), g)
    return torch.cat([x.reshape(-1), v[whole:]])


def sim_all_reduce(tensors, quant, bits, g, chain, dtype, rotate=False, clip=1.0, close=None):
    """Echo's all-reduce over len(tensors) simulated ranks: fp32 tensors holding values of
    `dtype` in, the (identical) fp32 outputs of every rank out. rotate: Hadamard-rotated groups
    (the chain's errors kept in the rotated domain); clip: as _round_trip; close: None, or the
    call that closes its chain at 8 bits (True: the same family and transform, no clip) or 16
    (the rotated values rounded to `dtype`, as the 16-bit path sends them); none kept after it."""
    P, n = len(tensors), tensors[0].numel()
    dev = tensors[0].device
    if close:
        quant, bits, clip = ("none", 0, 1.0) if close == 16 else (quant, 8, 1.0)
    granule = 256 if quant == "none" and not rotate else g
    rot = (lambda v: _rotate(v, g)) if rotate else (lambda v: v)
    G = -(-n // granule)
    owner = torch.empty(n, dtype=torch.int64, device=dev)
    for j in range(P):  # segment j: whole granules, the first G % P segments one more
        b = min((j * (G // P) + min(j, G % P)) * granule, n)
        e = min(((j + 1) * (G // P) + min(j + 1, G % P)) * granule, n)
        owner[b:e] = j
    xp = [rot(t.float().reshape(-1)) for t in tensors]
    if chain is not None:
        if chain.err is None or chain.err[0].numel() != n:
            chain.err = [torch.zeros(n, device=dev) for _ in range(P)]
        xp = [x + e for x, e in zip(xp, chain.err)]
    recv = [_round_trip(x, quant, bits, g, dtype, clip) for x in xp]
    S = torch.where(owner == 0, xp[0], recv[0])
    for i in range(1, P):
        S = S + torch.where(owner == i, xp[i], recv[i])
    dq = _round_trip(S, quant, bits, g, dtype, clip)
    out = _round_to(_rotate(dq, g, inverse=True) if rotate else dq, dtype)
    if chain is not None:
        if close:
            chain.reset()
        else:
            err = [torch.where(owner == i, S - (dq if rotate else out), xp[i] - recv[i]) for i in range(P)]
            chain.err = [torch.where(torch.isfinite(e), e, 0.0) for e in err]
    return [out] * P
