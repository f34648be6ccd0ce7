"""docs/reproduction.md "Beyond the paper": one mark per method — accuracy at the budget (mean ± std over
seeds, from the report's CSV) against the floats each client uploads per round (from its runs) — so a
reader sees at a glance how much each message was compressed and what that bought at equal floats.

    .venv/bin/python benchmarks/beyond_plot.py runs/reproduction/beyond docs/reproduction/beyond.csv \
        --budget 10 --out docs/reproduction/beyond_marks --title "..."

``--final``: for runs stopped by a round limit before the budget (CIFAR-10: 40 rounds), each mark is
the final accuracy against the floats that method uploaded per client by then (both mean ± std).
"""
from __future__ import annotations

import argparse
import csv
import math
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from fl_lightning.runs.figures import colour_of  # noqa: E402
from fl_lightning.runs.report import find_runs, read_curve  # noqa: E402


def uploads(runs: dict[Path, list[Path]], algorithm: str) -> list[tuple[float, float]]:
    """(comm/upload_d after round 1, after the last round) of each seed's run — a resumed run's pieces joined,
    as ``report`` joins them: floats per client per round, and by the end, in d."""
    pairs = []
    for run, versions in runs.items():
        if run.name.endswith(f"algorithm={algorithm}"):
            curve = [row["comm/upload_d"] for row in read_curve(versions) if "comm/upload_d" in row]
            pairs.append((curve[0], curve[-1]))
    return pairs


def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def number(text: str) -> float:
    return float(text) if text not in ("", "nan") else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs")
    parser.add_argument("table", help="the CSV `fl-lightning report --out` wrote")
    parser.add_argument("--budget", type=int, default=10, help="the acc_at_<budget>d column")
    parser.add_argument("--out", required=True, help="output prefix (.png and .pdf)")
    parser.add_argument("--title", default="")
    parser.add_argument("--final", action="store_true", help="final accuracy against floats uploaded by the end")
    args = parser.parse_args()
    with open(args.table) as f:
        rows = list(csv.DictReader(f))
    runs = find_runs([Path(args.runs)])[0]
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    placed: list[tuple[float, float]] = []  # marks labelled so far: a label near one moves down a line
    for row in rows:
        algorithm = row["group"].split("algorithm=")[-1].split(",")[0]
        marker = "s" if algorithm.startswith("fedbcgd") else "o"
        per_round, at_end = zip(*uploads(runs, algorithm))
        if args.final:
            (x, x_err), column = mean_std(list(at_end)), "final_val_acc"
        else:
            x, x_err, column = statistics.median(per_round), 0.0, f"acc_at_{args.budget}d"
        y, err = 100 * float(row[column]), 100 * number(row[f"{column}_std"])
        ax.errorbar(x, y, xerr=x_err or None, yerr=err, fmt=marker, color=colour_of(algorithm), capsize=3,
                    markersize=7, label=algorithm)
        crowded = sum(abs(math.log10(x / px)) < 0.12 and abs(y - py) < 3 for px, py in placed)
        ax.annotate(algorithm, (x, y), textcoords="offset points", xytext=(6, 4 - 11 * crowded), fontsize=8)
        placed.append((x, y))
    ax.set_xscale("log")
    ax.set_xlabel("floats uploaded per client by the end (× d, log scale)" if args.final
                  else "floats uploaded per client per round (× d, log scale)")
    ax.set_ylabel("final test accuracy (%)" if args.final else f"test accuracy at {args.budget} d (%)")
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
