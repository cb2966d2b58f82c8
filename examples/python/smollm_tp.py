#!/usr/bin/env python3
"""SmolLM2-135M-Instruct (Llama architecture, GGUF weights) under TP = 2 with each of Echo's
all-reduce variants: perplexity, error of the residual stream along depth, greedy text.
docs/quality.md has the results and the reasoning.

    python3 scripts/data/fetch_smollm.py                      # once, with the network: .data/smollm/
    python3 examples/python/smollm_tp.py check                # un-split fp32 model on the CPU
    python3 examples/python/smollm_tp.py eval --out smollm-tp2.json  # 2 GPUs (or --cpu)
    python3 examples/python/smollm_tp.py eval --cpu --windows 4 --variants nccl,reference:za4g128+ef

Model math: fp32 everywhere (TF32 off) except the all-reduce, whose messages are bf16 as a bf16
deployment sends them; the exact baseline `nccl` is the bf16 NCCL all-reduce (`nccl:dtype=f32`
sends fp32 messages: the model without any all-reduce rounding). Split: attention by
KV group, the 3 KV groups dealt contiguously (rank 0: groups 0-1 = query heads 0-5, rank 1:
group 2 = heads 6-8; at TP = 4 the last rank holds none and adds zeros) -- heads are independent,
so any split is exact, and the uneven one costs only balance; the MLP split evenly (768 + 768 at TP = 2); embedding, norms and the tied head replicated. Two
all-reduces a layer (after attention, after the MLP): 60 a forward pass, one chain per pass.
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
from tp_layers import launch  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(ROOT, ".data", "smollm")
PROMPTS = ["What is the Linux kernel?", "Write a short poem about the sea.",
           "Explain in two sentences why the sky is blue.", "Give three tips for writing clear documentation."]
DEFAULT_VARIANTS = ("nccl:dtype=f32,nccl,echo:za4g32,echo:za4g32+ef,echo:za4g64,echo:za4g64+ef,echo:za4g128,echo:za4g128+ef,"
                    "echo:sym4g128,echo:sym4g128+ef,echo:nz4g128,echo:nz4g128+ef,echo:za8g128,echo:za8g128+ef,"
                    "sim:za3g128+ef,sim:za2g128+ef")


# ---- weights ------------------------------------------------------------------------------------

def dequantize(raw, kind, shape):
    """GGUF blocks (uint8 tensor) -> fp32, with the operations of gguf.quants (checked equal by
    scripts/data/fetch_smollm.py): Q8_0 = d * q; Q4_1 = d * q + m, low nibbles first."""
    if kind == "F32":
        return raw.view(torch.float32).reshape(shape).clone()
    if kind == "Q8_0":
        b = raw.reshape(-1, 34)
        d = b[:, :2].contiguous().view(torch.float16).float()
        return (d * b[:, 2:].contiguous().view(torch.int8).float()).reshape(shape)
    if kind == "Q4_1":
        b = raw.reshape(-1, 20)
        d = b[:, :2].contiguous().view(torch.float16).float()
        m = b[:, 2:4].contiguous().view(torch.float16).float()
        qs = b[:, 4:]
        q = torch.cat([qs & 0x0F, qs >> 4], dim=1).float()
        return (d * q + m).reshape(shape)
    raise ValueError(f"no dequantizer for GGUF type {kind}")


def find_file(name, dirs):
    for d in dirs:
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    raise FileNotFoundError(f"{name} not in {dirs}: run scripts/data/fetch_smollm.py where there is "
                            "network and copy .data/smollm/ here (docs/quality.md)")


def load_weights(dirs):
    W = {}
    for part in ("weights1.npz", "weights2.npz"):
        z = np.load(find_file(part, dirs))
        for k in z.files:
            if not k.endswith(".meta"):
                meta = json.loads(bytes(z[k + ".meta"]).decode())
                W[k] = dequantize(torch.from_numpy(z[k]), meta["type"], meta["shape"])
    return W


# ---- the model ----------------------------------------------------------------------------------

class Llama:
    """This rank's part of the model; forward(ids, ar, chain) -> fp32 logits."""

    def __init__(self, W, cfg, rank, world, dev):
        self.dev, self.world = dev, world
        self.n_layer = cfg["block_count"]
        d = cfg["embedding_length"]
        H, KV = cfg["attention.head_count"], cfg["attention.head_count_kv"]
        self.hd, self.eps = d // H, cfg["attention.layer_norm_rms_epsilon"]
        groups = np.array_split(np.arange(KV), world)[rank]  # KV groups of this rank, contiguous
        per = H // KV
        qh = [g * per + i for g in groups for i in range(per)]
        rows = lambda heads: torch.tensor([h * self.hd + i for h in heads for i in range(self.hd)], dtype=torch.long)  # noqa: E731
        qr, kr = rows(qh), rows(groups.tolist())
        F_ = cfg["feed_forward_length"]
        fs = slice(rank * F_ // world, (rank + 1) * F_ // world)
        self.hq, self.hkv = len(qh), len(groups)
        t = lambda x: x.contiguous().to(dev)  # noqa: E731
        self.emb = t(W["token_embd.weight"])
        self.norm = t(W["output_norm.weight"])
        self.layers = []
        for i in range(self.n_layer):
            p = f"blk.{i}."
            self.layers.append(dict(
                an=t(W[p + "attn_norm.weight"]), fn=t(W[p + "ffn_norm.weight"]),
                q=t(W[p + "attn_q.weight"][qr]), k=t(W[p + "attn_k.weight"][kr]), v=t(W[p + "attn_v.weight"][kr]),
                o=t(W[p + "attn_output.weight"][:, qr]), g=t(W[p + "ffn_gate.weight"][fs]),
                u=t(W[p + "ffn_up.weight"][fs]), dn=t(W[p + "ffn_down.weight"][:, fs])))
        inv = 1.0 / (cfg["rope.freq_base"] ** (torch.arange(0, self.hd, 2, dtype=torch.float64) / self.hd))
        self.inv_freq = inv.to(dev)

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def rope(self, x, cos, sin):
        # GGUF "normal" rope: the converter permuted Q/K so that pairs are adjacent (2i, 2i+1)
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)

    def reduce(self, y, ar, chain, last=False):
        if self.world == 1:
            return y
        if ar.opts.get("dtype") == "f32":  # the fp32 sum: what bf16 messages cost even exactly summed
            return ar(y, chain, last)
        return ar(y.to(torch.bfloat16), chain, last).float()

    def forward(self, ids, ar, chain, record=None):
        ar.reset(chain)  # one chain per forward pass
        B, T = ids.shape
        ang = torch.arange(T, device=self.dev, dtype=torch.float64)[:, None] * self.inv_freq[None]
        cos, sin = ang.cos().float(), ang.sin().float()
        x = self.emb[ids]
        for li, L in enumerate(self.layers):
            h = self.rms(x, L["an"])
            q = (h @ L["q"].T).view(B, T, self.hq, self.hd).transpose(1, 2)
            k = (h @ L["k"].T).view(B, T, self.hkv, self.hd).transpose(1, 2)
            v = (h @ L["v"].T).view(B, T, self.hkv, self.hd).transpose(1, 2)
            if self.hkv:
                q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
                rep = self.hq // self.hkv
                a = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                                   is_causal=True)
                a = a.transpose(1, 2).reshape(B, T, -1) @ L["o"].T
            else:  # more ranks than KV groups (TP = 4): this rank holds no head and adds zeros
                a = x.new_zeros(x.shape)
            x = x + self.reduce(a, ar, chain)
            h = self.rms(x, L["fn"])
            x = x + self.reduce((F.silu(h @ L["g"].T) * (h @ L["u"].T)) @ L["dn"].T, ar, chain, li == self.n_layer - 1)
            if record is not None:
                record.append(x.clone())
        return self.rms(x, self.norm) @ self.emb.T


