"""The votes-per-coordinate experiment's tables (docs/robustness.md): from the kept fits under runs/, search/ and
floor/ (docs/robustness/votes/run.py). The metric is the mean of a fit's last 5 val/acc evaluations (every 2 d, so
over 22–30 d); per cell mean ± sample std over seeds 0–2; a defence's drop under attack is clean minus attacked,
paired by seed; the interaction at equal votes is FedBCGD's drop minus FedAvg S = 5's, paired by seed, with a 95 %
t interval (t = 4.303 for 3 seeds). Attackers per group and round are counted from each fit's clients.csv.

    .venv/bin/python docs/robustness/votes/summarise.py > docs/robustness/votes/tables.md
"""
from __future__ import annotations

import csv
import statistics
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
T95 = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776}  # two-sided 95 % t quantiles by sample size (df = n − 1)
ARMS = ("fedavg_s5", "fedavg_s10", "fedbcgd_s10")
AGGREGATORS = ("mean", "median", "median_bucket2", "centered_clip")
ATTACKS = ("none", "sign_flip", "alie")


def last5(folder: Path) -> float:
    with open(folder / "metrics.csv") as f:
        accuracy = [float(r["val/acc"]) for r in csv.DictReader(f) if r.get("val/acc")]
    return statistics.fmean(accuracy[-5:])


def kept(folder: Path) -> dict[tuple[str, str, str, int], float]:
    """(arm, aggregator, attack, seed) → last-5 accuracy, for every finished fit under ``folder``."""
    out = {}
    for run in sorted(folder.glob("*/metrics.csv")):
        arm, rest = run.parent.name.split("-", 1)
        aggregator, attack, seed = rest.rsplit("-", 2)
        out[(arm, aggregator.split("-tau")[0], attack, int(seed[1:]))] = last5(run.parent)
    return out


def mean_std(values: list[float]) -> str:
    if not values:
        return "—"
    mean = f"{100 * statistics.fmean(values):.1f}"
    if len(values) == 1:
        return f"{mean} (1 seed)"
    return f"{mean} ± {100 * statistics.stdev(values):.1f}" + (f" ({len(values)})" if len(values) < 3 else "")


def interval(values: list[float]) -> str:
    if len(values) < 2:
        return "—"
    half = T95[len(values)] * statistics.stdev(values) / len(values) ** 0.5
    return f"{100 * statistics.fmean(values):+.1f} [{100 * (statistics.fmean(values) - half):+.1f}, " \
           f"{100 * (statistics.fmean(values) + half):+.1f}] (n={len(values)})"


def attackers_per_group(run: Path) -> Counter:
    """How many malicious uploads each group had, over rounds: {(group, k): rounds}."""
    counts: Counter = Counter()
    per_round: dict = {}
    with open(run / "clients.csv") as f:
        for row in csv.DictReader(f):
            for group in filter(None, row["uploaded"].split("+")):
                per_round.setdefault((row["round"], group), 0)
                per_round[(row["round"], group)] += int(row["malicious"])
    for (_, group), k in per_round.items():
        counts[(group, k)] += 1
    return counts


def main() -> None:
    runs = kept(HERE / "runs")
    print("Mean of the last 5 val/acc evaluations (%), mean ± std over seeds (n when fewer than 3).\n")
    print("| arm | aggregator | " + " | ".join(ATTACKS) + " | drop sign_flip | drop alie |")
    print("|---" * (4 + len(ATTACKS)) + "|")
    drops = {}
    for arm in ARMS:
        for aggregator in AGGREGATORS:
            cells = {a: [v for (r, g, at, s), v in runs.items() if (r, g, at) == (arm, aggregator, a)] for a in ATTACKS}
            row = [mean_std(cells[a]) for a in ATTACKS]
            for attack in ("sign_flip", "alie"):
                paired = {s: runs[(arm, aggregator, "none", s)] - runs[(arm, aggregator, attack, s)] for s in range(3)
                          if (arm, aggregator, "none", s) in runs and (arm, aggregator, attack, s) in runs}
                drops[(arm, aggregator, attack)] = paired
                row.append(mean_std(list(paired.values())))
            print(f"| {arm} | {aggregator} | " + " | ".join(row) + " |")
    print("\nInteraction at equal votes (5 per coordinate of a block): FedBCGD S=10's drop minus FedAvg S=5's, paired "
          "by seed, points, 95 % t interval; and FedAvg S=10's minus FedAvg S=5's (votes alone, no blocks).\n")
    print("| aggregator | attack | FedBCGD (5/block) − FedAvg S=5 | FedAvg S=10 − FedAvg S=5 |")
    print("|---|---|---|---|")
    for aggregator in AGGREGATORS:
        for attack in ("sign_flip", "alie"):
            base = drops.get(("fedavg_s5", aggregator, attack), {})
            out = []
            for arm in ("fedbcgd_s10", "fedavg_s10"):
                other = drops.get((arm, aggregator, attack), {})
                out.append(interval([other[s] - base[s] for s in sorted(set(base) & set(other))]))
            print(f"| {aggregator} | {attack} | {out[0]} | {out[1]} |")
    print("\nAttackers among a group's uploads, rounds counted over every attacked fit of the arm (clients.csv):\n")
    for arm in ARMS:
        counts: Counter = Counter()
        for run in sorted((HERE / "runs").glob(f"{arm}-*")):
            if "-none-" not in run.name and (run / "clients.csv").exists():
                counts += attackers_per_group(run)
        for group in sorted({g for g, _ in counts}):
            shown = ", ".join(f"{k}: {counts[(group, k)]}" for k in sorted(k for g, k in counts if g == group))
            print(f"- {arm}, group {group}: {shown}")
    floor = kept(HERE / "floor")
    if floor:
        print("\nNoise floor: the key cells (seed 0) under the other CPU kernels against the same fit on the native "
              "ones (points).\n")
        print("| cell | native | other kernels | difference |\n|---|---|---|---|")
        for (arm, aggregator, attack, seed), value in sorted(floor.items()):
            native = runs.get((arm, aggregator, attack, seed))
            if native is not None:
                print(f"| {arm} {aggregator} {attack} | {100 * native:.1f} | {100 * value:.1f} | "
                      f"{100 * (value - native):+.1f} |")


if __name__ == "__main__":
    main()
