#!/usr/bin/env python3
"""End to end on a TP = 2 model with Llama-3-8B layer shapes: prefill (TTFT), a decode step and a
training step, through NCCL and Echo, idle and under background NVLink traffic.
docs/quality.md has the results and the reasoning.

    python3 examples/python/e2e_tp.py --out e2e.json                        # 2 GPUs, about 4 minutes
    python3 examples/python/e2e_tp.py --cpu --tiny                          # the pipeline on the CPU

Model: N layers (--layers, default 8) of hidden 4096, 32 query / 8 KV heads of 128, SwiGLU FFN
14336, RMSNorm, rotary, bf16, random weights; no embedding or head (the timed work is the layers).
Per rank 16 query / 4 KV heads and half the FFN; an all-reduce after attention and after the MLP.

Workloads, batch 1 prefill at --prefill lengths, a decode step (one new token per sequence over a
KV cache of --context tokens) at --decode batches, a training step (forward + backward, the
backward all-reduces on their own chain) at --train-seq x --train-batch. Prefill and decode run
as CUDA graphs (one per backend and shape, the chain reset captured inside); the training step
runs eagerly. Each backend is timed with the same inputs, interleaved, at every load level, all
in one run; `noop` (the all-reduce removed) gives the all-reduce's share: 1 - t_noop / t.

Background traffic (--bg-kind): a separate process that owns both GPUs runs a third party's
traffic on the link, busy for duty x period and idle for the rest (period --bg-period-ms, at least
8 steps). 'copy' (the default): copy-engine peer copies of --bg-chunk-mib MiB both ways, no
SMs. In that process torch's cross-device copy_ ran at 14-28 GB/s a direction on our H200s, and
cudaMemcpyPeerAsync on the same buffers at 381 GB/s (the link's rate), so the generator times
both and uses the faster (docs/quality.md). 'nccl': an NCCL all-reduce of that many MiB over
both GPUs (torch.cuda.nccl, one communicator from that process); it reached a quarter of the
link and time-slices the SMs with the measured processes. The process first times a
step with nothing else running and reports the GB/s; the duty it reports is measured (busy time /
elapsed). A plain 64 MiB NCCL all-reduce of the ranks is timed at every level as a probe that the
link is loaded.
"""
import argparse
import json
import math
import os
import queue
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from allreduce_backends import AllReduce  # noqa: E402
from tp_layers import Chains, copy_to_tp, launch, reduce_from_tp  # noqa: E402


# ---- the model ----------------------------------------------------------------------------------

class Layers(torch.nn.Module):
    """This rank's shard of N Llama layers; forward(x, chains) -> x."""

    def __init__(self, cfg, world, dev, dtype):
        super().__init__()
        self.hq, self.hkv, self.hd = cfg.heads // world, cfg.kv_heads // world, cfg.hidden // cfg.heads
        f = cfg.ffn // world
        g = torch.Generator(device=dev).manual_seed(1234 + dist.get_rank())

        def w(out_f, in_f):  # random, scaled so activations stay O(1) through the layers
            return torch.nn.Parameter((torch.randn(out_f, in_f, generator=g, device=dev) / math.sqrt(in_f)).to(dtype))

        self.layers = torch.nn.ModuleList()
        for _ in range(cfg.layers):
            m = torch.nn.Module()
            m.n1 = torch.nn.RMSNorm(cfg.hidden, device=dev, dtype=dtype)
            m.n2 = torch.nn.RMSNorm(cfg.hidden, device=dev, dtype=dtype)
            m.qkv = w((self.hq + 2 * self.hkv) * self.hd, cfg.hidden)
            m.o = w(cfg.hidden, self.hq * self.hd)
            m.gu = w(2 * f, cfg.hidden)
            m.d = w(cfg.hidden, f)
            self.layers.append(m)
        inv = 1.0 / (500000.0 ** (torch.arange(0, self.hd, 2, device=dev, dtype=torch.float32) / self.hd))
        self.register_buffer("inv_freq", inv)

    def rope(self, x, pos):
        ang = pos[:, None].float() * self.inv_freq[None]
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        a, b = x[..., : self.hd // 2], x[..., self.hd // 2:]
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)

    def forward(self, x, chains, pos, cache=None):
        """x: [B, T, hidden]. cache: per layer (K, V) of [B, hkv, C + T, hd] whose last T
        positions this call fills (decode); None: causal self-attention over x (prefill, train)."""
        B, T, _ = x.shape
        for i, m in enumerate(self.layers):
            h = copy_to_tp(m.n1(x), chains)
            q, k, v = (h @ m.qkv.T).split([self.hq * self.hd, self.hkv * self.hd, self.hkv * self.hd], -1)
            q = self.rope(q.view(B, T, self.hq, self.hd).transpose(1, 2), pos)
            k = self.rope(k.view(B, T, self.hkv, self.hd).transpose(1, 2), pos)
            v = v.view(B, T, self.hkv, self.hd).transpose(1, 2)
            rep = self.hq // self.hkv
            if cache is not None:  # decode, T = 1: a KV head's query heads are its "query positions"
                K, V = cache[i]
                K[:, :, -T:].copy_(k)
                V[:, :, -T:].copy_(v)
                a = F.scaled_dot_product_attention(q.reshape(B, self.hkv, rep * T, self.hd), K, V)
                a = a.view(B, self.hq, T, self.hd)
            else:  # whole K/V per query head, so the flash kernel applies (a small copy next to the GEMMs)
                a = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                                   is_causal=True)
            x = x + reduce_from_tp(a.transpose(1, 2).reshape(B, T, -1) @ m.o.T, chains)
            g, u = (copy_to_tp(m.n2(x), chains) @ m.gu.T).chunk(2, -1)
            x = x + reduce_from_tp((F.silu(g) * u) @ m.d.T, chains)
        return x


