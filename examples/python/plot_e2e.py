#!/usr/bin/env python3
"""Speedup of Echo over NCCL against background load (one panel per workload) and a markdown
table with the all-reduce's share of each step, from e2e_tp.py's JSON.

    python3 examples/python/plot_e2e.py e2e.json --png docs/img/e2e-speedup.png --md e2e-table.md
"""
import argparse
import json

PAPER = "Echo paper (A100, their setup): TTFT up to 1.16x and training step up to 1.09x idle; 1.44x and 1.38x under background traffic"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json")
    ap.add_argument("--png", default="docs/img/e2e-speedup.png")
    ap.add_argument("--md", default=None)
    args = ap.parse_args()
    d = json.load(open(args.json))
    rows = d["results"]
    specs = [s for s in rows[0]["times"] if s != "noop"]
    base, echos = specs[0], specs[1:]
    works = []
    for r in rows:
        if (r["workload"], r["size"]) not in works:
            works.append((r["workload"], r["size"]))

    def name(w):
        kind, size = w
        return {"prefill": f"prefill {size} tokens", "decode": f"decode, batch {size}",
                "train": f"train step, {d['config']['train_batch']} x {size}"}[kind]

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cols = min(4, len(works))
    nrow = -(-len(works) // cols)
    fig, axes = plt.subplots(nrow, cols, figsize=(3.6 * cols, 3.0 * nrow), squeeze=False)
    for ax, w in zip(axes.flat, works):
        rs = [r for r in rows if (r["workload"], r["size"]) == w]
        x = [100 * r["load"] for r in rs]
        for i, s in enumerate(echos):
            ax.plot(x, [r["times"][base]["median_ms"] / r["times"][s]["median_ms"] for r in rs], "o-", color=f"C{i}", label=s)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set(title=name(w), xlabel="background load (% duty)", ylabel=f"speedup over {base}")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(works):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"TP = 2, {d['config']['layers']} Llama-3-8B-shaped layers, {d['device']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.png, dpi=120)

    head = "| workload | load (measured) | " + " | ".join(f"{s} ms" for s in specs) + " | " + \
           " | ".join(f"{s} speedup" for s in echos) + " | " + " | ".join(f"AR share {s}" for s in specs) + " |"
    out = [head, "|" + "---|" * (2 + 2 * len(specs) + len(echos))]
    for r in rows:
        t = r["times"]
        noop = t["noop"]["median_ms"]
        meas = r.get("background", {}).get("measured_duty", 0.0)
        out.append(f"| {name((r['workload'], r['size']))} | {100 * r['load']:.0f} % ({100 * meas:.0f} %) | "
                   + " | ".join(f"{t[s]['median_ms']:.3f}" for s in specs) + " | "
                   + " | ".join(f"{t[base]['median_ms'] / t[s]['median_ms']:.3f}x" for s in echos) + " | "
                   + " | ".join(f"{100 * max(0.0, 1 - noop / t[s]['median_ms']):.0f} %" for s in specs) + " |")
    out.append(f"\nAR share = 1 - (step with the all-reduce removed) / (step). {PAPER}.")
    md = "\n".join(out)
    print(md)
    if args.md:
        open(args.md, "w").write(md + "\n")
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
