"""How fl-lightning draws (the run's picture and ``report``'s): axis labels in words, one colour per
algorithm in every plot, the target labelled, the legend off the data (below the axes), print resolution (PNG at
300 dpi) and a PDF beside each PNG."""
from __future__ import annotations

import hashlib
import os
import re

from fl_lightning.algorithms import REGISTRY

AXES = {"comm/upload_d": "floats uploaded per client (× d)", "round": "communication round",
        "time/wall_s": "training wall time (s)", "time/sim_s": "simulated time (s)", "val/acc": "validation accuracy", "test/acc": "test accuracy",
        "train/objective": "training objective", "pval/acc_mean": "personalised accuracy (mean over clients)"}
X_AXES = {"upload_d": "comm/upload_d", "round": "round", "wall_time": "time/wall_s", "sim_time": "time/sim_s"}
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d",
           "#31a354", "#756bb1", "#a55194", "#e7969c", "#6baed6", "#000000"]


def algorithm_order() -> list[str]:
    """The registered algorithms in registration order (fl_lightning.algorithms): each one's colour."""
    return list(REGISTRY)


def algorithm_in(label: str) -> str:
    """The algorithm a group label names, as a registry name where it is one: ``algorithm=FedBCGDPlus,
    lr=0.1`` and ``fedbcgd_plus,seed=0`` → fedbcgd_plus."""
    match = re.search(r"algorithm=([\w.+]+)", label)
    name = (match.group(1) if match else re.split(r"[,\s]", label.strip())[0]).rsplit(".", 1)[-1]
    squashed = name.lower().replace("_", "")
    return next((known for known in algorithm_order() if known.replace("_", "") == squashed), name.lower())


def colour_of(label: str) -> str:
    name = algorithm_in(label)
    order = algorithm_order()
    if name in order[:len(PALETTE)]:
        return PALETTE[order.index(name)]
    return PALETTE[int(hashlib.sha1(name.encode()).hexdigest(), 16) % len(PALETTE)]


def finish(fig, axes, prefix: str) -> None:
    """Legend below the data, then ``prefix``.png (300 dpi) and ``prefix``.pdf, each written whole."""
    for ax in axes:
        entries = len(ax.get_legend_handles_labels()[0])
        if entries:  # below the x label, in columns when there are many
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), fontsize=7, frameon=False,
                      ncol=1 if entries <= 5 else 2 if entries <= 12 else 3)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    for suffix, dpi in ((".png", 300), (".pdf", None)):
        partial = f"{prefix}.partial{suffix}"
        fig.savefig(partial, dpi=dpi, bbox_inches="tight")
        os.replace(partial, f"{prefix}{suffix}")
