"""``report``'s histogram of per-client personalised accuracy: for each group of runs, every client's
accuracy of its own model on its own held-out data (``pval_clients.csv``, written with ``pval/*``) at the run's
last per-client evaluation, pooled over seeds; bins of 0.1. Written as ``<out>_pval_hist.png``/``.pdf``."""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Optional

BINS = 10  # [0, 0.1), [0.1, 0.2), …, [0.9, 1.0]


def last_accuracies(versions: list[Path]) -> list[float]:
    """The clients' accuracies at the newest round any version of the run wrote to pval_clients.csv."""
    rows = []
    for version in versions:
        path = version / "pval_clients.csv"
        if path.exists():
            with open(path, newline="") as f:
                rows += [(float(r["round"]), float(r["acc"])) for r in csv.DictReader(f)]
    if not rows:
        return []
    last = max(round_ for round_, _ in rows)
    return [acc for round_, acc in rows if round_ == last]


def counts(accuracies: list[float]) -> list[int]:
    """How many accuracies fall in each bin of width 1/BINS (1.0 in the last)."""
    out = [0] * BINS
    for acc in accuracies:
        out[min(int(acc * BINS), BINS - 1)] += 1
    return out


def write_histogram(groups: dict[str, list[list[Path]]], out: Path) -> Optional[dict[str, list[int]]]:
    """One panel per group with per-client accuracies; returns each group's bin counts (None: nothing logged)."""
    pooled = {label: [acc for versions in runs for acc in last_accuracies(versions)] for label, runs in groups.items()}
    pooled = {label: accs for label, accs in pooled.items() if accs}
    if not pooled:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fl_lightning.runs.figures import colour_of, finish

    fig, axes = plt.subplots(1, len(pooled), figsize=(2.6 * len(pooled) + 1, 2.8), squeeze=False, sharey=True)
    result = {}
    for ax, (label, accs) in zip(axes[0], pooled.items()):
        result[label] = counts(accs)
        ax.bar([(i + 0.5) / BINS for i in range(BINS)], result[label], width=0.9 / BINS, color=colour_of(label))
        ax.set(xlim=(0, 1), xlabel="client's own accuracy (pval)", title=f"{label}\n({len(accs)} clients)")
        ax.title.set_fontsize(7)
    axes[0][0].set_ylabel("clients")
    finish(fig, axes[0], f"{out}_pval_hist")
    plt.close(fig)
    return result