# ---- background traffic -------------------------------------------------------------------------

def _copy_traffic(chunk_mib):
    """Copy-engine peer copies both ways; returns (burst(k), bytes a chunk moves each way, info).

    Two ways to issue them are timed and the faster is used: torch's cross-device `copy_` (14 GB/s
    a direction on our H200s, twice) and cudaMemcpyPeerAsync called through ctypes on the same
    tensors and streams."""
    import ctypes
    d0, d1 = torch.device("cuda", 0), torch.device("cuda", 1)
    cudart = ctypes.CDLL("libcudart.so." + torch.version.cuda.split(".")[0])
    # Peer access asked for explicitly (torch asks lazily, and says nothing when it is refused).
    peer_rc = {}
    for d in (0, 1):
        torch.cuda.set_device(d)
        peer_rc[d] = cudart.cudaDeviceEnablePeerAccess(1 - d, 0)  # 0 ok, 704 already enabled
        cudart.cudaGetLastError()
    cudart.cudaMemcpyPeerAsync.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                           ctypes.c_size_t, ctypes.c_void_p]
    n = chunk_mib << 20
    a0, b0 = torch.empty(n, dtype=torch.uint8, device=d0), torch.empty(n, dtype=torch.uint8, device=d0)
    a1, b1 = torch.empty(n, dtype=torch.uint8, device=d1), torch.empty(n, dtype=torch.uint8, device=d1)
    # torch orders a cross-device copy after the destination device's current stream and that
    # stream after the copy: give each direction its own pair so the two never wait on each other
    s0, t1 = torch.cuda.Stream(d0), torch.cuda.Stream(d1)
    s1, t0 = torch.cuda.Stream(d1), torch.cuda.Stream(d0)

    def torch_step():
        with torch.cuda.stream(s0), torch.cuda.stream(t1):
            b1.copy_(a0, non_blocking=True)  # GPU0 -> GPU1
        with torch.cuda.stream(s1), torch.cuda.stream(t0):
            b0.copy_(a1, non_blocking=True)  # GPU1 -> GPU0

    def peer_step():
        rc = cudart.cudaMemcpyPeerAsync(b1.data_ptr(), 1, a0.data_ptr(), 0, n, s0.cuda_stream)
        rc |= cudart.cudaMemcpyPeerAsync(b0.data_ptr(), 0, a1.data_ptr(), 1, n, s1.cuda_stream)
        if rc:
            raise RuntimeError(f"cudaMemcpyPeerAsync returned {rc}")

    def run(step, k):
        for _ in range(k):
            step()
        for s in (s0, t1, s1, t0):
            s.synchronize()

    speed = {}
    for name, step in (("torch_copy", torch_step), ("cudaMemcpyPeerAsync", peer_step)):
        run(step, 3)
        t = time.perf_counter()
        run(step, 10)
        speed[name] = n * 10 / (time.perf_counter() - t) / 1e9
    how = max(speed, key=speed.get)
    step = torch_step if how == "torch_copy" else peer_step
    return (lambda k: run(step, k)), n, {"peer_access": bool(torch.cuda.can_device_access_peer(0, 1)),
                                         "enable_peer_rc": peer_rc, "copy_call": how,
                                         "GBps_per_direction_by_call": speed}


