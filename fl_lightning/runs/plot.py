"""The picture every ``fit`` leaves in its run directory: accuracy against floats uploaded (PNG at
300 dpi and PDF; fl_lightning.runs.figures)."""
from __future__ import annotations

import os

import pytorch_lightning as pl

from fl_lightning.runs.figures import AXES, colour_of, finish
from fl_lightning.runs.files import run_dirs


def save_curve(path: str, points: list[tuple[float, float]], test_points: list[tuple[float, float]],
               title: str, val_is_test: bool, metric: str = "val/acc") -> None:
    """``points``: (comm/upload_d, ``metric``) per evaluation; ``test_points``: (comm/upload_d, test/acc);
    ``path``: the .png (a .pdf is written beside it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    label = AXES.get(metric, metric) + (" (the test set)" if val_is_test else " (held-out training data)")
    if points:
        ax.plot(*zip(*points), marker="." if len(points) < 40 else None, color=colour_of(title), label=label)
    if test_points:
        ax.plot(*zip(*test_points), "s", color="black", label="test accuracy")
    ax.set(xlabel=AXES["comm/upload_d"], ylabel="accuracy" if metric.endswith("/acc") else metric, title=title)
    finish(fig, [ax], path[:-len(".png")] if path.endswith(".png") else path)
    plt.close(fig)


CURVE_FILE = "accuracy_vs_upload_d.png"  # every fit leaves it when it ends (report: the run finished)


def write_curve(trainer: pl.Trainer, curve: dict, title: str, val_is_test: bool, metric: str = "val/acc") -> None:
    """accuracy_vs_upload_d.png (and .pdf) in every run folder, from the round log's curve of ``metric``."""
    for run_dir in run_dirs(trainer):
        save_curve(os.path.join(run_dir, CURVE_FILE), curve["val"], curve["test"], title, val_is_test,
                   metric)