# ---- measurements -------------------------------------------------------------------------------

@torch.no_grad()
def window_nll(logits_of, windows, batch, dev):
    """Sum of -log p, count and per-window sums over the windows (each window scores tokens
    1..T-1), batch windows a pass through logits_of(ids) -> logits."""
    total, count = 0.0, 0
    per_window = []
    for i in range(0, windows.shape[0], batch):
        w = windows[i:i + batch].to(dev)
        logits = logits_of(w[:, :-1]).float()
        lp = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1), reduction="none")
        s = lp.view(w.shape[0], -1).double().sum(1)
        per_window += s.tolist()
        total += s.sum().item()
        count += lp.numel()
    return total, count, per_window


def nll(model, windows, ar, batch):
    chain = ar.new_chain()
    return window_nll(lambda ids: model.forward(ids, ar, chain), windows, batch, model.dev)


@torch.no_grad()
def greedy(model, tok, prompt, ar, new_tokens, cfg, chat=True):
    text = f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n" if chat else prompt
    ids = tok.encode(text).ids
    chain = ar.new_chain()
    out = []
    for _ in range(new_tokens):  # the whole sequence again every token: no KV cache, one chain a pass
        logits = model.forward(torch.tensor([ids + out], device=model.dev), ar, chain)
        nxt = int(logits[0, -1].argmax())
        if nxt == cfg["eos"]:
            break
        out.append(nxt)
    return tok.decode(out)


