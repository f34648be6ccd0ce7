"""docs/reproduction.md "Beyond the paper": one mark per method — accuracy at the budget (mean ± std over
seeds, from the report's CSV) against the floats each client uploads per round (from its runs) — so a
reader sees at a glance how much each message was compressed and what that bought at equal floats.

    .venv/bin/python benchmarks/beyond_plot.py runs/reproduction/beyond docs/reproduction/beyond.csv \
        --budget 10 --out docs/reproduction/beyond_marks --title "..."
"""
from __future__ import annotations

import argparse
import csv
import glob
import os
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from fl_lightning.figures import colour_of  # noqa: E402


def floats_per_round(runs: str, algorithm: str) -> float:
    """comm/upload_d after round 1 (floats per client per round, in d), the median over the seeds."""
    values = []
    for path in glob.glob(os.path.join(runs, f"*algorithm={algorithm}", "version_*", "metrics.csv")):
        with open(path) as f:
            first = next(row for row in csv.DictReader(f) if row.get("round") == "1.0")
        values.append(float(first["comm/upload_d"]))
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs")
    parser.add_argument("table", help="the CSV `fl-lightning report --out` wrote")
    parser.add_argument("--budget", type=int, default=10, help="the acc_at_<budget>d column")
    parser.add_argument("--out", required=True, help="output prefix (.png and .pdf)")
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    with open(args.table) as f:
        rows = list(csv.DictReader(f))
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    for row in rows:
        algorithm = row["group"].split("algorithm=")[-1].split(",")[0]
        x = floats_per_round(args.runs, algorithm)
        y, err = 100 * float(row[f"acc_at_{args.budget}d"]), 100 * float(row[f"acc_at_{args.budget}d_std"] or 0)
        marker = "s" if algorithm.startswith("fedbcgd") else "o"
        ax.errorbar(x, y, yerr=err, fmt=marker, color=colour_of(algorithm), capsize=3, markersize=7, label=algorithm)
        ax.annotate(algorithm, (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("floats uploaded per client per round (× d, log scale)")
    ax.set_ylabel(f"test accuracy at {args.budget} d (%)")
    ax.set_title(args.title or f"accuracy at {args.budget} d of floats uploaded per client")
    ax.grid(True, which="both", alpha=0.3)
    fig.text(0.01, 0.01, "squares: FedBCGD's block uploads; circles: full-model uploads; bars: ± std over seeds",
             fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    for ext in ("png", "pdf"):
        fig.savefig(f"{args.out}.{ext}", dpi=200)
    print(f"wrote {args.out}.png and .pdf")


if __name__ == "__main__":
    main()
