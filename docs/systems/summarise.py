"""The issue-32 tables and figure from the runs of docs/systems/run_experiment.sh:

    python docs/systems/summarise.py OUT/<setting> --target ACC [--budget SECONDS] [--out PREFIX]

OUT/<setting> holds <mode>/<algorithm>,seed=<s>/[<label>/]version_0/metrics.csv (mode: wait, deadline, fedbuff). For each
mode and algorithm, mean ± sample std over the seeds: upload per client per round (d), simulated seconds per
round, time to target (first touch and sustained over 3 evaluations: fl_lightning.runs.report.floats_to_target,
the same rule as `fl-lightning report`), floats to target, accuracy at a simulated-time budget and at the end.
A run that never reaches the target counts as "not reached" (k/n reached). The figure: val/acc against
simulated time (top) and against floats uploaded per client (bottom), one panel per mode, seeds averaged.
"""
import argparse
import csv
import math
import statistics
from pathlib import Path

from fl_lightning.runs.report import floats_to_target

MODES = ("wait", "deadline", "fedbuff")
ALGORITHMS = ("fedavg", "fedavgm", "fedbcgd", "fedbcgd_plus", "fedpaq")


def curve(path: Path) -> list[dict]:
    """The rows with val/acc, every value a float."""
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if r.get("val/acc")]
    return [{k: float(v) for k, v in r.items() if v != ""} for r in rows]


def cell(values: list[float], digits: int = 0) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "not reached"
    text = f"{statistics.fmean(finite):.{digits}f}" + (f" ± {statistics.stdev(finite):.{digits}f}" if len(finite) > 1 else "")
    return text if len(finite) == len(values) else f"{text} ({len(finite)}/{len(values)} reached)"


def at_time(rows: list[dict], budget: float) -> float:
    within = [r for r in rows if r["time/sim_s"] <= budget]
    return within[-1]["val/acc"] if within and rows[-1]["time/sim_s"] >= budget else math.nan


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("setting", type=Path)
    parser.add_argument("--target", type=float, required=True)
    parser.add_argument("--budget", type=float, default=None,
                        help="simulated seconds (default: per mode, where its shortest run ended)")
    parser.add_argument("--out", default=None, help="figure prefix (default SETTING/summary)")
    options = parser.parse_args()
    runs = {(mode, algo): [curve(p) for p in sorted(options.setting.glob(f"{mode}/{algo},seed=*/**/version_0/metrics.csv"))]
            for mode in MODES for algo in ALGORITHMS}
    runs = {key: curves for key, curves in runs.items() if curves}
    budgets = {mode: options.budget or min(c[-1]["time/sim_s"] for (m, _), cs in runs.items() if m == mode for c in cs)
               for mode, _ in runs}
    print(f"target val/acc {options.target}; the accuracy at a budget: at the simulated seconds where the mode's "
          f"shortest run ended ({', '.join(f'{m} {b:.0f} s' for m, b in budgets.items())})\n")
    print("| mode | algorithm | seeds | upload / client / round (d) | sim s / round | time to target, first (s) "
          "| time to target, sustained (s) | floats to target, first (d) | acc at the mode's budget | final acc "
          "| sim s at end |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (mode, algo), curves in runs.items():
        budget = budgets[mode]
        first = [floats_to_target(c, options.target, 3, "time/sim_s")[0] for c in curves]
        sustained = [floats_to_target(c, options.target, 3, "time/sim_s")[1] for c in curves]
        floats = [floats_to_target(c, options.target, 3)[0] for c in curves]
        print("| " + " | ".join([
            mode, algo, str(len(curves)),
            cell([c[-1]["comm/upload_d"] / c[-1]["round"] for c in curves], 3),
            cell([c[-1]["time/sim_s"] / c[-1]["round"] for c in curves], 1),
            cell(first), cell(sustained), cell(floats, 2),
            cell([at_time(c, budget) for c in curves], 4), cell([c[-1]["val/acc"] for c in curves], 4),
            cell([c[-1]["time/sim_s"] for c in curves])]) + " |")
    figure(runs, options.setting, options.out or str(options.setting / "summary"))


def mean_curve(curves: list[dict], x: str) -> tuple[list[float], list[float]]:
    """Seeds averaged row by row (every seed evaluates at the same rounds)."""
    n = min(len(c) for c in curves)
    return ([statistics.fmean(c[i][x] for c in curves) for i in range(n)],
            [statistics.fmean(c[i]["val/acc"] for c in curves) for i in range(n)])


def figure(runs: dict, setting: Path, prefix: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fl_lightning.runs.figures import colour_of

    modes = [m for m in MODES if any(mode == m for mode, _ in runs)]
    fig, axes = plt.subplots(2, len(modes), figsize=(3.6 * len(modes), 5.6), squeeze=False, sharey=True)
    for col, mode in enumerate(modes):
        for (m, algo), curves in runs.items():
            if m != mode:
                continue
            for row, x in enumerate(("time/sim_s", "comm/upload_d")):
                xs, ys = mean_curve(curves, x)
                axes[row][col].plot([v / 3600 if row == 0 else v for v in xs], ys, label=algo, color=colour_of(algo),
                                    linewidth=1)
        axes[0][col].set(title=f"{setting.name}: {mode}", xlabel="simulated time (h)")
        axes[1][col].set(xlabel="floats uploaded per client (d)")
        axes[0][col].title.set_fontsize(8)
        for row in range(2):
            axes[row][col].grid(alpha=0.3)
    for row in range(2):
        axes[row][0].set_ylabel("val/acc (test set)")
    axes[1][0].legend(fontsize=7, frameon=False)  # the wait panel has every algorithm
    fig.tight_layout()
    fig.savefig(f"{prefix}.png", dpi=150)
    print(f"\nwrote {prefix}.png")


if __name__ == "__main__":
    main()
