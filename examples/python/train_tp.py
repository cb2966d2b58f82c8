#!/usr/bin/env python3
"""TP = 2 GPT pretraining on the corpus of scripts/data/build_corpus.py, one run per all-reduce
variant, same seed and data order for all. docs/quality.md has the results.

    python3 examples/python/train_tp.py --variants nccl,echo:za4g128+ef --steps 1200 \
        --out training.json            # spawns 2 ranks (or run it under torchrun)
    python3 examples/python/train_tp.py --cpu --tiny --variants nccl,sim:za4g128+ef --steps 4

The model: pre-norm GPT (RMSNorm, learned positions, GELU MLP, tied embedding), attention heads
and MLP columns split over the ranks (column-parallel in, row-parallel out), so a layer makes two
all-reduces forward and two backward, each direction on its own error-feedback chain, reset every
step. Embedding, norms and head are replicated: every all-reduce backend gives bit-identical
outputs on all ranks, so their gradients agree without communication. bf16 autocast, fp32
master weights, AdamW, cosine schedule, gradient clipping.

With --sequence-parallel (Megatron-LM's sequence parallelism) the residual stream between the
layers is this rank's segment of the batch's tokens: each layer's two all-reduces forward become
a reduce-scatter after the row-parallel output and an all-gather before the column-parallel
input (and the reverse backward, the reduce-scatters on the backward chain); norms, residual adds,
the head and the loss run on the segment, and the gradients of the replicated parameters
(embeddings, norms) are summed over the ranks exactly. With --share-gpu the ranks share the GPUs
there are over a gloo group (NCCL refuses two ranks on one GPU): for the loss, not the speed; the
exact reference is then Echo's 16-bit path (`echo:none`: the fp32 sum rounded once).

Per variant the JSON holds the train loss every --log-every steps, the validation loss (fixed
windows of the validation split) every --eval-every steps and at the end, the same final
validation through the exact all-reduce, the step time and tokens/s, and the all-reduce's share
of the step: 1 - (step time with the all-reduce replaced by a no-op) / (step time), measured by
a short timed run of the same model with the `noop` backend. Results merge into --out by variant.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from allreduce_backends import AllReduce  # noqa: E402
from tp_layers import Chains, ColumnParallelLinear, RowParallelLinear, launch  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class Block(torch.nn.Module):
    def __init__(self, cfg, chains, rank, world, gen, dtype):
        super().__init__()
        d, h, f = cfg.d_model, cfg.n_head, cfg.d_ff
        hd = d // h
        self.heads = h // world
        std, std_out = 0.02, 0.02 / math.sqrt(2 * cfg.n_layer)
        # full weights drawn from the shared generator, then sliced: every variant and every
        # world size starts from the same model
        wqkv = torch.randn(3, h, hd, d, generator=gen) * std
        wo = torch.randn(d, h, hd, generator=gen) * std_out
        w1 = torch.randn(f, d, generator=gen) * std
        w2 = torch.randn(d, f, generator=gen) * std_out
        hs = slice(rank * self.heads, (rank + 1) * self.heads)
        fs = slice(rank * f // world, (rank + 1) * f // world)
        self.norm1 = torch.nn.RMSNorm(d)
        self.norm2 = torch.nn.RMSNorm(d)
        self.qkv = ColumnParallelLinear(wqkv[:, hs].reshape(-1, d).contiguous(), chains, dtype)
        self.proj = RowParallelLinear(wo[:, hs].reshape(d, -1).contiguous(), chains)
        self.fc1 = ColumnParallelLinear(w1[fs].contiguous(), chains, dtype)
        self.fc2 = RowParallelLinear(w2[:, fs].contiguous(), chains)

    def forward(self, x, B, T):
        """x: (B, T, d), or with sequence parallelism this rank's segment of the B T tokens (m, d)."""
        q, k, v = self.qkv(self.norm1(x)).view(B, T, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
        x = x + self.proj(a.reshape(B, T, -1) if x.dim() == 3 else a.reshape(B * T, -1))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, cfg, chains, rank, world, dtype):
        super().__init__()
        self.rank, self.world = rank, world
        self.sequence_parallel = chains.ar.sequence_parallel
        gen = torch.Generator().manual_seed(cfg.seed)
        self.wte = torch.nn.Parameter(torch.randn(cfg.vocab, cfg.d_model, generator=gen) * 0.02)
        self.wpe = torch.nn.Parameter(torch.randn(cfg.seq_len, cfg.d_model, generator=gen) * 0.01)
        self.blocks = torch.nn.ModuleList(Block(cfg, chains, rank, world, gen, dtype) for _ in range(cfg.n_layer))
        self.norm = torch.nn.RMSNorm(cfg.d_model)

    def forward(self, idx, targets):
        """The mean loss over the tokens; with sequence parallelism over this rank's segment."""
        B, T = idx.shape
        if self.sequence_parallel:
            m = B * T // self.world
            seg = slice(self.rank * m, (self.rank + 1) * m)
            pos = torch.arange(T, device=idx.device).repeat(B)[seg]
            x, targets = self.wte[idx.reshape(-1)[seg]] + self.wpe[pos], targets.reshape(-1)[seg]
        else:
            x = self.wte[idx] + self.wpe[:T]
        for b in self.blocks:
            x = b(x, B, T)
        logits = F.linear(self.norm(x), self.wte)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))

    def sharded(self):  # parameters that differ between ranks (for the gradient norm)
        return [p for n, p in self.named_parameters() if n.endswith(("qkv.weight", "proj.weight", "fc1.weight", "fc2.weight"))]