def windows_of(ids, length, count, skip=0):
    """`count` windows of `length` scored tokens from token `skip` of the split on."""
    ids = ids[skip:]
    n = min(count, (ids.size - 1) // length)
    return torch.from_numpy(np.stack([ids[i * length:i * length + length + 1] for i in range(n)]).astype(np.int64))


def with_quantizer_always(spec):
    """Echo's size dispatch would send small calls to its 16-bit path; here every call quantizes."""
    return spec + ":below=0" if spec.startswith("echo") and "below=" not in spec else spec


def setup(args, dev, world, rank):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dirs = [os.path.join(args.data, "part1"), os.path.join(args.data, "part2")]
    cfg = json.load(open(find_file("config.json", dirs)))
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(find_file("tokenizer.json", dirs))
    model = Llama(load_weights(dirs), cfg, rank, world, dev)
    return cfg, tok, model, dirs


def run_check(args):
    """The un-split fp32 model on the CPU: perplexity on kernel documentation, greedy text."""
    torch.set_num_threads(os.cpu_count())
    dev = torch.device("cpu")
    cfg, tok, model, _ = setup(args, dev, 1, 0)
    text = read_text(args.check_text)
    ids = tok.encode(text).ids[: args.check_tokens + 1]
    w = torch.tensor([ids])

    class Local:  # world 1: no all-reduce at all
        reset = staticmethod(lambda chain: None)
        new_chain = staticmethod(lambda: None)

    logits = model.forward(w[:, :-1], Local, None)
    loss = F.cross_entropy(logits[0], w[0, 1:]).item()
    print(f"un-split fp32, CPU: perplexity {math.exp(loss):.3f} on {w.shape[1] - 1} tokens of {args.check_text}")
    for p in PROMPTS[:2]:
        print(f"\n> {p}\n{greedy(model, tok, p, Local, args.new_tokens, cfg)}")


def read_text(name):
    """A file, or a path inside the kernel tarball that build_corpus.py fetched (Documentation/...)."""
    if os.path.exists(name):
        return open(name, encoding="utf-8").read()
    import tarfile
    tar = os.path.join(ROOT, ".data", "pkgs", "linux-source-6.1", "usr", "src", "linux-source-6.1.tar.xz")
    with tarfile.open(tar, "r:xz") as tf:
        for m in tf:
            if m.name == "linux-source-6.1/" + name:
                return tf.extractfile(m).read().decode("utf-8")
    raise FileNotFoundError(name)


def main_rank(args, dev):
    rank, world = dist.get_rank(), dist.get_world_size()

    def log(msg):
        if rank == 0:
            print(msg, flush=True)

    t0 = time.time()
    cfg, tok, model, dirs = setup(args, dev, world, rank)
    ids = np.load(find_file("val_ids.u16.npy", dirs)).astype(np.int64)
    windows = windows_of(ids, args.window, args.windows, args.skip_tokens)
    log(f"loaded in {time.time() - t0:.0f} s; {windows.shape[0]} windows of {args.window} tokens "
        f"({windows.shape[0] * args.window} scored tokens), device {dev}, world {world}")
    max_el = args.batch * args.window * cfg["embedding_length"]
    res = {"config": vars(args), "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
           "date": time.strftime("%Y-%m-%d %H:%M"), "calls_per_pass": 2 * model.n_layer, "ppl": {}, "depth": {},
           "generations": {}}

    def save():  # after every stage, so a failure late in the run keeps what was measured
        if rank == 0 and args.out:
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            json.dump(res, open(args.out, "w"), indent=1)

    def make(spec):
        # No silent substitute: an echo: variant runs through Echo's torch op or fails (2- and
        # 3-bit are not in the package's compiled table: they are sim: variants, by name).
        return AllReduce(with_quantizer_always(spec), max_elements=max_el, device=dev)

    for spec in filter(None, args.variants.split(",")):
        t = time.time()
        ar = make(spec)
        tot, cnt, per = nll(model, windows, ar, args.batch)
        res["ppl"][spec] = {"ppl": math.exp(tot / cnt), "nll": tot / cnt, "tokens": cnt, "per_window": per,
                            "ran_as": ar.spec}
        log(f"{spec:22s} ppl {math.exp(tot / cnt):.4f}  nll {tot / cnt:.6f}  ({time.time() - t:.1f} s)")
        save()

    if args.depth:
        sub = windows[: args.depth_windows].to(dev)
        rec_exact = []
        model.forward(sub[:, :-1], make(args.exact), None, rec_exact)
        for spec in args.depth.split(","):
            ar = make(spec)
            rec = []
            model.forward(sub[:, :-1], ar, ar.new_chain(), rec)
            res["depth"][spec] = [((r - e).norm() / e.norm()).item() for r, e in zip(rec, rec_exact)]
            log(f"depth {spec}: rel. RMS error after layers 1, 10, 20, 30: "
                + ", ".join(f"{res['depth'][spec][i]:.2e}" for i in (0, 9, 19, 29)))
        save()

    for spec in filter(None, args.generate.split(",")):
        ar = make(spec)
        res["generations"][spec] = {p: greedy(model, tok, p, ar, args.new_tokens, cfg) for p in PROMPTS}
        log(f"\n== {spec}")
        for p, g in res["generations"][spec].items():
            log(f"> {p}\n{g}")
        save()
    # last: the slowest part, and the one that needs the reference's chain storage to match the op's
    if args.check_reference:  # the same variant through Echo and the CPU reference, on the GPU model
        sub = windows[: args.check_windows]
        res["reference_check"] = {}
        for spec in (f"echo:{args.check_reference}", f"reference:{args.check_reference}"):
            ar = make(spec)
            tot, cnt, per = nll(model, sub, ar, args.batch)
            res["reference_check"][spec] = {"ppl": math.exp(tot / cnt), "tokens": cnt, "per_window": per,
                                            "ran_as": ar.spec}
            log(f"check {spec:22s} ppl {math.exp(tot / cnt):.10f} on {cnt} tokens")
        a, b = (v["per_window"] for v in res["reference_check"].values())
        res["reference_check"]["bit_identical_nll"] = a == b
        log(f"check: per-window NLL identical: {a == b}")
        save()

    log(f"total {time.time() - t0:.0f} s")
    save()
    if rank == 0 and args.out:
        log(f"wrote {args.out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["check", "eval"])
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--variants", default=DEFAULT_VARIANTS)
    ap.add_argument("--window", type=int, default=1024, help="tokens scored per window (+1 context token)")
    ap.add_argument("--windows", type=int, default=200, help="fixed windows from the start of the validation split")
    ap.add_argument("--batch", type=int, default=8, help="windows per forward pass")
    ap.add_argument("--skip-tokens", type=int, default=0,
                    help="windows start this many tokens into the split (the tokens before chose the technique)")
    ap.add_argument("--depth", default="echo:za4g128+ef,echo:za4g128,echo:za8g128+ef,echo:za8g128",
                    help="variants whose residual-stream error along depth is measured ('' skips)")
    ap.add_argument("--depth-windows", type=int, default=4)
    ap.add_argument("--generate", default="nccl,echo:za4g128+ef,echo:za4g128", help="variants that generate ('' skips)")
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--check-reference", default="", help="e.g. za4g128+ef: echo vs reference on --check-windows")
    ap.add_argument("--check-windows", type=int, default=8)
    ap.add_argument("--check-text", default="Documentation/process/coding-style.rst",
                    help="check mode: a file, or a path in the kernel tarball")
    ap.add_argument("--check-tokens", type=int, default=400)
    ap.add_argument("--out", default=None)
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--exact", default="nccl", help="the exact baseline of the depth measurement "
                    "(echo:none, Echo's unquantized path, where ranks share a GPU and NCCL cannot run)")
    ap.add_argument("--share-gpu", action="store_true",
                    help="every rank on the GPUs there are, over gloo (one GPU: TP = 2 and 4 for the numerics)")
    ap.add_argument("--nproc", type=int, default=2)
    args = ap.parse_args()
    if args.mode == "check":
        run_check(args)
    else:
        launch(main_rank, args, args.nproc)


if __name__ == "__main__":
    main()
