"""The picture every ``fit`` leaves in its run directory: accuracy against floats uploaded."""
from __future__ import annotations

import os


def save_curve(path: str, points: list[tuple[float, float]], test_points: list[tuple[float, float]],
               title: str, val_is_test: bool) -> None:
    """``points``: (comm/upload_d, val/acc) per evaluation; ``test_points``: (comm/upload_d, test/acc)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    label = "val/acc (the test set: data.val_fraction = 0)" if val_is_test else "val/acc (held-out training data)"
    if points:
        ax.plot(*zip(*points), marker="." if len(points) < 40 else None, label=label)
    if test_points:
        ax.plot(*zip(*test_points), "s", color="black", label="test/acc (test set)")
    ax.set(xlabel="comm/upload_d (mean floats uploaded per client / d)", ylabel="accuracy", title=title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    partial = f"{path}.partial.png"
    fig.savefig(partial, dpi=100)
    plt.close(fig)
    os.replace(partial, path)
