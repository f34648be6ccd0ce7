"""The issue-31 table from the runs of docs/privacy/run.sh: python docs/privacy/summarise.py RUNS_DIR
(RUNS_DIR holds <algo>_eps<ε>_seed<s>/version_0/metrics.csv). Mean ± sample std over the seeds."""
import csv
import statistics
import sys
from pathlib import Path


def rows(path: Path) -> list[dict]:
    with open(path) as f:
        return [r for r in csv.DictReader(f) if r.get("round")]


def at(curve: list[dict], key: str, d: float) -> float:
    """key at the last logged round whose comm/upload_d ≤ d."""
    return float([r for r in curve if float(r["comm/upload_d"]) <= d + 1e-9][-1][key])


def cell(values: list[float], digits: int = 4) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.fmean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def main(root: Path) -> None:
    runs: dict[tuple[str, str], list[list[dict]]] = {}
    for path in sorted(root.glob("*_eps*_seed*/**/metrics.csv")):
        algo, rest = path.relative_to(root).parts[0].split("_eps")
        runs.setdefault((algo, rest.split("_seed")[0]), []).append(rows(path))
    print("| algorithm | target ε | seeds | rounds | z | ε at the end | upload (d) | test acc @ 8 d | test acc @ round 20 "
          "| final test acc | clipped fraction (last round) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (algo, eps), curves in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1] != "none", kv[0][1])):
        dp = eps != "none"
        print("| " + " | ".join([
            algo, eps if dp else "no DP", str(len(curves)), str(len(curves[0])),
            cell([float(c[-1]["privacy/noise_multiplier"]) for c in curves], 3) if dp else "—",
            cell([float(c[-1]["privacy/epsilon"]) for c in curves], 3) if dp else "—",
            cell([float(c[-1]["comm/upload_d"]) for c in curves], 2),
            cell([at(c, "val/acc", 8.0) for c in curves]),
            cell([float(c[19]["val/acc"]) for c in curves]) if len(curves[0]) >= 20 else "—",
            cell([float(c[-1]["val/acc"]) for c in curves]),
            cell([float(c[-1]["privacy/clipped_fraction"]) for c in curves], 2) if dp else "—"]) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