def count_params(model, world):
    sh = sum(p.numel() for p in model.sharded())
    return sh * world + sum(p.numel() for p in model.parameters()) - sh


def lr_at(step, cfg):
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def batches(data, cfg):
    """The same sequence of batches for every variant: offsets from a seeded generator."""
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    while True:
        off = torch.randint(0, data.size - cfg.seq_len - 1, (cfg.batch,), generator=gen).numpy()
        w = np.stack([data[o:o + cfg.seq_len + 1] for o in off]).astype(np.int64)
        yield torch.from_numpy(w[:, :-1]), torch.from_numpy(w[:, 1:])


def val_windows(data, cfg):
    n = min(cfg.val_windows, (data.size - 1) // cfg.seq_len)
    w = np.stack([data[i * cfg.seq_len:i * cfg.seq_len + cfg.seq_len + 1] for i in range(n)]).astype(np.int64)
    return torch.from_numpy(w)


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


class Run:
    def __init__(self, cfg, spec, dev):
        self.cfg, self.dev = cfg, dev
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.sp = cfg.sequence_parallel
        self.ar = AllReduce(spec, max_elements=cfg.batch * cfg.seq_len * cfg.d_model, device=dev, sequence_parallel=self.sp)
        self.chains = Chains(self.ar)
        self.dtype = torch.bfloat16 if cfg.bf16 else torch.float32
        self.model = GPT(cfg, self.chains, self.rank, self.world, self.dtype).to(dev)
        decay = [p for p in self.model.parameters() if p.dim() >= 2]
        rest = [p for p in self.model.parameters() if p.dim() < 2]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                                     lr=cfg.lr, betas=(0.9, 0.95), fused=dev.type == "cuda")
        sharded = {id(p) for p in self.model.sharded()}
        self.replicated = [p for p in self.model.parameters() if id(p) not in sharded]
        # With sequence parallelism each rank's replicated parameters see its segment only: their
        # gradients are summed exactly (one flat fp32 message; over a shared GPU by Echo's 16-bit
        # path, which sums in fp32 and rounds once: exact for fp32 at P = 2).
        self.grad_sum = None
        if self.sp and self.world > 1:
            numel = sum(p.numel() for p in self.replicated)
            self.grad_sum = AllReduce(cfg.exact, max_elements=numel, device=dev)

    def sum_replicated_grads(self):
        flat = torch.cat([p.grad.reshape(-1) for p in self.replicated])
        self.grad_sum(flat)
        off = 0
        for p in self.replicated:
            p.grad.copy_(flat[off:off + p.numel()].view_as(p.grad))
            off += p.numel()

    def mean_over_ranks(self, loss):
        """The loss of the whole batch: with sequence parallelism the mean of the ranks' segments."""
        if not self.sp:
            return loss
        return self.ar.exact(loss.detach().float().clone()) / self.world

    def loss(self, x, y):
        self.chains.start_forward()
        with torch.autocast(self.dev.type, dtype=torch.bfloat16, enabled=self.cfg.bf16):
            return self.model(x.to(self.dev, non_blocking=True), y.to(self.dev, non_blocking=True))

    def step(self, x, y, step):
        loss = self.loss(x, y)
        self.chains.start_backward()
        (loss / self.world if self.sp else loss).backward()
        if self.grad_sum is not None:
            self.sum_replicated_grads()
        loss = self.mean_over_ranks(loss)
        # global gradient norm: sharded parameters summed over ranks (exactly), replicated once
        sh = {id(p) for p in self.model.sharded()}
        sq_sh = sum((p.grad.float() ** 2).sum() for p in self.model.parameters() if id(p) in sh)
        sq_rep = sum((p.grad.float() ** 2).sum() for p in self.model.parameters() if id(p) not in sh)
        norm = (self.ar.exact(sq_sh.detach().clone()) + sq_rep).sqrt()
        torch.nn.utils.clip_grads_with_norm_(self.model.parameters(), self.cfg.clip, norm)
        for g in self.opt.param_groups:
            g["lr"] = lr_at(step, self.cfg)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss

    @torch.no_grad()
    def evaluate(self, windows, ar=None):
        saved = self.chains.ar
        if ar is not None:  # evaluate through another all-reduce (the exact one)
            self.chains.ar = ar
        total = torch.zeros((), device=self.dev)
        for i in range(0, windows.shape[0], self.cfg.batch):
            w = windows[i:i + self.cfg.batch]
            total += self.mean_over_ranks(self.loss(w[:, :-1], w[:, 1:])).float() * w.shape[0]
        self.chains.ar = saved
        return total.item() / windows.shape[0]


