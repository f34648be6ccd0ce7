"""The table of run_scaled.py's runs (markdown, to stdout): per partition and method, at equal rounds (the last)
and at equal floats (pval at FedBCGD-personal's total floats), beside the label prior and Local; then the search's
scores where OUT has a search. A method is shown with the value chosen.json picks; where that value has no
finished run in OUT, with the earlier value's runs, labelled so.

  python docs/personalization/summarise_scaled.py OUT

Gain = pval/acc_mean − the better of Local and the label prior (same seed), mean ± sample std over seeds. Local is
the Local run at chosen.json's epochs per round (Local at equal computation: docs/personalization.md) where OUT has
it. "Client epochs" is each method's local computation: the epochs a client trains over the fit, on average
(``client_epochs``).
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


def client_epochs(config: dict) -> str:
    """The epochs a client trains over the fit, on average: rounds × S/M × local epochs, plus FedRep's head epochs and
    Ditto's and APFL's personal epochs each time it is sampled, and FedAvg-FT's fine-tune epochs (on every client,
    from x^r) at each of its per-client evaluations — the last one's are behind the accuracy shown."""
    model, rounds = config["model"], config["trainer"]["max_epochs"]
    options = (model.get("algorithm") or {}).get("init_args") or {}
    sampled = rounds * model["clients_per_round"] / config["data"]["num_clients"]
    trained = f"{sampled * model['local_epochs']:g}"
    if "finetune_epochs" in options:
        evaluations = -(-rounds // (model.get("personal_eval_every") or rounds))  # every k rounds, and the last
        return f"{trained} + {evaluations} × {options['finetune_epochs']} fine-tune"
    if "head_epochs" in options:
        return f"{trained} + {sampled * options['head_epochs']:g} head"
    if "personal_epochs" in options:
        return f"{trained} + {sampled * options['personal_epochs']:g} personal"
    return trained


def pval_at(rows: list[dict], budget: float) -> float:
    """pval/acc_mean at the last evaluation within ``budget`` floats (d); nan if none."""
    within = [r for r in rows if "pval/acc_mean" in r and r["comm/upload_d"] <= budget + 1e-6]
    return within[-1]["pval/acc_mean"] if within else math.nan


def finished_runs(part_dir: Path) -> dict[str, dict[str, dict[int, tuple[list[dict], Path]]]]:
    """algorithm → setting ("head_epochs=5", "" for none) → seed → (rows, run folder), for the runs that ended."""
    runs: dict = {}
    for run in part_dir.iterdir():
        alg, *settings, seed = run.name.split(",")
        version = run / "version_0" if (run / "version_0").exists() else run
        if not (version / "metrics.csv").exists():
            continue
        rows = read(version)
        if any("test/acc" in r for r in rows) and any("pval/acc_mean" in r for r in rows):  # else still running
            runs.setdefault(alg, {}).setdefault(",".join(settings), {})[int(seed.split("=")[1])] = (rows, version)
    return runs


def main(out: Path) -> None:
    scale = json.loads((out / "scale.json").read_text()) if (out / "scale.json").exists() else {}
    chosen = json.loads((out / "chosen.json").read_text()) if (out / "chosen.json").exists() else {}
    rounds = scale.get("rounds", "?")
    if isinstance(rounds, dict):
        rounds = ", ".join(f"{count} on {part}" for part, count in rounds.items())
    print(f"Scale: **{scale.get('scale', '?')}**, rounds: {rounds}. Made by `{scale.get('command', '?')}`"
          f" then `python docs/personalization/summarise_scaled.py {out}`.\n")
    print("| partition | algorithm | hyper-parameter | seeds | pval mean (equal rounds) | pval p10 | pval at FedBCGD-p's "
          "floats | val/acc (global) | upload (d) | client epochs | label prior mean (p10) | Local | gain over "
          "max(Local, prior) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for part_dir in sorted(p for p in (out / "runs").iterdir() if p.is_dir()):
        part, runs, labels = part_dir.name, {}, {}
        for alg, by_setting in finished_runs(part_dir).items():
            hp = chosen.get(f"{part}/{alg}")
            setting = f"{hp[0]}={hp[1]}" if hp else ""
            if setting in by_setting:
                runs[alg], labels[alg] = by_setting[setting], f"{hp[0]} = {hp[1]}" if hp else "—"
            elif by_setting:  # the search's pick was not run at this scale: the earlier pick's runs, said so
                earlier = sorted(by_setting)[0]
                runs[alg] = by_setting[earlier]
                labels[alg] = (earlier.replace("=", " = ") or "—") + (f" (earlier pick; {hp[1]} not run here)"
                                                                         if hp and earlier else
                                                                         f" ({hp[1]} not run here)" if hp else "")
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
            print(f"| {part} | {alg} | {labels[alg]} | {len(seeds)} | "
                  f"{cell([last[s]['pval/acc_mean'] for s in seeds])} | {cell([last[s]['pval/acc_p10'] for s in seeds])} | "
                  f"{cell([pval_at(runs[alg][s][0], budget) for s in seeds])} | "
                  f"{cell([v[-1] if v else math.nan for v in vals])} | "
                  f"{cell([runs[alg][s][0][-1]['comm/upload_d'] for s in seeds], 2)} | "
                  f"{client_epochs(yaml.safe_load((runs[alg][seeds[0]][1] / 'config.yaml').read_text()))} | "
                  f"{cell([priors[s]['acc_mean'] for s in seeds])} ({cell([priors[s]['acc_p10'] for s in seeds])}) | "
                  f"{cell([local[s] for s in seeds if s in local])} | {cell(gain)} |")
    print("\n(mean ± sample std over seeds; pval at FedBCGD-p's floats: each method's pval/acc_mean at the last "
          "per-client evaluation within FedBCGD-personal's total upload, – if it had none that early)")
    search(out / "search", chosen)


def search(root: Path, chosen: dict) -> None:
    """The search's table: each searched value's final pval/acc_mean (chosen.json's pick in bold)."""
    if not root.is_dir():
        return
    print("\n| partition | algorithm | hyper-parameter | final pval/acc_mean of each searched value (seed 10) |")
    print("|---|---|---|---|")
    for part_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        scores: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for run in part_dir.iterdir():
            if not (run / "metrics.csv").exists():  # still running
                continue
            alg, setting = run.name.split(",")[:2]
            option, value = setting.split("=")
            rows = [r for r in read(run) if "pval/acc_mean" in r]
            if not rows:  # still running (a search fit evaluates pval/* once, at its end)
                continue
            scores.setdefault((alg, option), []).append((float(value), rows[-1]["pval/acc_mean"]))
        for (alg, option), points in sorted(scores.items(), key=lambda item: ORDER.index(item[0][0])):
            points.sort()
            pick = float(chosen.get(f"{part_dir.name}/{alg}", (option, math.nan))[1])
            cells = [f"**{v:g}: {score:.4f}**" if v == pick else f"{v:g}: {score:.4f}" for v, score in points]
            print(f"| {part_dir.name} | {alg} | {option} | {', '.join(cells)} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
