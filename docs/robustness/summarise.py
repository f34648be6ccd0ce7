"""The verdict's table from the kept runs (docs/robustness/runs/<algorithm>-<aggregator>-<attack>-s<seed>/):
final test accuracy (mean ± std over seeds) per algorithm × aggregator (rows) and attack (columns), and each
run's floats uploaded. Writes docs/robustness/table.md.

    .venv/bin/python docs/robustness/summarise.py
"""
from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent


def final(path: Path) -> tuple[float, float]:
    """(last logged test/acc, comm/upload_d at the end)."""
    with open(path) as f:
        rows = list(csv.DictReader(f))
    acc = [float(r["test/acc"]) for r in rows if r.get("test/acc")]
    return acc[-1], float(rows[-1]["comm/upload_d"])


def main() -> None:
    cells, floats, attacks, seeds = defaultdict(list), {}, [], set()
    for run in sorted((HERE / "runs").glob("*/metrics.csv")):
        algorithm, aggregator, attack, seed = run.parent.name.rsplit("-", 3)
        acc, upload_d = final(run)
        cells[(algorithm, aggregator, attack)].append(acc)
        floats[algorithm] = upload_d
        seeds.add(seed)
        if attack not in attacks:
            attacks.append(attack)
    order = ["none"] + sorted(a for a in attacks if a != "none")
    rows = sorted({(alg, agg) for alg, agg, _ in cells}, key=lambda r: (r[0], ["mean", "median", "trimmed_mean",
                                                                               "krum", "centered_clip"].index(r[1])))
    lines = [f"Final test accuracy (%), {len(seeds)} seed(s); attack columns: malicious share in %. "
             f"Floats uploaded per client: " + ", ".join(f"{a} {d:.2f} d" for a, d in sorted(floats.items())) + ".",
             "", "| algorithm | aggregator | " + " | ".join(order) + " |", "| --- | --- |" + " --- |" * len(order)]
    for algorithm, aggregator in rows:
        values = []
        for attack in order:
            accs = cells.get((algorithm, aggregator, attack))
            if not accs:
                values.append("—")
            elif len(accs) == 1:
                values.append(f"{100 * accs[0]:.1f}")
            else:
                values.append(f"{100 * statistics.mean(accs):.1f} ± {100 * statistics.stdev(accs):.1f}")
        lines.append(f"| {algorithm} | {aggregator} | " + " | ".join(values) + " |")
    (HERE / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