def timed(run, it, steps, start):
    """Mean step time over `steps` steps after a sync (seconds)."""
    sync(run.dev)
    t0 = time.perf_counter()
    for s in range(steps):
        x, y = next(it)
        run.step(x, y, start + s)
    sync(run.dev)
    return (time.perf_counter() - t0) / steps


def train_variant(cfg, spec, train, windows, dev, log):
    torch.manual_seed(cfg.seed)
    run = Run(cfg, spec, dev)
    exact = AllReduce(cfg.exact, max_elements=cfg.batch * cfg.seq_len * cfg.d_model, device=dev,
                      sequence_parallel=cfg.sequence_parallel)
    rec = {"spec": spec, "params": count_params(run.model, run.world), "train": [], "val": []}
    it = batches(train, cfg)
    t_start, t_steps, n_timed = time.perf_counter(), 0.0, 0
    window_t0 = None
    for step in range(cfg.steps):
        if step == cfg.time_from:
            sync(dev)
            window_t0 = time.perf_counter()
        x, y = next(it)
        loss = run.step(x, y, step)
        if step % cfg.log_every == 0 or step == cfg.steps - 1:
            rec["train"].append([step, loss.item()])
        if cfg.eval_every and step > 0 and step % cfg.eval_every == 0:
            sync(dev)
            t_eval = time.perf_counter()
            rec["val"].append([step, run.evaluate(windows)])
            log(f"  {spec} step {step}: train {rec['train'][-1][1]:.4f} val {rec['val'][-1][1]:.4f}")
            if window_t0 is not None:  # keep evaluation out of the step time
                window_t0 += time.perf_counter() - t_eval
    sync(dev)
    if window_t0 is not None:
        t_steps = time.perf_counter() - window_t0
        n_timed = cfg.steps - cfg.time_from
    rec["val"].append([cfg.steps, run.evaluate(windows)])
    rec["final_val"] = rec["val"][-1][1]
    rec["final_val_exact_allreduce"] = run.evaluate(windows, exact)
    rec["wall_s"] = time.perf_counter() - t_start
    if n_timed:
        rec["step_ms"] = 1e3 * t_steps / n_timed
        rec["tokens_per_s"] = cfg.batch * cfg.seq_len / (t_steps / n_timed)
    rec["fallbacks_to_nccl"] = run.ar.fallbacks
    log(f"{spec}: final val {rec['final_val']:.4f} (exact all-reduce {rec['final_val_exact_allreduce']:.4f}), "
        f"{rec.get('step_ms', float('nan')):.1f} ms/step, {rec.get('tokens_per_s', 0):.0f} tokens/s, "
        f"{rec['wall_s']:.0f} s")
    del run
    return rec


def time_noop(cfg, train, dev, log):
    """Step time of the same model with every TP all-reduce a no-op (what the step costs without it)."""
    torch.manual_seed(cfg.seed)
    run = Run(cfg, "noop", dev)
    it = batches(train, cfg)
    timed(run, it, cfg.time_from, 0)  # warm-up
    t = timed(run, it, cfg.noop_steps, cfg.time_from)
    log(f"noop: {1e3 * t:.1f} ms/step")
    return 1e3 * t