def _nccl_traffic(chunk_mib):
    """A third party's NCCL all-reduce over both GPUs, from this one process (torch.cuda.nccl: one
    communicator over the two devices, NCCL's own kernels on the link). A ring all-reduce of S bytes
    at P = 2 sends S each way (half in reduce-scatter, half in all-gather)."""
    import torch.cuda.nccl as nccl
    n = chunk_mib << 20
    xs = [torch.zeros(n // 2, dtype=torch.bfloat16, device=torch.device("cuda", d)) for d in (0, 1)]
    streams = [torch.cuda.Stream(torch.device("cuda", d)) for d in (0, 1)]

    def burst(k):
        for _ in range(k):
            nccl.all_reduce(xs, streams=streams)
        for s in streams:
            s.synchronize()

    return burst, n, {"nccl_version": str(nccl.version())}


def background(cmd, res, kind, chunk_mib, period_ms):
    """Separate process owning both GPUs: a third party's traffic at a commanded duty cycle (see
    the module doc); kind 'nccl' (an NCCL all-reduce) or 'copy' (copy-engine peer copies)."""
    try:
        burst, n, info = (_nccl_traffic if kind == "nccl" else _copy_traffic)(chunk_mib)
        burst(4)
    except Exception as e:  # an NCCL that cannot start here: the copies, and the reason, recorded
        if kind != "nccl":
            raise
        kind = "copy"
        burst, n, info = _copy_traffic(chunk_mib)
        info["nccl_failed"] = repr(e)[:300]
        burst(4)
    t = time.perf_counter()
    burst(40)
    t_chunk = (time.perf_counter() - t) / 40
    # The period holds at least 8 steps, so that 25 / 50 / 75 % are distinct whole numbers of
    # steps (the first GPU run, 2026-11-30, had 2.4 ms steps in a 4 ms period: one at every level).
    period = max(period_ms / 1e3, 8 * t_chunk)
    res.put(("calibrated", {"kind": kind, "chunk_mib": chunk_mib, "chunk_us": 1e6 * t_chunk,
                            "period_ms": 1e3 * period, "GBps_per_direction": n / t_chunk / 1e9, **info}))
    duty, k = 0.0, 0
    busy = elapsed = 0.0
    bursts = 0
    while True:
        try:
            msg = cmd.get(block=duty == 0.0)  # idle: wait for a command; busy: only peek
        except queue.Empty:
            msg = None
        if msg is not None:
            if msg[0] == "stop":
                return
            if msg[0] == "level":
                duty = msg[1]
                k = max(1, round(duty * period / t_chunk)) if duty > 0 else 0
                busy = elapsed = 0.0
                bursts = 0
                res.put(("ack", duty))
            elif msg[0] == "stats":
                res.put(("stats", {"target": duty, "chunks_per_period": k,
                                   "offered_GBps_per_direction": k * n / period / 1e9,
                                   "measured_duty": busy / elapsed if elapsed else 0.0, "periods": bursts}))
            continue
        start = time.perf_counter()
        burst(k)
        done = time.perf_counter()
        while time.perf_counter() - start < period:
            time.sleep(max(0.0, (period - (time.perf_counter() - start)) * 0.5))
        busy += done - start
        elapsed += time.perf_counter() - start
        bursts += 1


# ---- timing -------------------------------------------------------------------------------------

class Workload:
    """One shape: builds inputs, one CUDA graph per backend (or eager), times a replay."""

    def __init__(self, kind, size, cfg, model, dev, dtype):
        self.kind, self.size, self.cfg, self.model, self.dev = kind, size, cfg, model, dev
        H = cfg.hidden
        g = torch.Generator(device=dev).manual_seed(99)  # the same input on both ranks
        if kind == "prefill":
            self.x = torch.randn(1, size, H, generator=g, device=dev).to(dtype)
            self.pos = torch.arange(size, device=dev)
            self.cache = None
        elif kind == "decode":
            C = cfg.context
            self.x = torch.randn(size, 1, H, generator=g, device=dev).to(dtype)
            self.pos = torch.tensor([C], device=dev)
            assert model.hq % model.hkv == 0
            self.cache = [tuple(torch.randn(size, model.hkv, C + 1, model.hd, generator=g, device=dev).to(dtype)
                                for _ in range(2)) for _ in model.layers]
        else:  # train
            B, T = cfg.train_batch, size
            self.x = torch.randn(B, T, H, generator=g, device=dev).to(dtype).requires_grad_(True)
            self.pos = torch.arange(T, device=dev)
        self.graphs = {}

    @property
    def elements(self):
        return self.x.numel()

    def step(self, chains):
        if self.kind == "train":
            chains.start_forward()
            y = self.model(self.x, chains, self.pos)
            chains.start_backward()
            y.float().square().mean().backward()
            for p in self.model.parameters():
                p.grad = None
            self.x.grad = None
            return None
        with torch.no_grad():
            chains.start_forward()
            return self.model(self.x, chains, self.pos, self.cache)

    def prepare(self, name, chains, use_graph):
        for _ in range(3):  # warm-up (also what graph capture needs)
            self.step(chains)
        if use_graph and self.kind != "train":
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                self.step(chains)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                self.step(chains)
            self.graphs[name] = g

    def time(self, name, chains, reps):
        run = self.graphs[name].replay if name in self.graphs else (lambda: self.step(chains))
        for _ in range(2):
            run()
        dist.barrier()
        if self.dev.type == "cuda":
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
            torch.cuda.synchronize()
            ev[0].record()
            for i in range(reps):
                run()
                ev[i + 1].record()
            torch.cuda.synchronize()
            ts = sorted(ev[i].elapsed_time(ev[i + 1]) for i in range(reps))
        else:
            ts = []
            for _ in range(reps):
                t = time.perf_counter()
                run()
                ts.append(1e3 * (time.perf_counter() - t))
            ts.sort()
        return {"median_ms": ts[len(ts) // 2], "mean_ms": sum(ts) / len(ts), "min_ms": ts[0]}


def probe(dev, dtype):
    """A plain 64 MiB NCCL all-reduce: shows whether the background traffic loads the link."""
    x = torch.ones(32 << 20, dtype=dtype, device=dev)
    for _ in range(3):
        dist.all_reduce(x)
    if dev.type != "cuda":
        return None
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    a.record()
    for _ in range(10):
        dist.all_reduce(x)
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / 10


def main_rank(cfg, dev):
    rank, world = dist.get_rank(), dist.get_world_size()

    def log(msg):
        if rank == 0:
            print(msg, flush=True)

    t_start = time.time()
    dtype = torch.bfloat16
    model = Layers(cfg, world, dev, dtype)
    nparam = sum(p.numel() for p in model.parameters())
    log(f"{cfg.layers} layers, {nparam / 1e6:.0f} M parameters per rank, device {dev}")
    works = [("prefill", int(t)) for t in cfg.prefill.split(",") if t] + \
            [("decode", int(b)) for b in cfg.decode.split(",") if b] + \
            ([("train", cfg.train_seq)] if cfg.train_seq else [])
    tokens = {"prefill": 1, "decode": 1, "train": cfg.train_batch}  # sequences per token count
    max_el = max(size * tokens[kind] * cfg.hidden for kind, size in works)
    specs = ["noop"] + cfg.backends.split(",")
    ars = {s: AllReduce(s, max_elements=max_el) for s in specs}
    chains = {s: Chains(ars[s]) for s in specs}
    levels = [float(x) / 100 for x in cfg.loads.split(",")]

    bg = None
    if rank == 0 and dev.type == "cuda" and any(levels):
        ctx = torch.multiprocessing.get_context("spawn")
        cmd, res = ctx.Queue(), ctx.Queue()
        bg = ctx.Process(target=background, args=(cmd, res, cfg.bg_kind, cfg.bg_chunk_mib, cfg.bg_period_ms),
                         daemon=True)
        bg.start()
        cal = res.get(timeout=120)[1]
        extra = {k: v for k, v in cal.items() if k not in ("kind", "chunk_mib", "chunk_us", "period_ms", "GBps_per_direction")}
        log(f"background ({cal['kind']}): a {cal['chunk_mib']} MiB chunk takes {cal['chunk_us']:.0f} us "
            f"({cal['GBps_per_direction']:.0f} GB/s each way, both busy; {extra}), period {cal['period_ms']:.1f} ms")
        if cal["GBps_per_direction"] < 100:
            log("WARNING: the background runs far below NVLink's speed (about 365 GB/s a direction): "
                "its load levels are a small fraction of the link, not the duty cycle named")
    out = {"config": vars(cfg), "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
           "date": time.strftime("%Y-%m-%d %H:%M"), "params_per_rank": nparam, "levels": {}, "results": []}
    if bg is not None:
        out["background_calibration"] = cal

    def set_level(d):
        if bg is not None:
            cmd.put(("level", d))
            res.get(timeout=60)
        dist.barrier()
        time.sleep(cfg.settle_s)

    def level_stats():
        if bg is None:
            return {"target": 0.0, "measured_duty": 0.0}
        cmd.put(("stats",))
        return res.get(timeout=60)[1]

    def save(o):
        if rank == 0 and cfg.out:
            os.makedirs(os.path.dirname(os.path.abspath(cfg.out)), exist_ok=True)
            json.dump(o, open(cfg.out, "w"), indent=1)

    use_graph = dev.type == "cuda" and not cfg.no_graphs
    for kind, size in works:
        w = Workload(kind, size, cfg, model, dev, dtype)
        for s in specs:
            w.prepare(s, chains[s], use_graph)
        reps = cfg.reps if kind != "decode" else cfg.decode_reps
        for d in levels:
            set_level(d)
            row = {"workload": kind, "size": size, "load": d, "message_bytes": w.elements * 2, "times": {}}
            for s in specs:
                row["times"][s] = w.time(s, chains[s], reps)
            row["probe_nccl_64MiB_ms"] = probe(dev, dtype)
            st = level_stats()
            row["background"] = st
            out["levels"][str(d)] = st
            t_noop, t_nccl = row["times"]["noop"]["median_ms"], row["times"][specs[1]]["median_ms"]
            log(f"{kind:7s} {size:6d} load {100 * d:3.0f}% (measured {100 * st['measured_duty']:4.1f}%): "
                + "  ".join(f"{s} {row['times'][s]['median_ms']:.3f}" for s in specs)
                + f" ms; speedup vs {specs[1]}: "
                + " ".join(f"{t_nccl / row['times'][s]['median_ms']:.3f}x" for s in specs[2:])
                + f"; all-reduce share {specs[1]} {100 * (1 - t_noop / t_nccl):.0f}%"
                + (f"; probe {row['probe_nccl_64MiB_ms']:.3f} ms" if row["probe_nccl_64MiB_ms"] else ""))
            out["results"].append(row)
        del w
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        save(out)  # after every workload: a run cut short keeps what it measured
    out["fallbacks_to_nccl"] = {s: a.fallbacks for s, a in ars.items()}
    out["wall_s"] = time.time() - t_start
    log(f"total {out['wall_s']:.0f} s")
    if bg is not None:
        cmd.put(("stop",))
        bg.join(timeout=30)
    save(out)
    log(f"wrote {cfg.out}" if cfg.out else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="nccl,echo:za4g128,echo:za4g128+ef,echo:za8g128+ef",
                    help="all-reduce specs (allreduce_backends.py); the first is the baseline; noop is added")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--prefill", default="1024,4096,16384", help="prompt lengths, batch 1")
    ap.add_argument("--decode", default="1,16,64", help="decode batch sizes")
    ap.add_argument("--context", type=int, default=1024, help="KV cache length of a decode step")
    ap.add_argument("--train-seq", type=int, default=4096, help="0 skips the training step")
    ap.add_argument("--train-batch", type=int, default=1)
    ap.add_argument("--loads", default="0,25,50,75", help="background duty cycles in percent")
    ap.add_argument("--reps", type=int, default=20, help="timed repetitions (prefill, train)")
    ap.add_argument("--decode-reps", type=int, default=200)
    ap.add_argument("--bg-kind", choices=["nccl", "copy"], default="copy",
                    help="background traffic: copy-engine peer copies (default; no SMs) or an NCCL all-reduce")
    ap.add_argument("--bg-chunk-mib", type=int, default=64, help="bytes a background step moves each way")
    ap.add_argument("--bg-period-ms", type=float, default=4.0)
    ap.add_argument("--settle-s", type=float, default=0.2)
    ap.add_argument("--no-graphs", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--tiny", action="store_true", help="small shapes for a CPU check of the pipeline")
    ap.add_argument("--nproc", type=int, default=2)
    cfg = ap.parse_args()
    cfg.hidden, cfg.heads, cfg.kv_heads, cfg.ffn = 4096, 32, 8, 14336
    if cfg.tiny:
        cfg.hidden, cfg.heads, cfg.kv_heads, cfg.ffn, cfg.layers, cfg.context = 256, 8, 2, 512, 2, 64
        cfg.prefill, cfg.decode, cfg.train_seq, cfg.reps, cfg.decode_reps = "64,128", "1,4", 64, 3, 3
    launch(main_rank, cfg, cfg.nproc)


if __name__ == "__main__":
    main()
