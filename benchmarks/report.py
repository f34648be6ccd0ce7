"""Turns experiment runs into the tables and plots under docs/.

    python benchmarks/report.py runs/cifar10_lenet5 --target 0.40 --out docs/cifar10_lenet5

reads ``<runs>/<algorithm>/version_N/metrics.csv`` (the newest version of each algorithm)
and writes ``<out>.csv`` (one row per algorithm), ``<out>.md`` (the same as a Markdown
table) and ``<out>.png`` (val/acc — and train/objective when logged — against comm/upload_d).
"""
from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path


def read_run(folder: Path) -> list[dict]:
    versions = sorted(folder.glob("version_*"), key=lambda p: int(p.name.split("_")[1]))
    rows = list(csv.DictReader(open(versions[-1] / "metrics.csv")))
    return [{k: float(v) for k, v in row.items() if v != ""} for row in rows]


def summarise(name: str, rows: list[dict], target: float) -> dict:
    evaluated = [r for r in rows if "val/acc" in r]
    reached = next((r["comm/upload_d"] for r in evaluated if r["val/acc"] >= target), math.inf)
    summary = {"algorithm": name, "rounds": int(rows[-1]["round"]), "final_val_acc": evaluated[-1]["val/acc"],
               "best_val_acc": max(r["val/acc"] for r in evaluated), "upload_d_total": rows[-1]["comm/upload_d"],
               f"upload_d_to_{target:g}": reached}
    if "train/objective" in evaluated[-1]:
        summary["final_train_objective"] = evaluated[-1]["train/objective"]
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--target", type=float, required=True, help="common target accuracy")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    runs = {p.name: read_run(p) for p in sorted(args.runs.iterdir()) if p.is_dir()}
    summaries = [summarise(name, rows, args.target) for name, rows in runs.items()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    keys = list(summaries[0])
    with open(args.out.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(summaries)
    fmt = lambda v: f"{v:.4f}" if isinstance(v, float) and v < 10 else (f"{v:.1f}" if isinstance(v, float) else str(v))  # noqa: E731
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(fmt(s[k]) for k in keys) + " |" for s in summaries]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_objective = any("train/objective" in r for rows in runs.values() for r in rows)
    fig, axes = plt.subplots(1, 2 if has_objective else 1, figsize=(11 if has_objective else 6, 4), squeeze=False)
    for name, rows in runs.items():
        evaluated = [r for r in rows if "val/acc" in r]
        axes[0][0].plot([r["comm/upload_d"] for r in evaluated], [r["val/acc"] for r in evaluated], label=name)
        if has_objective:
            axes[0][1].plot([r["comm/upload_d"] for r in evaluated], [r["train/objective"] for r in evaluated],
                            label=name)
    axes[0][0].set(xlabel="comm/upload_d (mean floats uploaded per client / d)", ylabel="test accuracy",
                   title=args.title)
    axes[0][0].axhline(args.target, color="grey", lw=0.5, ls="--")
    if has_objective:
        axes[0][1].set(xlabel="comm/upload_d", ylabel="training objective f(x) + λ/2‖x‖²", yscale="log")
    for ax in axes[0]:
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out.with_suffix(".png"), dpi=110)


if __name__ == "__main__":
    main()
