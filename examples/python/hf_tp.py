#!/usr/bin/env python3
"""SmolLM2-135M-Instruct from its GGUF file through Hugging Face transformers' own tensor
parallelism (from_pretrained(..., tp_plan="auto")), its row-parallel all-reduces through Echo
(echo_allreduce.hf): perplexity and greedy text for the exact all-reduce, the former 4-bit
default and the default. docs/quality.md has the results.

    python3 scripts/data/build_corpus.py && python3 scripts/data/fetch_smollm.py   # once, with the network
    python3 examples/python/hf_tp.py --nproc 3               # 3 GPUs; --share-gpu: all on one; --cpu: gloo

TP = 3: transformers splits heads evenly, and SmolLM2's 9 query and 3 KV heads split evenly over 3
ranks only (at TP = 2 a rank would hold half a head). That split is smollm_tp.py's at --nproc 3, and
the windows are its windows, so the two scripts' perplexities compare (docs/quality.md).

What a user writes (every rank, under torch.distributed):

    model = AutoModelForCausalLM.from_pretrained(path, gguf_file=name, tp_plan="auto")
    with echo_allreduce.hf.patched(model, message_dtype=torch.bfloat16):
        out = model.generate(...)
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from smollm_tp import DATA, PROMPTS, find_file, window_nll, windows_of  # noqa: E402
from tp_layers import launch  # noqa: E402

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# name -> (the EchoAllReduce arguments, patch()'s close), or None: transformers' own all-reduce
VARIANTS = {
    "exact": (dict(quant="none", comp="none"), False),  # Echo's 16-bit path: the bf16 sum, rounded once
    "former": (dict(quant="zero_aware", bits=4, group_size=128, rotate=False, clip=1.0, storage="step8"), False),
    "default": (dict(), True),  # the recommended 4-bit setting: rotated, clipped, int8 state, closed at 8 bits
    "int8": (dict(quant="zero_aware", bits=8, group_size=128, rotate=False, clip=1.0), False),
    "transformers": None,
}


def load(args, dev):
    from echo_allreduce import hf
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import AutoModelForCausalLM

    # transformers places rank r's shard on cuda:LOCAL_RANK: the GPU this rank was given
    os.environ["LOCAL_RANK"] = str(dev.index if dev.type == "cuda" else 0)
    mesh = init_device_mesh(dev.type, (dist.get_world_size(),))
    plan = hf.blocks_only_plan(args.data, gguf_file=GGUF) if args.share_gpu or args.blocks_only else "auto"
    return AutoModelForCausalLM.from_pretrained(args.data, gguf_file=GGUF, tp_plan=plan, device_mesh=mesh,
                                                dtype=torch.float32)


def main_rank(args, dev):
    from echo_allreduce import EchoAllReduce, hf
    from tokenizers import Tokenizer

    rank = dist.get_rank()

    def log(msg):
        if rank == 0:
            print(msg, flush=True)

    torch.backends.cuda.matmul.allow_tf32 = False
    t0 = time.time()
    model = load(args, dev)
    dirs = [os.path.join(args.data, "part1"), os.path.join(args.data, "part2")]
    tok = Tokenizer.from_file(find_file("tokenizer.json", dirs))
    ids = np.load(find_file("val_ids.u16.npy", dirs)).astype(np.int64)
    windows = windows_of(ids, args.window, args.windows, args.skip_tokens)
    hidden = model.config.hidden_size
    split = "the decoder blocks" if args.share_gpu or args.blocks_only else "tp_plan 'auto'"
    log(f"loaded in {time.time() - t0:.0f} s through transformers ({split}, {dist.get_world_size()} ranks); "
        f"{windows.shape[0]} windows of {args.window} tokens, device {dev}")
    res = {"config": vars(args), "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
           "date": time.strftime("%Y-%m-%d %H:%M"), "ppl": {}, "generations": {}}
    backend = dict(backend="cuda", device=dev) if dev.type == "cuda" else dict(backend="reference")
    for name in args.variants.split(","):
        comm = None
        if VARIANTS[name] is not None:
            setting, close = VARIANTS[name]
            comm = EchoAllReduce(None, args.batch * args.window * hidden, unquantized_below_bytes=0,
                                 **backend, **setting)
            hf.patch(model, comm, message_dtype=torch.bfloat16, close=close)
        t = time.time()
        tot, cnt, per = window_nll(lambda ids: model(ids).logits, windows, args.batch, dev)
        prompt = f"<|im_start|>user\n{PROMPTS[0]}<|im_end|>\n<|im_start|>assistant\n"
        start = torch.tensor([tok.encode(prompt).ids], device=dev)
        with torch.no_grad():
            out = model.generate(start, max_new_tokens=args.new_tokens, do_sample=False, pad_token_id=0)
        text = tok.decode(out[0, start.shape[1]:].tolist())
        if comm is not None:
            hf.unpatch(model)
            comm.close()
        res["ppl"][name] = {"ppl": math.exp(tot / cnt), "nll": tot / cnt, "tokens": cnt, "per_window": per}
        res["generations"][name] = text
        log(f"{name:13s} ppl {math.exp(tot / cnt):.4f}  nll {tot / cnt:.6f}  ({time.time() - t:.1f} s)\n  > {text!r}")
        if rank == 0 and args.out:
            json.dump(res, open(args.out, "w"), indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--variants", default="exact,former,default")
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument("--windows", type=int, default=128)
    ap.add_argument("--skip-tokens", type=int, default=16384)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--nproc", type=int, default=3)
    ap.add_argument("--share-gpu", action="store_true", help="every rank on the GPUs there are, over gloo")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--blocks-only", action="store_true",
                    help="split the decoder blocks only (what --share-gpu does; for a CPU check of it)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    launch(main_rank, args, args.nproc)


if __name__ == "__main__":
    main()
