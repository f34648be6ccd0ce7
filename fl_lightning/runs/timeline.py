"""The clients' time line of a simulated run: ``timeline.csv`` in the run folder, one row per
client per round (fl_lightning.systems.clock.TIMELINE_COLUMNS), and its plot for one round.

    fl-lightning timeline RUN_DIR [--round R] [--out PREFIX]     → PREFIX.png/.pdf (default RUN_DIR/timeline_round_R)

Each client is a bar from its start: download, local compute, upload and latency, in simulated seconds;
stragglers (finished after the round had what it needed) are hatched, dropped clients grey; the dashed line
is the round's end. Under FedBuff a "round" is a server step and its bars are the K arrivals it aggregated
(each from its own start, often before the previous step).
"""
from __future__ import annotations

import argparse
import csv
import os
from pathlib import Path

from fl_lightning.errors import ConfigError
from fl_lightning.systems.clock import TIMELINE_FILE as FILE
SEGMENTS = (("download_s", "download", "#4C72B0"), ("compute_s", "local compute", "#DD8452"),
            ("upload_s", "upload", "#C44E52"), ("latency_s", "latency", "#8C8C8C"))


def read_round(run_dir: Path, round_: int | None) -> tuple[int, list[dict]]:
    """(round, its rows in file order): ``round_`` None takes the last round in the file."""
    path = run_dir / FILE
    if not path.is_file():
        raise ConfigError("timeline", f"{path}: no such file; timeline.csv is written by runs with model.system")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    rounds = sorted({int(r["round"]) for r in rows})
    if not rounds:
        raise ConfigError("timeline", f"{path} has no rows yet")
    round_ = rounds[-1] if round_ is None else round_
    if round_ not in rounds:
        raise ConfigError("timeline --round", f"{round_} is not in {path}: it has rounds {rounds[0]}..{rounds[-1]}")
    return round_, [r for r in rows if int(r["round"]) == round_]


def plot_round(run_dir: Path, round_: int | None, out: str | None) -> str:
    """Draws one round's bars; returns the output prefix."""
    round_, rows = read_round(run_dir, round_)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig, ax = plt.subplots(figsize=(7, 0.32 * len(rows) + 1.6))
    for y, row in enumerate(rows):
        left, status = float(row["start_s"]), row["status"]
        for key, label, colour in SEGMENTS:
            width = float(row[key])
            ax.barh(y, width, left=left, height=0.7, color="#BBBBBB" if status == "dropped" else colour,
                    hatch="///" if status == "straggler" else None, edgecolor="white", linewidth=0.3)
            left += width
    end = float(rows[0]["round_end_s"])
    ax.axvline(end, color="black", linestyle="--", linewidth=0.8)
    legend = [Patch(color=colour, label=label) for _, label, colour in SEGMENTS]
    legend += [Patch(facecolor="#DDDDDD", hatch="///", edgecolor="white", label="straggler (not aggregated)"),
               Patch(color="#BBBBBB", label="dropped"), Line2D([], [], color="black", linestyle="--", label="round ends")]
    ax.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, -0.18), fontsize=7, frameon=False, ncol=4)
    ax.set_yticks(range(len(rows)), [f"client {r['client_id']} ({r['status']})" for r in rows], fontsize=6)
    ax.invert_yaxis()
    ax.set(xlabel="simulated time (s)", title=f"{run_dir.parent.name}/{run_dir.name}: round {round_}")
    ax.title.set_fontsize(7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    prefix = out or str(run_dir / f"timeline_round_{round_}")
    for suffix, dpi in ((".png", 200), (".pdf", None)):
        fig.savefig(f"{prefix}.partial{suffix}", dpi=dpi, bbox_inches="tight")
        os.replace(f"{prefix}.partial{suffix}", f"{prefix}{suffix}")
    plt.close(fig)
    return prefix


def main(args: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fl-lightning timeline", description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run folder with timeline.csv (a fit with model.system)")
    parser.add_argument("--round", type=int, default=None, help="the round (1-based) to draw; default the last")
    parser.add_argument("--out", default=None, help="output prefix (.png, .pdf); default RUN/timeline_round_R")
    options = parser.parse_args(args)
    prefix = plot_round(options.run, options.round, options.out)
    print(f"wrote {prefix}.png and {prefix}.pdf")
    return 0
