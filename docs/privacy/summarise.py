"""The table of docs/privacy/run.sh's runs: python docs/privacy/summarise.py RUNS_DIR (RUNS_DIR holds
<algo>_eps<ε>_seed<s>/[version_0/]metrics.csv and config.yaml). Mean ± sample std over the seeds.

"true ε" is recomputed by fl_lightning.privacy.accountant (the fixed accounting) from each run's z, rounds,
M, K, δ and sampling; "logged ε" is what the run wrote. They agree for runs made with accounting version 2;
for runs made before it (docs/privacy/runs) the logged ε under-reports. Clipped fraction and noise-to-signal
(noise std over the RMS of the clipped sum, per coordinate) are means over the run's rounds."""
import csv
import statistics
import sys
from pathlib import Path

import yaml

from fl_lightning.privacy import accountant


def rows(path: Path) -> list[dict]:
    with open(path) as f:
        return [r for r in csv.DictReader(f) if r.get("round")]


def cell(values: list[float], digits: int = 4) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.fmean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def true_epsilon(curve: list[dict], config: dict) -> float:
    privacy, last = config["model"]["privacy"], curve[-1]
    return accountant.epsilon(float(last["privacy/noise_multiplier"]), len(curve), config["model"]["clients_per_round"],
                              config["data"]["num_clients"], float(last["privacy/delta"]), privacy["sampling"],
                              privacy["accountant"])


def mean_of(curve: list[dict], key: str) -> float:
    values = [float(r[key]) for r in curve if r.get(key) not in (None, "")]
    return statistics.fmean(values) if values else float("nan")


def main(root: Path) -> None:
    runs: dict[tuple[str, str], list[tuple[list[dict], dict]]] = {}
    for path in sorted(root.glob("*_eps*_seed*/**/metrics.csv")):
        algo, rest = path.relative_to(root).parts[0].split("_eps")
        config = yaml.safe_load(next(p for p in (path.parent / "config.yaml", path.parent.parent / "config.yaml")
                                     if p.exists()).read_text())
        runs.setdefault((algo, rest.split("_seed")[0]), []).append((rows(path), config))
    acc = "test/acc" if all("test/acc" in c[-1] and c[-1]["test/acc"] for v in runs.values() for c, _ in v) else "val/acc"
    print(f"| algorithm | label | seeds | rounds | sampling | clip C | z | δ | logged ε | true ε | upload (d) | final {acc} "
          "| clipped fraction | noise-to-signal |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (algo, eps), members in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1] != "none", kv[0][1])):
        curves = [c for c, _ in members]
        dp = eps != "none"
        privacy = members[0][1]["model"]["privacy"] if dp else None
        print("| " + " | ".join([
            algo, f"ε {eps}" if dp else "no DP", str(len(curves)), str(len(curves[0])),
            privacy["sampling"] if dp else "—", f"{privacy['clip']:g}" if dp else "—",
            cell([float(c[-1]["privacy/noise_multiplier"]) for c in curves], 3) if dp else "—",
            f"{float(curves[0][-1]['privacy/delta']):.2g}" if dp else "—",
            cell([float(c[-1]["privacy/epsilon"]) for c in curves], 3) if dp else "—",
            cell([true_epsilon(c, config) for c, config in members], 3) if dp else "—",
            cell([float(c[-1]["comm/upload_d"]) for c in curves], 2),
            cell([float(c[-1][acc]) for c in curves]),
            cell([mean_of(c, "privacy/clipped_fraction") for c in curves], 2) if dp else "—",
            cell([mean_of(c, "privacy/noise_to_signal") for c in curves], 2)
            if dp and "privacy/noise_to_signal" in curves[0][-1] else "—"]) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
