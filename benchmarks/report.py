"""Turns experiment runs into the tables and plots under docs/.

    python benchmarks/report.py runs/cifar10_lenet5 --target 0.40 --out docs/cifar10_lenet5

reads ``<runs>/<algorithm>/version_N/metrics.csv`` (the newest version of each algorithm)
and writes ``<out>.csv`` (one row per algorithm), ``<out>.md`` (the same as a Markdown
table) and ``<out>.png`` (val/acc — and train/objective when logged — against comm/upload_d).
``--at-d 10,25,50`` adds val/acc (and train/objective) at those budgets: the last evaluation
with comm/upload_d ≤ the budget (— for a run that stopped before it). A run that uploads nothing (centralised SGD) has no budget
columns and is drawn as a horizontal line at its final value.
"""
from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path


def read_run(folder: Path) -> list[dict]:
    """One curve from all version_N/ of a run (a resumed run writes a new version): rows by round,
    a later version's row replacing an earlier one's."""
    versions = sorted(folder.glob("version_*"), key=lambda p: int(p.name.split("_")[1]))
    by_round = {}
    for version in versions:
        for row in csv.DictReader(open(version / "metrics.csv")):
            values = {k: float(v) for k, v in row.items() if v != ""}
            if "round" in values:
                by_round[values["round"]] = values
    return [by_round[r] for r in sorted(by_round)]


def at_budget(evaluated: list[dict], budget: float, key: str) -> float:
    """``key`` at the last evaluation within ``budget``; — (nan) when the run never got that far."""
    within = [r for r in evaluated if r["comm/upload_d"] <= budget + 1e-9]
    reached = evaluated[-1]["comm/upload_d"] >= budget - 1e-6
    return within[-1][key] if within and reached else math.nan


def summarise(name: str, rows: list[dict], target: float, budgets: list[float]) -> dict:
    evaluated = [r for r in rows if "val/acc" in r]
    uploads = evaluated[-1]["comm/upload_d"] > 0
    reached = next((r["comm/upload_d"] for r in evaluated if r["val/acc"] >= target), math.inf) if uploads else math.nan
    summary = {"algorithm": name, "rounds": int(rows[-1]["round"]), "final_val_acc": evaluated[-1]["val/acc"],
               "best_val_acc": max(r["val/acc"] for r in evaluated), "upload_d_total": rows[-1]["comm/upload_d"],
               f"upload_d_to_{target:g}": reached}
    objective = "train/objective" in evaluated[-1]
    for budget in budgets:
        summary[f"acc_at_{budget:g}d"] = at_budget(evaluated, budget, "val/acc")
        if objective:
            summary[f"objective_at_{budget:g}d"] = at_budget(evaluated, budget, "train/objective")
    if objective:
        summary["final_train_objective"] = evaluated[-1]["train/objective"]
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--target", type=float, required=True, help="common target accuracy")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--title", default="")
    parser.add_argument("--at-d", default="", help="comma-separated budgets in d, e.g. 10,25,50,100")
    parser.add_argument("--columns", default="", help="columns of the Markdown table (default: all; the CSV has all)")
    args = parser.parse_args()
    budgets = [float(b) for b in args.at_d.split(",") if b]
    runs = {p.name: read_run(p) for p in sorted(args.runs.iterdir()) if p.is_dir()}
    summaries = [summarise(name, rows, args.target, budgets) for name, rows in runs.items()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    keys = list(summaries[0])
    with open(args.out.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(summaries)
    def fmt(v):
        if isinstance(v, float) and math.isnan(v):
            return "—"
        return f"{v:.4f}" if isinstance(v, float) and v < 10 else (f"{v:.1f}" if isinstance(v, float) else str(v))

    shown = [k for k in args.columns.split(",") if k] or keys
    lines = ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    lines += ["| " + " | ".join(fmt(s.get(k, math.nan)) for k in shown) + " |" for s in summaries]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_objective = any("train/objective" in r for rows in runs.values() for r in rows)
    fig, axes = plt.subplots(1, 2 if has_objective else 1, figsize=(11 if has_objective else 6, 4), squeeze=False)
    for index, (name, rows) in enumerate(runs.items()):
        evaluated = [r for r in rows if "val/acc" in r]
        keys = ["val/acc"] + (["train/objective"] if has_objective else [])
        style = ["-", "--", ":"][index // 10 % 3]  # ten colours, then the next line style
        for ax, key in zip(axes[0], keys):
            if evaluated[-1]["comm/upload_d"] > 0:
                ax.plot([r["comm/upload_d"] for r in evaluated], [r[key] for r in evaluated], style, label=name, lw=1.2)
            else:  # nothing uploaded: its final value as a reference line
                ax.axhline(evaluated[-1][key], color="black", lw=1, ls=":", label=f"{name} (final, no upload)")
    axes[0][0].set(xlabel="comm/upload_d (mean floats uploaded per client / d)",
                   ylabel="val/acc (test set: val_fraction 0)",
                   title=args.title)
    axes[0][0].axhline(args.target, color="grey", lw=0.5, ls="--")
    if has_objective:
        axes[0][1].set(xlabel="comm/upload_d", ylabel="training objective f(x) + λ/2‖x‖²", yscale="log")
    for ax in axes[0]:
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out.with_suffix(".png"), dpi=110)


if __name__ == "__main__":
    main()
