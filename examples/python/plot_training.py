#!/usr/bin/env python3
"""One figure of train and validation loss of every variant in train_tp.py's JSON, and a markdown
table of final validation losses, the gap to bf16 NCCL, and the step times.

    python3 examples/python/plot_training.py training.json [more.json ...] \
        --png docs/img/training-loss.png --md training-table.md
"""
import argparse
import json

import numpy as np

NAMES = {"nccl": "bf16, NCCL", "echo:za4g128+ef": "Echo 4-bit g128 + error feedback",
         "echo:za4g128": "Echo 4-bit g128, no compensation", "echo:za8g128+ef": "Echo 8-bit g128 + error feedback"}


def label(spec):
    return NAMES.get(spec, spec)


def smooth(y, k):
    if len(y) < k or k < 2:
        return np.asarray(y)
    return np.convolve(y, np.ones(k) / k, mode="valid")


def table(d):
    v = d["variants"]
    base = v.get("nccl", {}).get("final_val")
    rows = ["| variant | final val loss | gap to bf16 | val loss, exact all-reduce | step time | tokens/s | all-reduce share |",
            "|---|---|---|---|---|---|---|"]
    for spec, r in v.items():
        gap = f"{100 * (r['final_val'] - base) / base:+.2f} %" if base else "-"
        share = f"{100 * r['allreduce_share']:.1f} %" if "allreduce_share" in r else "-"
        step = f"{r['step_ms']:.1f} ms" if "step_ms" in r else "-"
        tps = f"{r['tokens_per_s']:.0f}" if "tokens_per_s" in r else "-"
        rows.append(f"| {label(spec)} (`{spec}`) | {r['final_val']:.4f} | {gap} | {r['final_val_exact_allreduce']:.4f} "
                    f"| {step} | {tps} | {share} |")
    if base and "echo:za4g128+ef" in v:
        g = 100 * (v["echo:za4g128+ef"]["final_val"] - base) / base
        rows.append(f"\nGap of Echo 4-bit + error feedback to bf16: {g:+.2f} % "
                    f"({v['echo:za4g128+ef']['final_val'] - base:+.4f} in loss).")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="one or more JSON files of train_tp.py (variants merge, later wins)")
    ap.add_argument("--png", default="docs/img/training-loss.png")
    ap.add_argument("--md", default=None)
    ap.add_argument("--smooth", type=int, default=10, help="moving average over this many logged train losses")
    args = ap.parse_args()
    d = {"runs": [], "variants": {}}
    for path in args.json:
        part = json.load(open(path))
        d["runs"] += part.get("runs", [])
        d["variants"].update(part.get("variants", {}))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    for i, (spec, r) in enumerate(d["variants"].items()):
        c = f"C{i}"
        t = np.asarray(r["train"])
        k = min(args.smooth, len(t))
        a.plot(t[k - 1:, 0] if k > 1 else t[:, 0], smooth(t[:, 1], k), color=c, lw=1, label=label(spec))
        vv = np.asarray(r["val"])
        a.plot(vv[:, 0], vv[:, 1], "o--", color=c, ms=3, lw=0.8)
        b.plot(vv[:, 0], vv[:, 1], "o-", color=c, ms=3, label=label(spec))
    a.set(xlabel="step", ylabel="loss", title="train (line, smoothed) and validation (dots)")
    a.set_ylim(top=min(a.get_ylim()[1], 8))
    tail = [x[1] for r in d["variants"].values() for x in r["val"][len(r["val"]) // 2:]]
    if tail:
        b.set_ylim(min(tail) - 0.02, max(tail) + 0.05)
    b.set(xlabel="step", ylabel="validation loss", title="validation loss, second half")
    a.legend(fontsize=8)
    for ax in (a, b):
        ax.grid(alpha=0.3)
    run = d.get("runs", [{}])[-1]
    cfg = run.get("config", {})
    fig.suptitle(f"TP = 2 GPT, {cfg.get('n_layer')} layers x {cfg.get('d_model')}, "
                 f"{cfg.get('batch', 0) * cfg.get('seq_len', 0)} tokens/step, {run.get('device', '')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.png, dpi=120)
    md = table(d)
    print(md)
    if args.md:
        open(args.md, "w").write(md + "\n")
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
