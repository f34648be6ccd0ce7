"""docs/reproduction.md "Learning rates searched on CIFAR-10": the lr search's grid and the lr chosen
per algorithm. Score: the mean val/acc of the last three evaluations within the budget (one seed;
the last three rather than the final one, because a single evaluation swings by a few points from
round to round). The paper searched lr ∈ {0.01, 0.03, 0.05, 0.1, 0.2, 0.3} per algorithm and kept the best.

    .venv/bin/python benchmarks/lr_choice.py docs/runs/cifar_lr                    # the table
    .venv/bin/python benchmarks/lr_choice.py docs/runs/cifar_lr --chosen fedbcgd   # one lr (reproduce.sh's own_lr)
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from fl_lightning.runs.report import find_runs, read_curve


def score(versions: list[Path], last: int) -> float:
    accuracy = [row["val/acc"] for row in read_curve(versions) if "val/acc" in row]
    return statistics.fmean(accuracy[-last:])


def best_lr(by_lr: dict[float, float]) -> float:
    """The lr of the highest score; of equal scores, the smallest lr."""
    return max(sorted(by_lr), key=by_lr.get)


SEARCHED = "0.01,0.03,0.05,0.1,0.2"  # the search's grid: reproduce.sh's cifar_lr runs exactly these


def refuse(message: str) -> None:
    print(f"lr_choice: {message}", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", help="the kept lr search, one folder per algorithm=NAME,lr=VALUE")
    parser.add_argument("--last", type=int, default=3, help="evaluations averaged")
    parser.add_argument("--grid", default=SEARCHED, help=f"the lrs searched, comma-separated (default {SEARCHED})")
    parser.add_argument("--chosen", metavar="ALGORITHM", help="print only the lr chosen for ALGORITHM; refused "
                        "while its search is not complete (every lr of --grid kept)")
    args = parser.parse_args()
    try:
        searched = sorted(float(lr) for lr in args.grid.split(","))
    except ValueError:
        refuse(f"--grid {args.grid}: give the lrs as numbers separated by commas, e.g. {SEARCHED}")
    grid: dict[str, dict[float, float]] = {}
    for run, versions in find_runs([Path(args.runs)])[0].items():
        settings = dict(part.split("=", 1) for part in run.name.split(","))
        grid.setdefault(settings["algorithm"], {})[float(settings["lr"])] = score(versions, args.last)
    if args.chosen is not None:
        if args.chosen not in grid:
            refuse(f"--chosen {args.chosen}: no lr search kept for it in {args.runs} (kept: "
                   f"{', '.join(sorted(grid)) or 'none'}); run benchmarks/reproduce.sh cifar_lr")
        missing = [f"{lr:g}" for lr in searched if lr not in grid[args.chosen]]
        if missing:
            refuse(f"--chosen {args.chosen}: lr {', '.join(missing)} not kept in {args.runs} yet; "
                   "finish the search first (benchmarks/reproduce.sh cifar_lr)")
        print(f"{best_lr(grid[args.chosen]):g}")
        return
    lrs = sorted(set(searched) | {lr for by_lr in grid.values() for lr in by_lr})
    print(f"mean val/acc (%) of the last {args.last} evaluations; bold: the best so far; chosen lr: once every "
          f"lr of {args.grid} is kept")
    print("| algorithm | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " | chosen lr |")
    print("| --- |" + " --- |" * (len(lrs) + 1))
    for algorithm, by_lr in sorted(grid.items()):
        best = best_lr(by_lr)
        cells = [("—" if lr not in by_lr else f"**{100 * by_lr[lr]:.1f}**" if lr == best else f"{100 * by_lr[lr]:.1f}")
                 for lr in lrs]
        chosen = f"{best:g}" if all(lr in by_lr for lr in searched) else "— (unfinished)"
        print(f"| {algorithm} | " + " | ".join(cells) + f" | {chosen} |")


if __name__ == "__main__":
    main()
