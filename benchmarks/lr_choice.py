"""docs/reproduction.md "Learning rates searched": the lr search's grid (final accuracy of each
algorithm at each lr, from the table ``fl-lightning report --label dir`` wrote) and the lr chosen per
algorithm — the one with the highest final accuracy at the search's budget (the paper searched
lr ∈ {0.01, 0.03, 0.05, 0.1, 0.2, 0.3} per algorithm and kept the best).

    .venv/bin/python benchmarks/lr_choice.py docs/reproduction/cifar_lr.csv
"""
from __future__ import annotations

import argparse
import csv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", help="the CSV of `fl-lightning report DIR --label dir --out PREFIX`")
    parser.add_argument("--column", default="final_val_acc")
    args = parser.parse_args()
    grid: dict[str, dict[float, float]] = {}
    with open(args.table) as f:
        for row in csv.DictReader(f):
            settings = dict(part.split("=", 1) for part in row["group"].split(","))
            grid.setdefault(settings["algorithm"], {})[float(settings["lr"])] = float(row[args.column])
    lrs = sorted({lr for by_lr in grid.values() for lr in by_lr})
    print("| algorithm | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " | chosen lr |")
    print("| --- |" + " --- |" * (len(lrs) + 1))
    for algorithm, by_lr in grid.items():
        best = max(by_lr, key=by_lr.get)
        cells = [("—" if lr not in by_lr else f"**{100 * by_lr[lr]:.1f}**" if lr == best else f"{100 * by_lr[lr]:.1f}")
                 for lr in lrs]
        print(f"| {algorithm} | " + " | ".join(cells) + f" | {best:g} |")


if __name__ == "__main__":
    main()
