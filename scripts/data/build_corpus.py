#!/usr/bin/env python3
"""Build the English corpus (docs/quality.md) from two Debian packages, train a BPE tokenizer on
its training split and save both splits as uint16 token ids.

    python3 scripts/data/build_corpus.py            # everything lands in .data/ (git-ignored)

Sources (fetched with `apt-get download`, unpacked with `dpkg -x`, nothing installed):
  - linux-source-6.1: the English Documentation/ (translations/ left out), one document a file;
  - dict-gcide: the GNU Collaborative International Dictionary of English, one document an entry.
Split: a document goes to validation when the first 4 bytes of sha256(source + name) read as an
integer are below 3 % of 2^32: fixed, independent of file order and of the package's other files.
Output (.data/corpus/): train.u16.npy, val.u16.npy (documents joined by <|endoftext|>),
val.txt (the validation documents as text, for the pretrained model's evaluation),
tokenizer.json, meta.json (package versions, sizes, sha256 of every output).
"""
import argparse
import gzip
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EOT = "<|endoftext|>"
VAL_PERMILLE = 30


def sh(cmd, cwd):
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=cwd, check=True)


def fetch(debs, pkgs):
    os.makedirs(debs, exist_ok=True)
    os.makedirs(pkgs, exist_ok=True)
    names = ["linux-source-6.1", "dict-gcide"]
    if not all(any(f.startswith(n + "_") for f in os.listdir(debs)) for n in names):
        sh(["apt-get", "download"] + names, debs)
    versions = {}
    for f in sorted(os.listdir(debs)):
        if f.endswith(".deb"):
            versions[f.split("_")[0]] = f.split("_")[1]
            if not os.path.isdir(os.path.join(pkgs, f.split("_")[0])):
                sh(["dpkg", "-x", f, os.path.join(pkgs, f.split("_")[0])], debs)
    return versions


def is_val(source, name):
    h = int.from_bytes(hashlib.sha256(f"{source}:{name}".encode()).digest()[:4], "little")
    return h < VAL_PERMILLE * (1 << 32) // 1000


def kernel_docs(pkgs):
    tar_path = os.path.join(pkgs, "linux-source-6.1", "usr", "src", "linux-source-6.1.tar.xz")
    prefix = "linux-source-6.1/Documentation/"
    docs = []
    with tarfile.open(tar_path, "r:xz") as tf:
        for m in tf:
            if not m.isfile() or not m.name.startswith(prefix):
                continue
            rel = m.name[len(prefix):]
            # English prose only: no translations, no device-tree schemas, scripts or images
            if rel.startswith("translations/") or not (rel.endswith((".rst", ".txt")) or "." not in os.path.basename(rel)):
                continue
            if rel.startswith("devicetree/bindings/") and not rel.endswith((".rst", ".txt")):
                continue
            try:
                text = tf.extractfile(m).read().decode("utf-8")
            except UnicodeDecodeError:
                continue
            if text.strip():
                docs.append(("kernel", rel, text))
    return docs


def b64(s):
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    v = 0
    for c in s:
        v = v * 64 + alphabet.index(c)
    return v


def gcide_entries(pkgs):
    base = os.path.join(pkgs, "dict-gcide", "usr", "share", "dictd")
    data = gzip.open(os.path.join(base, "gcide.dict.dz")).read()
    spans = set()
    with open(os.path.join(base, "gcide.index"), encoding="utf-8") as f:
        for line in f:
            word, off, ln = line.rstrip("\n").split("\t")
            if not word.startswith("00-"):  # database headers
                spans.add((b64(off), b64(ln)))
    docs = []
    for off, ln in sorted(spans):
        text = data[off:off + ln].decode("utf-8", "replace")
        if text.strip():
            docs.append(("gcide", str(off), text))
    return docs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, ".data"))
    ap.add_argument("--vocab", type=int, default=16384)
    args = ap.parse_args()
    t0 = time.time()
    versions = fetch(os.path.join(args.out, "debs"), os.path.join(args.out, "pkgs"))
    print("packages:", versions, flush=True)
    docs = kernel_docs(os.path.join(args.out, "pkgs")) + gcide_entries(os.path.join(args.out, "pkgs"))
    split = {"train": [], "val": []}
    for src, name, text in docs:
        split["val" if is_val(src, name) else "train"].append((src, name, text))
    out = os.path.join(args.out, "corpus")
    os.makedirs(out, exist_ok=True)
    for s in split:
        nbytes = sum(len(t.encode()) for _, _, t in split[s])
        by_src = {k: sum(1 for d in split[s] if d[0] == k) for k in ("kernel", "gcide")}
        print(f"{s}: {len(split[s])} documents {by_src}, {nbytes / 1e6:.1f} MB of text", flush=True)
    with open(os.path.join(out, "val.txt"), "w", encoding="utf-8") as f:
        f.write(("\n" + EOT + "\n").join(t for _, _, t in split["val"]))

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator((t for _, _, t in split["train"]), trainer=trainer, length=len(split["train"]))
    tok.save(os.path.join(out, "tokenizer.json"))
    eot = tok.token_to_id(EOT)
    assert tok.get_vocab_size() <= 65536
    meta = {"packages": versions, "vocab": tok.get_vocab_size(), "eot": eot, "val_permille": VAL_PERMILLE}
    for s in split:
        enc = tok.encode_batch([t for _, _, t in split[s]])
        ids = np.fromiter((i for e in enc for i in (e.ids + [eot])), dtype=np.uint16)
        np.save(os.path.join(out, f"{s}.u16.npy"), ids)
        meta[f"{s}_tokens"] = int(ids.size)
        meta[f"{s}_documents"] = len(split[s])
        print(f"{s}: {ids.size} tokens ({ids.size * 2 / 1e6:.1f} MB as uint16)", flush=True)
    for f in sorted(os.listdir(out)):
        if f != "meta.json":
            with open(os.path.join(out, f), "rb") as fh:
                meta.setdefault("sha256", {})[f] = hashlib.sha256(fh.read()).hexdigest()
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    total = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"wrote {out}: {total / 2**20:.1f} MiB in all ({time.time() - t0:.0f} s)")
    for f in sorted(os.listdir(out)):
        print(f"  {f}: {os.path.getsize(os.path.join(out, f)) / 2**20:.2f} MiB")


if __name__ == "__main__":
    sys.exit(main())
