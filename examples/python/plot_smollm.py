#!/usr/bin/env python3
"""Markdown tables (perplexity per all-reduce variant beside the Echo paper's Table 8, greedy
generations) and the depth plot from smollm_tp.py's JSON.

    python3 examples/python/plot_smollm.py smollm-tp2.json --png docs/img/smollm-depth.png --md smollm-tp2.md
"""
import argparse
import json

from allreduce_backends import parse

PAPER = {("zero_aware", 4): 6.362, ("symmetric", 4): 6.568, ("naive_zero_point", 4): 7.296,
         ("zero_aware", 8): 6.070, ("symmetric", 8): 6.075, ("naive_zero_point", 8): 6.072}


def describe(spec):
    backend, o = parse(spec)
    if backend == "nccl":
        return "exact, NCCL " + ("fp32 messages" if o.get("dtype") == "f32" else "bf16"), None
    q = o.get("quant", "zero_aware")
    text = f"{q} {o.get('bits', 4)}-bit g{o.get('group_size', 128)}, " + \
        ("error feedback" if o.get("comp") == "error_feedback" else "no compensation")
    paper = PAPER.get((q, o.get("bits", 4))) if o.get("group_size", 128) == 128 else None
    return text, paper


def tables(d):
    ppl = d["ppl"]
    base = ppl.get("nccl", {}).get("ppl")
    out = [f"Perplexity on {next(iter(ppl.values()))['tokens']} tokens ({d['config']['windows']} windows of "
           f"{d['config']['window']}) of the corpus validation split, {d['device']}, {d['date']}.", "",
           "| all-reduce | spec | perplexity | vs exact bf16 | paper Table 8 (Llama-3-8B, P = 4, WikiText) |",
           "|---|---|---|---|---|"]
    for spec, r in ppl.items():
        text, paper = describe(spec)
        rel = f"{100 * (r['ppl'] / base - 1):+.2f} %" if base else "-"
        ran = r.get("ran_as", spec)
        if ran.split(":")[0] != spec.split(":")[0]:  # e.g. a 3-bit variant that ran through sim
            text += f" (ran as `{ran}`: not in Echo's compiled table)"
        out.append(f"| {text} | `{spec}` | {r['ppl']:.4f} | {rel} | {paper if paper else ''} |")
    four = {}
    for spec, r in ppl.items():
        backend, o = parse(spec)
        if backend != "nccl" and o.get("bits") == 4 and o.get("group_size") == 128:
            four.setdefault(o.get("comp"), {})[o["quant"]] = r["ppl"]
    for comp, by_q in four.items():
        if len(by_q) == 3:
            order = " < ".join(f"{q} {v:.3f}" for q, v in sorted(by_q.items(), key=lambda kv: kv[1]))
            out.append(f"\n4-bit g128, {comp.replace('_', ' ')}, here: {order}.")
    out.append("Paper (Table 8): zero_aware 6.362 < symmetric 6.568 < naive_zero_point 7.296.")
    if "reference_check" in d:
        rc = d["reference_check"]
        out.append("\nEcho on the GPUs against the host reference (the same model on the GPUs, only the all-reduce "
                   "swapped for `echo_allreduce.reference` through an all-gather):\n")
        for k, v in rc.items():
            if isinstance(v, dict):
                out.append(f"- `{k}`: perplexity {v['ppl']:.10f} on {v['tokens']} tokens")
        out.append(f"- per-window NLL bit-identical: {rc.get('bit_identical_nll')}")
    if d.get("generations"):
        out.append("\nGreedy generations (chat template, up to "
                   f"{d['config']['new_tokens']} new tokens):\n")
        prompts = next(iter(d["generations"].values())).keys()
        for p in prompts:
            out.append(f"**{p}**\n")
            for spec, g in d["generations"].items():
                out.append(f"- `{spec}`: {g[p].strip()!r}")
            out.append("")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json")
    ap.add_argument("--png", default="docs/img/smollm-depth.png")
    ap.add_argument("--md", default=None)
    args = ap.parse_args()
    d = json.load(open(args.json))
    md = tables(d)
    print(md)
    if args.md:
        open(args.md, "w").write(md + "\n")
    if d.get("depth"):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for i, (spec, e) in enumerate(d["depth"].items()):
            ef = spec.endswith("+ef")
            ax.semilogy(range(1, len(e) + 1), e, "o-" if ef else "s--", color=f"C{i // 2}", ms=3,
                        label=describe(spec)[0])
        ax.set(xlabel="layer", ylabel="relative RMS error of the residual stream",
               title=f"SmolLM2-135M, TP = 2, against the exact bf16 all-reduce ({d['device']})")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
