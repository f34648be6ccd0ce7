"""Makes docs/personalization/README.md's table from the runs' metrics.csv (final row of each run)."""
import csv
import statistics
import sys
from pathlib import Path

root = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/personalization/runs")
ORDER = ["fedavg", "fedavg_ft", "fedbn", "fedper", "fedrep", "ditto", "apfl", "fedbcgd", "fedbcgd_personal"]


def cell(values, digits=3):
    if len(values) < 2:
        return f"{values[0]:.{digits}f}" if values else "–"
    return f"{statistics.fmean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


print("| partition | algorithm | seeds | pval/acc_mean | pval/acc_p10 | val/acc (global model) | comm/upload_d |")
print("|---|---|---|---|---|---|---|")
for part in sorted(p.name for p in root.iterdir() if p.is_dir()):
    for alg in ORDER:
        finals = []
        for metrics in sorted(root.glob(f"{part}/{alg},seed=*/metrics.csv")):
            rows = [r for r in csv.DictReader(open(metrics))]
            if not any(r.get("pval/acc_mean") for r in rows):
                continue  # unfinished: pval/* comes with the last round
            last_pval = [r for r in rows if r.get("pval/acc_mean")][-1]
            vals = [float(r["val/acc"]) for r in rows if r.get("val/acc")] or [float("nan")]  # nan: never validated
            finals.append((float(last_pval["pval/acc_mean"]), float(last_pval["pval/acc_p10"]),
                           vals[-1], float(rows[-1]["comm/upload_d"])))
        if finals:
            cols = list(zip(*finals))
            print(f"| {part} | {alg} | {len(finals)} | {cell(cols[0])} | {cell(cols[1])} | {cell(cols[2])} | "
                  f"{cell(cols[3], 2)} |")
