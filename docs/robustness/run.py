"""The robustness verdict's runs (docs/robustness.md, "Verdict"): LeNet-5 on the CIFAR-10 JPEG copy, FedAvg and
FedBCGD (N = 2 blocks, balanced division: 5 uploads per block) at an equal upload budget, aggregators × attacks
with 20 % malicious clients. One run after another, each on one thread; a run already kept is skipped.

    git archive HEAD | tar -x -C /tmp/rsnap    # the runs import this snapshot (FL_CODE), not a tree in flux
    FL_CODE=/tmp/rsnap nice -n 10 nohup .venv/bin/python docs/robustness/run.py --scale session > /tmp/robustness.log 2>&1 &
    .venv/bin/python docs/robustness/run.py --scale full      # the issue's scale (100 clients, 3 seeds, 10/20 %)
"""
from __future__ import annotations

import argparse
import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DATA = ROOT.parent / "shared" / "data" / "cifar10-jpeg"
CODE = Path(os.environ.get("FL_CODE", ROOT))  # the code the runs import (a snapshot: git archive HEAD | tar -x -C DIR)
SCALES = {  # clients, images each, S, upload budget (d), seeds, malicious fractions, aggregators, attacks
    "session": dict(clients=20, budget=10.0, seeds=[0], fractions=[0.2],
                    aggregators=["mean", "median", "krum", "centered_clip"],
                    attacks=["none", "sign_flip", "alie", "label_flip"]),
    "full": dict(clients=100, budget=50.0, seeds=[0, 1, 2], fractions=[0.1, 0.2],
                 aggregators=["mean", "median", "trimmed_mean", "krum", "centered_clip"],
                 attacks=["none", "sign_flip", "alie", "label_flip"]),
}
ALGORITHMS = {"fedavg": ["--model.algorithm", "fedavg"],
              "fedbcgd": ["--model.algorithm", "fedbcgd", "--model.algorithm.num_blocks", "2",
                          "--model.algorithm.block_division", "balanced"]}
AGGREGATOR_OPTIONS = {"mean": [], "median": [], "trimmed_mean": ["--model.aggregator.beta", "0.2"],
                      "krum": ["--model.aggregator.f", "1"],
                      "centered_clip": ["--model.aggregator.tau", "1.0", "--model.aggregator.iterations", "3"]}


def label(algorithm, aggregator, attack, fraction, seed) -> str:
    return f"{algorithm}-{aggregator}-{attack}" + (f"{int(fraction * 100)}" if attack != "none" else "") + f"-s{seed}"


def command(scale: dict, algorithm, aggregator, attack, fraction, seed, out: Path) -> list[str]:
    rounds = int(scale["budget"]) * (2 if algorithm == "fedbcgd" else 1) + 2  # the budget stops it first
    args = [str(ROOT / ".venv" / "bin" / "python"), "-m", "fl_lightning.cli", "fit",
            "--config", str(CODE / "configs" / "experiments" / "cifar10_lenet5.yaml"),
            "--data.root", str(DATA), "--data.num_clients", str(scale["clients"]),
            *ALGORITHMS[algorithm], "--model.aggregator", aggregator, *AGGREGATOR_OPTIONS[aggregator],
            "--model.max_upload_d", str(scale["budget"]), "--trainer.max_epochs", str(rounds),
            "--trainer.check_val_every_n_epoch", str(rounds), "--trainer.enable_checkpointing", "false",
            "--trainer.enable_progress_bar", "false", "--seed_everything", str(seed), "--threads", "1",
            "--trainer.logger.init_args.save_dir", str(out), "--trainer.logger.init_args.name", "run"]
    if attack != "none":
        args += ["--model.attack", attack, "--model.attack.fraction", str(fraction)]
    return args


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", choices=sorted(SCALES), default="session")
    scale = SCALES[parser.parse_args().scale]
    kept = HERE / "runs"
    grid = itertools.product(scale["seeds"], scale["attacks"], scale["aggregators"], ALGORITHMS, scale["fractions"])
    for seed, attack, aggregator, algorithm, fraction in grid:
        if attack == "none" and fraction != scale["fractions"][0]:
            continue
        name = label(algorithm, aggregator, attack, fraction, seed)
        if (kept / name / "metrics.csv").exists():
            continue
        scratch = Path("/tmp/robustness_runs") / name
        shutil.rmtree(scratch, ignore_errors=True)
        done = subprocess.run(command(scale, algorithm, aggregator, attack, fraction, seed, scratch),
                              cwd=CODE, env={**os.environ, "WANDB_MODE": "offline", "PYTHONPATH": str(CODE)},
                              capture_output=True, text=True)
        print(name, "rc", done.returncode, (done.stdout.strip().splitlines() or [""])[-1], flush=True)
        if done.returncode:
            print(done.stderr[-1500:], file=sys.stderr, flush=True)
            continue
        run_dir = next(scratch.rglob("version_0"))
        (kept / name).mkdir(parents=True, exist_ok=True)
        for file in ("metrics.csv", "config.yaml"):
            shutil.copy(run_dir / file, kept / name / file)


if __name__ == "__main__":
    main()