def main_rank(cfg, dev):
    rank = dist.get_rank()

    def log(msg):
        if rank == 0:
            print(msg, flush=True)

    corpus = cfg.corpus
    train = np.load(os.path.join(corpus, "train.u16.npy"), mmap_mode="r")
    val = np.load(os.path.join(corpus, "val.u16.npy"))
    if cfg.tiny:
        train = np.asarray(train[: 200_000])
    windows = val_windows(val, cfg)
    meta = json.load(open(os.path.join(corpus, "meta.json")))
    cfg.vocab = meta["vocab"]
    log(f"world {dist.get_world_size()}, device {dev}, {windows.shape[0]} validation windows of {cfg.seq_len} "
        f"({windows.numel() - windows.shape[0]} tokens), {cfg.batch * cfg.seq_len} tokens a step")
    config = {k: v for k, v in vars(cfg).items()}
    old = {}
    if rank == 0 and cfg.out:
        old = json.load(open(cfg.out)) if os.path.exists(cfg.out) else {}
        old.setdefault("runs", []).append({"config": config, "date": time.strftime("%Y-%m-%d %H:%M"),
                                           "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"})
        os.makedirs(os.path.dirname(os.path.abspath(cfg.out)), exist_ok=True)

    def save():  # after every variant: a call cut short keeps the variants it finished
        if rank == 0 and cfg.out:
            with open(cfg.out, "w") as f:
                json.dump(old, f, indent=1)

    noop_ms = time_noop(cfg, train, dev, log) if cfg.noop_steps else None
    if rank == 0 and cfg.out:
        old["runs"][-1]["noop_step_ms"] = noop_ms
    save()
    for spec in cfg.variants.split(","):
        rec = train_variant(cfg, spec, train, windows, dev, log)
        if noop_ms and "step_ms" in rec:
            rec["allreduce_share"] = 1 - noop_ms / rec["step_ms"]
            log(f"{spec}: all-reduce share of the step {100 * rec['allreduce_share']:.1f} %")
        if rank == 0 and cfg.out:
            rec["run"] = len(old["runs"]) - 1
            old.setdefault("variants", {})[spec] = rec
            save()
            log(f"wrote {cfg.out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default="nccl,echo:za4g128+ef,echo:za4g128,echo:za8g128+ef",
                    help="comma-separated all-reduce specs (allreduce_backends.py); ';' is not needed")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--corpus", default=os.path.join(ROOT, ".data", "corpus"))
    ap.add_argument("--out", default=None, help="JSON to merge the results into")
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--n-layer", type=int, default=8)
    ap.add_argument("--n-head", type=int, default=16)
    ap.add_argument("--d-ff", type=int, default=4096)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--val-windows", type=int, default=256, help="fixed validation windows of seq-len tokens")
    ap.add_argument("--time-from", type=int, default=20, help="steps before the step-time window starts")
    ap.add_argument("--noop-steps", type=int, default=30, help="timed steps with a no-op all-reduce (0: skip)")
    ap.add_argument("--no-bf16", dest="bf16", action="store_false")
    ap.add_argument("--cpu", action="store_true", help="gloo on the CPU even where CUDA exists")
    ap.add_argument("--tiny", action="store_true", help="a tiny model for a CPU check of the pipeline")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--sequence-parallel", action="store_true",
                    help="Megatron-LM sequence parallelism: reduce-scatter / all-gather instead of all-reduce")
    ap.add_argument("--share-gpu", action="store_true",
                    help="the ranks share the GPUs there are (gloo group): for the loss, not the speed")
    ap.add_argument("--exact", default=None,
                    help="the exact all-reduce spec (default nccl; with --share-gpu echo:none)")
    cfg = ap.parse_args()
    if cfg.exact is None:
        cfg.exact = "echo:none" if cfg.share_gpu else "nccl"
    if cfg.tiny:
        cfg.d_model, cfg.n_layer, cfg.n_head, cfg.d_ff, cfg.seq_len, cfg.batch = 64, 2, 4, 256, 64, 4
        cfg.val_windows, cfg.warmup = min(cfg.val_windows, 8), 2
        cfg.time_from, cfg.noop_steps = min(cfg.time_from, 1), min(cfg.noop_steps, 2)
        cfg.eval_every = min(cfg.eval_every, max(2, cfg.steps // 2))
    launch(main_rank, cfg, cfg.nproc)


if __name__ == "__main__":
    main()
