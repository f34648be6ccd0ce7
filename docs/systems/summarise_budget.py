"""The tables of run_budget.py's runs (markdown, to stdout): every arm at the same simulated-time budget B.

  python docs/systems/summarise_budget.py OUT

Per setting and profile, per mode and arm, mean ± sample std over seeds: upload per client per round (d),
simulated seconds per round, val/acc at B (the last evaluation at or before B), time to each target (first touch
and sustained over 3 evaluations, fl_lightning.runs.report.floats_to_target: report's rule) and floats to target
(first). A run that never reaches a target within B counts as not reached (k/n reached).
"""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from fl_lightning.runs.report import floats_to_target
from summarise import cell  # docs/systems/summarise.py, beside this script

TARGETS = {"cifar10_lenet5": (0.30, 0.35), "convex_mnist_logreg": (0.85,)}
MODES = ("wait", "deadline", "fedbuff")
ARMS = ("fedavg", "fedavgm", "fedbcgd", "fedbcgd_m0", "fedpaq", "fedbcgd_plus")


def curve(path: Path, budget: float) -> list[dict]:
    """The evaluated rows at or before the budget, every value a float."""
    with open(path) as f:
        rows = [{k: float(v) for k, v in r.items() if k and v not in ("", None)} for r in csv.DictReader(f)]
    return [r for r in rows if "val/acc" in r and r["time/sim_s"] <= budget + 1e-6]


def main(out: Path) -> None:
    scale = json.loads((out / "scale.json").read_text())
    print(f"Scale: **{scale['scale']}** (FedAvg wait-for-all rounds setting the budget: {scale['rounds']}). Made by "
          f"`python {scale['command']}` then `python docs/systems/summarise_budget.py {out}`.\n")
    for key, limit in scale["limits"].items():
        setting, profile = key.split("/")
        budget, targets = limit["budget_s"], TARGETS[setting]
        print(f"### {setting}, {profile}: budget B = {budget:.0f} simulated s, deadline D = {limit['deadline_s']:.1f} s\n")
        head = ["mode", "arm", "seeds", "upload / client / round (d)", "sim s / round", "val/acc at B"]
        for t in targets:
            head += [f"time to {t:g}, first (s)", f"time to {t:g}, sustained (s)", f"floats to {t:g}, first (d)"]
        print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
        for mode in MODES:
            for arm in ARMS:
                paths = sorted((out / setting / profile / mode).glob(f"{arm},seed=*/metrics.csv"))
                curves = [c for c in (curve(p, budget) for p in paths) if c]
                if not curves:
                    continue
                row = [mode, arm, str(len(curves)), cell([c[-1]["comm/upload_d"] / c[-1]["round"] for c in curves], 3),
                       cell([c[-1]["time/sim_s"] / c[-1]["round"] for c in curves], 1),
                       cell([c[-1]["val/acc"] for c in curves], 4)]
                for t in targets:
                    times = [floats_to_target(c, t, 3, "time/sim_s") for c in curves]
                    row += [cell([x[0] for x in times]), cell([x[1] for x in times]),
                            cell([floats_to_target(c, t, 3)[0] for c in curves], 2)]
                print("| " + " | ".join(row) + " |")
        print()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
