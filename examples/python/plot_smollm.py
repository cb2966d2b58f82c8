#!/usr/bin/env python3
"""The perplexity table (a row per all-reduce variant, its bits a value on the wire, a column per
TP size) and the depth plot (from the first file) of smollm_tp.py's JSON.

    python3 examples/python/plot_smollm.py smollm-tp2.json smollm-tp4.json --png docs/img/smollm-depth.png --md smollm.md
"""
import argparse
import json

from allreduce_backends import parse

def describe(spec):
    """A row's words for a spec: 'zero_aware 4-bit g128, rotated, clip 0.85, EF (int8), closed at 8 bits'."""
    backend, o = parse(spec)
    if backend == "nccl" or (backend == "echo" and o.get("quant") == "none"):
        return "exact (" + ("NCCL" if backend == "nccl" else "Echo's 16-bit path") + ")"
    words = [f"{o.get('quant', 'zero_aware')} {o.get('bits', 4)}-bit g{o.get('group_size', 128)}"]
    if o.get("rotate"):
        words.append("rotated")
    clip = o.get("clip", 1.0)
    if clip == "fit":
        words.append("clip searched per group")
    elif clip != 1.0:
        words.append(f"clip {clip:.2f}")
    if o.get("comp") == "error_feedback":
        words.append("EF" + (f" ({o['storage']})" if "storage" in o else ""))
    if o.get("close"):
        words.append(f"closed at {16 if o['close'] == 16 else 8} bits")
    if backend == "sim":
        words.append("(sim)")
    return ", ".join(words)


def bits_a_value(spec, calls):
    """Wire bits a value averaged over a pass of `calls` calls (the closing call's own at its width)."""
    backend, o = parse(spec)
    if backend == "nccl" or o.get("quant") == "none":
        return 16.0
    g = o.get("group_size", 128)
    b = o.get("bits", 4) + 32 / g
    if not o.get("close"):
        return b
    last = 16.0 if o["close"] == 16 else 8 + 32 / g
    return ((calls - 1) * b + last) / calls


def tables(runs):
    """One table: a row per spec, a perplexity column per run (TP = 2, 4, ...)."""
    heads, cols = [], []
    for d in runs:
        ppl = d["ppl"]
        base = ppl.get(d["config"].get("exact", "nccl"), {}).get("ppl")
        heads.append(f"TP = {d['config']['nproc']}: perplexity (vs exact)")
        cols.append({k: f"{v['ppl']:.4f} ({100 * (v['ppl'] / base - 1):+.2f} %)" if base else f"{v['ppl']:.4f}"
                     for k, v in ppl.items()})
    specs = list(dict.fromkeys(k for d in runs for k in d["ppl"]))
    calls = runs[0].get("calls_per_pass", 60)
    out = [", ".join(f"TP = {d['config']['nproc']}: {next(iter(d['ppl'].values()))['tokens']} tokens "
                     f"({d['config']['windows']} windows of {d['config']['window']} from token "
                     f"{d['config'].get('skip_tokens', 0)})" for d in runs) + f"; {runs[0]['device']}, {runs[0]['date']}.",
           "", "| all-reduce | spec | bits a value | " + " | ".join(heads) + " |",
           "|---|---|---|" + "---|" * len(heads)]
    for spec in specs:
        out.append(f"| {describe(spec)} | `{spec}` | {bits_a_value(spec, calls):.2f} | " +
                   " | ".join(c.get(spec, "-") for c in cols) + " |")
    for d in runs:
        if "reference_check" in d:
            rc = d["reference_check"]
            out.append("\nEcho on the GPU against the host reference (the same model, the all-reduce swapped for "
                       "`echo_allreduce.reference` through an all-gather):\n")
            for k, v in rc.items():
                if isinstance(v, dict):
                    out.append(f"- `{k}`: perplexity {v['ppl']:.10f} on {v['tokens']} tokens")
            out.append(f"- per-window NLL bit-identical: {rc.get('bit_identical_nll')}")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="smollm_tp.py eval results, one a TP size")
    ap.add_argument("--png", default="docs/img/smollm-depth.png")
    ap.add_argument("--md", default=None)
    args = ap.parse_args()
    runs = [json.load(open(p)) for p in args.json]
    md = tables(runs)
    d = runs[0]
    print(md)
    if args.md:
        open(args.md, "w").write(md + "\n")
    if d.get("depth"):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for i, (spec, e) in enumerate(d["depth"].items()):
            ax.semilogy(range(1, len(e) + 1), e, "o-", color=f"C{i}", ms=3, label=describe(spec))
        ax.set(xlabel="layer", ylabel="relative RMS error of the residual stream",
               title=f"SmolLM2-135M, TP = 2, against the exact bf16 all-reduce ({d['device']})")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
