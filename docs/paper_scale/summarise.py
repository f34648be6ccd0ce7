"""The table of docs/paper_scale/run.py's runs at equal upload budgets:
python docs/paper_scale/summarise.py [RUNS_DIR] [--budgets 10,50] (RUNS_DIR holds <algorithm>_seed<s>/[<label>/]
version_0/metrics.csv, e.g. OUT/rho0.1; default: the kept runs, docs/paper_scale/runs/rho0.1).

A run's accuracy at b d is val/acc at the first round whose upload per sampled client (comm/upload_d) reached
b d, the round model.eval_every_d evaluates (b a multiple of it); a run that stopped before b d, or was not
evaluated at that round, has none. Cells are mean ± sample std over the seeds that have one, "(n/N)" seeds."""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import ALGORITHMS, ARMS  # noqa: E402  (the grid's algorithms and arms, in the grid's order)

KEPT = Path(__file__).resolve().parent / "runs" / "rho0.1"


def curve(metrics: Path) -> list[dict]:
    """The rows of one run that close a round (they carry comm/upload_d)."""
    with open(metrics) as f:
        return [row for row in csv.DictReader(f) if row.get("comm/upload_d")]


def accuracy_at(rows: list[dict], budget: float) -> tuple[float, float] | None:
    """(val/acc, upload d) at the first round whose upload reached ``budget``; None if none or not evaluated."""
    for row in rows:
        if float(row["comm/upload_d"]) >= budget - 1e-9:
            return (float(row["val/acc"]), float(row["comm/upload_d"])) if row.get("val/acc") else None
    return None


def cell(found: list[tuple[float, float]], runs: int, budget: float) -> str:
    if not found:
        return f"— (0/{runs})"
    values = [acc for acc, _ in found]
    text = (f"{values[0]:.4f}" if len(values) == 1
            else f"{statistics.fmean(values):.4f} ± {statistics.stdev(values):.4f}")
    at = max(d for _, d in found)
    return text + (f" at {at:.1f} d" if at - budget > 0.05 else "") + f" ({len(values)}/{runs})"


def table(root: Path, budgets: list[float]) -> str:
    runs: dict[str, list[list[dict]]] = {}
    for metrics in sorted(root.glob("*_seed*/**/version_*/metrics.csv")):
        runs.setdefault(metrics.relative_to(root).parts[0].rsplit("_seed", 1)[0], []).append(curve(metrics))
    known = ALGORITHMS + tuple(ARMS)
    order = sorted(runs, key=lambda name: (known.index(name) if name in known else len(known), name))
    lines = ["| algorithm | seeds | upload reached (d) | " + " | ".join(f"val/acc at {b:g} d" for b in budgets) + " |",
             "|---|---|---|" + "---|" * len(budgets)]
    for name in order:
        curves = runs[name]
        reached = [float(rows[-1]["comm/upload_d"]) if rows else 0.0 for rows in curves]
        low, high = min(reached), max(reached)
        span = f"{low:.1f}" if high - low < 0.05 else f"{low:.1f}–{high:.1f}"
        cells = [cell([a for a in (accuracy_at(rows, b) for rows in curves) if a], len(curves), b) for b in budgets]
        lines.append(f"| {name} | {len(curves)} | {span} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="?", default=str(KEPT), help="a folder of <algorithm>_seed<s> runs")
    parser.add_argument("--budgets", default="10,50", help="upload budgets in d, comma-separated")
    args = parser.parse_args()
    print(table(Path(args.runs), [float(b) for b in args.budgets.split(",")]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
