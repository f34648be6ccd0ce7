"""The table of run_scaled.py's runs (markdown, to stdout): per partition and method, at equal rounds (the last)
and at equal floats (pval at FedBCGD-personal's total floats), beside the label prior and Local.

  python docs/personalization/summarise_scaled.py OUT

Gain = pval/acc_mean − the better of Local and the label prior (same seed), mean ± sample std over seeds.
"""
from __future__ import annotations

import csv
import json
import math
import statistics
import sys
from pathlib import Path

import yaml

from fl_lightning.runs.baselines import prior_of_config

ORDER = ["fedavg", "local", "fedavg_ft", "fedbn", "fedper", "fedrep", "ditto", "apfl", "fedbcgd_personal"]


def cell(values, digits=3):
    values = [v for v in values if v == v]
    if not values:
        return "–"
    if len(values) < 2:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.fmean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def read(run: Path) -> list[dict]:
    with open(run / "metrics.csv") as f:
        return [{k: float(v) for k, v in r.items() if k and v not in ("", None)} for r in csv.DictReader(f)]


def pval_at(rows: list[dict], budget: float) -> float:
    """pval/acc_mean at the last evaluation within ``budget`` floats (d); nan if none."""
    within = [r for r in rows if "pval/acc_mean" in r and r["comm/upload_d"] <= budget + 1e-6]
    return within[-1]["pval/acc_mean"] if within else math.nan


def main(out: Path) -> None:
    scale = json.loads((out / "scale.json").read_text()) if (out / "scale.json").exists() else {}
    chosen = json.loads((out / "chosen.json").read_text()) if (out / "chosen.json").exists() else {}
    print(f"Scale: **{scale.get('scale', '?')}**, {scale.get('rounds', '?')} rounds. Made by `{scale.get('command', '?')}`"
          f" then `python docs/personalization/summarise_scaled.py {out}`.\n")
    print("| partition | algorithm | hyper-parameter | seeds | pval mean (equal rounds) | pval p10 | pval at FedBCGD-p's "
          "floats | val/acc (global) | upload (d) | label prior mean (p10) | Local | gain over max(Local, prior) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for part_dir in sorted(p for p in (out / "runs").iterdir() if p.is_dir()):
        part, runs = part_dir.name, {}
        for run in part_dir.iterdir():
            alg, seed = run.name.split(",")[0], int(run.name.rsplit("seed=", 1)[1])
            version = run / "version_0" if (run / "version_0").exists() else run
            if not (version / "metrics.csv").exists():  # still running, or failed before its first row
                continue
            rows = read(version)
            if any("pval/acc_mean" in r for r in rows):
                runs.setdefault(alg, {})[seed] = (rows, version)
        priors = {}
        for seed in {s for by_seed in runs.values() for s in by_seed}:
            rows, version = next(by_seed[seed] for by_seed in runs.values() if seed in by_seed)
            priors[seed] = prior_of_config(yaml.safe_load((version / "config.yaml").read_text()))
        local = {s: [r for r in rows if "pval/acc_mean" in r][-1]["pval/acc_mean"]
                 for s, (rows, _) in runs.get("local", {}).items()}
        budget = statistics.fmean(rows[-1]["comm/upload_d"] for rows, _ in runs.get("fedbcgd_personal", {}).values()) \
            if "fedbcgd_personal" in runs else math.inf
        for alg in ORDER:
            if alg not in runs:
                continue
            seeds = sorted(runs[alg])
            last = {s: [r for r in runs[alg][s][0] if "pval/acc_mean" in r][-1] for s in seeds}
            vals = [[r["val/acc"] for r in runs[alg][s][0] if "val/acc" in r] for s in seeds]
            gain = [last[s]["pval/acc_mean"] - max(priors[s]["acc_mean"], local.get(s, -math.inf)) for s in seeds]
            hp = chosen.get(f"{part}/{alg}")
            print(f"| {part} | {alg} | {f'{hp[0]} = {hp[1]}' if hp else '—'} | {len(seeds)} | "
                  f"{cell([last[s]['pval/acc_mean'] for s in seeds])} | {cell([last[s]['pval/acc_p10'] for s in seeds])} | "
                  f"{cell([pval_at(runs[alg][s][0], budget) for s in seeds])} | "
                  f"{cell([v[-1] if v else math.nan for v in vals])} | "
                  f"{cell([runs[alg][s][0][-1]['comm/upload_d'] for s in seeds], 2)} | "
                  f"{cell([priors[s]['acc_mean'] for s in seeds])} ({cell([priors[s]['acc_p10'] for s in seeds])}) | "
                  f"{cell([local[s] for s in seeds if s in local])} | {cell(gain)} |")
    print("\n(mean ± sample std over seeds; pval at FedBCGD-p's floats: each method's pval/acc_mean at the last "
          "per-client evaluation within FedBCGD-personal's total upload, – if it had none that early)")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
