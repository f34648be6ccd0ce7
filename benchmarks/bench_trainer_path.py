"""The per-round cost of training clients in the user's own pl.Trainer
(``--model.local_trainer``) against the default fast path, on the quickstart (FedAvgM, 10 clients a
round, 2 local epochs), one thread, interleaved A/B over a few repeats.

    .venv/bin/python benchmarks/bench_trainer_path.py [--rounds 4] [--repeats 3]
"""
from __future__ import annotations

import argparse
import csv
import glob
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATHS = {"fast path": [], "own Trainer": ["--model.local_trainer", "{}"]}


def seconds_per_round(extra: list[str], rounds: int) -> float:
    """The mean of time/round_s over the rounds after the first (warm-up), from the run's metrics.csv."""
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, "-m", "fl_lightning.cli", "fit", "--config", str(ROOT / "configs" / "quickstart.yaml"),
                        "--trainer.max_epochs", str(rounds), "--trainer.enable_progress_bar", "false", "--threads", "1",
                        "--trainer.logger.init_args.save_dir", out, *extra],
                       check=True, capture_output=True, env={**os.environ, "WANDB_MODE": "offline"}, cwd=out)
        (path,) = glob.glob(os.path.join(out, "**", "metrics.csv"), recursive=True)
        rows = [row for row in csv.DictReader(open(path)) if row.get("time/round_s")]
        return statistics.mean(float(row["time/round_s"]) for row in rows[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in PATHS}
    for _ in range(args.repeats):
        for name, extra in PATHS.items():
            times[name].append(seconds_per_round(extra, args.rounds))
    fast = statistics.median(times["fast path"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:12s} {median:.3f} s per round (median of {args.repeats}; min {min(values):.3f}, "
              f"max {max(values):.3f}), {median / fast:.2f}× the fast path")


if __name__ == "__main__":
    main()
