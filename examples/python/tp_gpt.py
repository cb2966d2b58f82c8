"""A small GPT with Megatron-style tensor parallelism on Echo's all-reduce (echo_allreduce.tp).

    torchrun --nproc_per_node 2 examples/python/tp_gpt.py            # 2 GPUs: Echo's torch ops
    torchrun --nproc_per_node 2 examples/python/tp_gpt.py --cpu      # CPU: gloo + Echo's reference
    python examples/python/tp_gpt.py --cpu                           # the same, 2 processes spawned here
    ECHO_ALLREDUCE=off torchrun ...                                  # the same model on NCCL / gloo

It trains on tokens of a fixed random Markov chain (a toy language with a known entropy, so the
loss has a floor to approach) and prints the loss and the speed. Per block: attention with its
heads split over the ranks (a column-parallel QKV projection, a row-parallel output projection)
and an MLP (column-parallel up, row-parallel down): two all-reduces forward, two backward. The
forward ones share the forward chain, the backward ones the backward chain (tp.TensorParallel);
both restart at every step.
"""

from __future__ import annotations

import argparse
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from echo_allreduce import EchoAllReduce
from echo_allreduce.tp import ColumnParallelLinear, RowParallelLinear, TensorParallel


class Block(nn.Module):
    def __init__(self, d: int, heads: int, tp: TensorParallel, seed: int, dtype):
        super().__init__()
        self.heads = tp.split(heads, "heads")  # this rank's heads
        self.head_dim = d // heads
        self.ln1, self.ln2 = nn.LayerNorm(d, dtype=dtype), nn.LayerNorm(d, dtype=dtype)
        # The full QKV weight's rows are laid out rank by rank ([q; k; v] of each rank's heads),
        # so the column-parallel slice of rank r is exactly q, k and v of its heads.
        self.qkv = ColumnParallelLinear(d, 3 * d, tp, seed=seed, dtype=dtype)
        self.proj = RowParallelLinear(d, d, tp, seed=seed + 1, dtype=dtype)
        self.up = ColumnParallelLinear(d, 4 * d, tp, seed=seed + 2, dtype=dtype)
        self.down = RowParallelLinear(4 * d, d, tp, seed=seed + 3, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, self.head_dim).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, self.heads * self.head_dim))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class GPT(nn.Module):
    """Embeddings and the head are replicated: every rank computes them on identical inputs (Echo's
    outputs are bit-identical on every rank), so their gradients agree without an all-reduce."""

    def __init__(self, vocab: int, d: int, layers: int, heads: int, seq: int, tp: TensorParallel, dtype):
        super().__init__()
        g = torch.Generator().manual_seed(1234)
        self.tok = nn.Embedding(vocab, d, dtype=dtype)
        self.pos = nn.Embedding(seq, d, dtype=dtype)
        with torch.no_grad():
            self.tok.weight.copy_(torch.randn(vocab, d, generator=g) * 0.02)
            self.pos.weight.copy_(torch.randn(seq, d, generator=g) * 0.02)
        self.blocks = nn.ModuleList(Block(d, heads, tp, seed=10 * i, dtype=dtype) for i in range(layers))
        self.ln = nn.LayerNorm(d, dtype=dtype)
        self.tp = tp

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.ln(x) @ self.tok.weight.t()


def markov_batches(vocab: int, batch: int, seq: int, steps: int, device, seed: int = 0):
    """Token sequences of a random Markov chain in which each token has 4 likely successors."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.full((vocab, vocab), -4.0)
    logits.scatter_(1, torch.randint(vocab, (vocab, 4), generator=g), 2.0)
    probs = logits.softmax(-1)
    entropy = -(probs * probs.log()).sum(-1).mean().item()
    batches = []
    for _ in range(steps):
        t = torch.empty(batch, seq + 1, dtype=torch.long)
        t[:, 0] = torch.randint(vocab, (batch,), generator=g)
        for i in range(seq):
            t[:, i + 1] = torch.multinomial(probs[t[:, i]], 1, generator=g).squeeze(1)
        batches.append(t.to(device))
    return batches, entropy


def run(args) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu") if args.cpu else torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    if not args.cpu:
        torch.cuda.set_device(device)
    dtype = torch.float32 if args.cpu else torch.bfloat16
    comm = EchoAllReduce(None, args.batch * args.seq * args.d_model, bits=args.bits, comp=args.comp,
                         storage=args.storage)
    tp = TensorParallel(comm)
    model = GPT(args.vocab, args.d_model, args.layers, args.heads, args.seq, tp, dtype).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    batches, entropy = markov_batches(args.vocab, args.batch, args.seq, args.steps, device)
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print(f"{comm}\nTP={world}, {params / 1e6:.2f} M parameters per rank, {dtype}; "
              f"loss floor (the chain's entropy) {entropy:.3f}, uniform {math.log(args.vocab):.3f}")
    start, tokens = time.perf_counter(), 0
    for step, t in enumerate(batches):
        tp.new_pass()  # both chains restart: a new forward and backward pass
        logits = model(t[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), t[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        tokens += t[:, :-1].numel()
        if rank == 0 and (step % args.log_every == 0 or step == args.steps - 1):
            if not args.cpu:
                torch.cuda.synchronize()
            rate = tokens / (time.perf_counter() - start)
            print(f"step {step:4d}  loss {loss.item():.4f}  {rate:,.0f} tokens/s")
    comm.check()
    comm.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true", help="gloo and Echo's host reference instead of GPUs")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--bits", type=int, default=4, help="zero_aware bits (4 or 8)")
    p.add_argument("--comp", default="error_feedback", choices=["error_feedback", "none"])
    p.add_argument("--storage", default="step8", choices=["step8", "int8", "bf16", "float"])
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--tp", type=int, default=2, help="ranks to spawn when not started by torchrun")
    args = p.parse_args()
    if "RANK" in os.environ:  # torchrun
        dist.init_process_group("gloo" if args.cpu else "nccl")
        try:
            run(args)
        finally:
            dist.destroy_process_group()
    else:
        import tempfile

        import torch.multiprocessing as mp

        with tempfile.TemporaryDirectory() as d:
            mp.spawn(_spawned, args=(args, os.path.join(d, "init")), nprocs=args.tp)


def _spawned(rank: int, args, init_file: str) -> None:
    os.environ["LOCAL_RANK"] = str(rank)
    dist.init_process_group("gloo" if args.cpu else "nccl", init_method=f"file://{init_file}", rank=rank,
                            world_size=args.tp)
    try:
        run(args)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
