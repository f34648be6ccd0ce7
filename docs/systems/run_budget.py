"""Accuracy at equal simulated time, with a real target and a control where compute is the bottleneck.

Settings: CIFAR-10 LeNet-5 (configs/experiments/cifar10_lenet5.yaml; targets 0.30 and 0.35) and the convex MNIST
model (convex_mnist_logreg.yaml; target 0.85). Profiles (fl_lightning/systems/profiles.py): slow_uplink (the upload
is the bottleneck) and its control slow_compute (local training is). Modes: wait (wait for all 10), deadline
(over-selection: 13 sampled, the first 10 within D), fedbuff (K = 10, 20 in flight). Arms: FedAvg, FedAvgM,
FedBCGD with server momentum 0.5 (the config's) and without (fedbcgd_m0), FedPAQ, and FedBCGD+ (not under FedBuff).
Seeds 0, 1, 2.

Two phases per setting and profile:
1. FedAvg, wait for all, R rounds, 3 seeds. The budget B is the shortest of their simulated times; the deadline D
   is the median client time in their timeline.csv.
2. Every other arm runs until its simulated clock reaches B (fl_lightning.systems.budget.SimulatedTimeBudget).
   Every arm is then compared at B: the last evaluation at or before it.

  python docs/systems/run_budget.py OUT --scale reduced --jobs 2      # ~40 min on 2 cores
  python docs/systems/run_budget.py OUT --scale session --jobs 2     # CIFAR-10 only, ~35 min on 2 free cores
  python docs/systems/run_budget.py OUT --scale full --jobs 16
  python docs/systems/summarise_budget.py OUT                          # markdown tables

--scale full: CIFAR 100 clients × 500 images, R = 100; convex R = 150; all modes and arms.
session: CIFAR only, 100 × 500 images, R = 30, wait only, FedAvg/FedBCGD±momentum, val every 3 rounds.
reduced: CIFAR 100 clients × 100 images (data shrunk too: 2 cores), R = 10, wait only, FedAvg/FedBCGD±momentum/
FedPAQ — its CIFAR targets are out of reach at this budget; convex R = 60 (rounds shrunk), wait and FedBuff,
FedAvg/FedBCGD±momentum/FedPAQ (fits' start-up, ~30-40 s each, leaves 2 cores no room for more in ~40 min). --pilot R: R rounds, seed 0; --settings/--profiles/--modes narrow; --dry-run prints phase 2 as if
B = 1000 s and D = 10 s.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FL = os.environ.get("FL", str(ROOT / ".venv" / "bin" / "fl-lightning"))
PROFILES = ("slow_uplink", "slow_compute")
MODES = ("wait", "deadline", "fedbuff")
ARMS = {"fedavg": ["--model.algorithm", "fedavg"], "fedavgm": ["--model.algorithm", "fedavgm"],
        "fedbcgd": ["--model.algorithm", "fedbcgd", "--model.algorithm.server_momentum", "0.5"],
        "fedbcgd_m0": ["--model.algorithm", "fedbcgd", "--model.algorithm.server_momentum", "0.0"],
        "fedpaq": ["--model.algorithm", "fedpaq"], "fedbcgd_plus": ["--model.algorithm", "fedbcgd_plus"]}
SCALES = {
    "full": {"cifar10_lenet5": {"rounds": 100, "args": [], "modes": MODES, "arms": list(ARMS), "cost": (40.0, 8.0)},
             "convex_mnist_logreg": {"rounds": 150, "args": [], "modes": MODES, "arms": list(ARMS),
                                     "cost": (30.0, 0.3)}},
    "reduced": {"cifar10_lenet5": {"rounds": 10, "args": ["--data.samples_per_client", "100"], "modes": ("wait",),
                                   "arms": ["fedavg", "fedbcgd", "fedbcgd_m0", "fedpaq"], "cost": (40.0, 2.0)},
                "convex_mnist_logreg": {"rounds": 60, "args": [], "modes": ("wait", "fedbuff"),
                                        "arms": ["fedavg", "fedbcgd", "fedbcgd_m0", "fedpaq"],
                                        "cost": (30.0, 0.3)}},
    # what one session on 2 cores holds of the CIFAR part: the full data (100 × 500 images), 30 FedAvg rounds (to
    # ~37 %, past both targets), wait-for-all, FedAvg and FedBCGD with and without server momentum
    "session": {"cifar10_lenet5": {"rounds": 30, "args": [], "modes": ("wait",), "arms": ["fedavg", "fedbcgd", "fedbcgd_m0"],
                                   "cost": (15.0, 8.0), "val_every": 3}}}
# "cost": measured seconds of one fit on one thread (2 shared cores): start-up, per round (FedAvg, wait)
VAL_EVERY = {"cifar10_lenet5": {"wait": 2, "deadline": 2, "fedbuff": 10},
             "convex_mnist_logreg": {"wait": 1, "deadline": 1, "fedbuff": 4}}
FEDBUFF_STEPS_PER_ROUND = 4  # roughly: a FedBuff step takes a quarter of a wait-for-all round's simulated time
SEEDS = (0, 1, 2)


def mode_args(mode: str, deadline: float) -> list[str]:
    if mode == "deadline":
        return ["--model.round_policy", "over_selection", "--model.round_policy.beta", "0.3",
                "--model.round_policy.deadline_s", f"{deadline:.1f}"]
    if mode == "fedbuff":
        return ["--model.asynchronous", "fedbuff", "--model.asynchronous.buffer_size", "10",
                "--model.asynchronous.concurrency", "20"]
    return []


def command(out, setting, spec, profile, mode, arm, seed, rounds=None, budget=None, deadline=0.0) -> list[str]:
    cmd = [FL, "fit", "--config", f"configs/experiments/{setting}.yaml", *ARMS[arm], "--model.system", profile,
           *mode_args(mode, deadline), *spec["args"], "--trainer.check_val_every_n_epoch",
           str(spec.get("val_every", VAL_EVERY[setting][mode])),
           "--model.max_upload_d", "100000", "--seed_everything", str(seed), "--threads", "1",
           "--trainer.logger.init_args.save_dir", str(out / setting / profile),
           "--trainer.logger.init_args.name", mode, "--trainer.logger.init_args.version", f"{arm},seed={seed}"]
    if budget is None:
        return cmd + ["--trainer.max_epochs", str(rounds)]
    return cmd + ["--trainer.max_epochs", "1000000", "--trainer.callbacks+=fl_lightning.systems.budget.SimulatedTimeBudget",
                  f"--trainer.callbacks.seconds={budget:.1f}"]


def run_all(commands: list[list[str]], jobs: int) -> list[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")

    def one(cmd):
        started = time.time()
        done = subprocess.run(["nice", "-n", "5", *cmd], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        where = [cmd[cmd.index(f"--trainer.logger.init_args.{key}") + 1] for key in ("save_dir", "name", "version")]
        print(f"  {'ok' if done.returncode == 0 else 'FAILED'} {'/'.join(where[0].split('/')[-2:] + where[1:])}"
              f" in {time.time() - started:.0f} s", flush=True)
        return "" if done.returncode == 0 else " ".join(cmd) + "\n" + done.stderr[-2000:]

    with ThreadPoolExecutor(jobs) as pool:
        return [err for err in pool.map(one, commands) if err]


def budget_and_deadline(out: Path, setting: str, profile: str, seeds) -> tuple[float, float]:
    """B: the shortest simulated time of FedAvg's wait-for-all runs; D: their clients' median time (timeline.csv)."""
    ends, clients = [], []
    for seed in seeds:
        version = out / setting / profile / "wait" / f"fedavg,seed={seed}"
        with open(version / "metrics.csv") as f:
            ends.append(max(float(r["time/sim_s"]) for r in csv.DictReader(f) if r.get("time/sim_s")))
        with open(version / "timeline.csv") as f:
            clients += [float(r["end_s"]) - float(r["start_s"]) for r in csv.DictReader(f)]
    return min(ends), statistics.median(clients)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--scale", choices=tuple(SCALES), default="reduced")
    parser.add_argument("--jobs", type=int, default=2, help="fits at a time, one thread each")
    parser.add_argument("--pilot", type=int, help="R rounds, seed 0 (a check that it runs)")
    parser.add_argument("--settings", nargs="+", choices=tuple(SCALES["full"]), help="default: the scale's")
    parser.add_argument("--profiles", nargs="+", choices=PROFILES, default=list(PROFILES))
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    seeds = (0,) if args.pilot else SEEDS
    args.settings = args.settings or list(SCALES[args.scale])
    specs = {s: dict(SCALES[args.scale][s], rounds=args.pilot or SCALES[args.scale][s]["rounds"]) for s in args.settings}
    arms = {s: [(mode, arm) for mode in spec["modes"] if mode in args.modes for arm in spec["arms"]
                if not (mode == "fedbuff" and arm == "fedbcgd_plus") and not (mode == "wait" and arm == "fedavg")]
            for s, spec in specs.items()}
    seconds = sum(len(seeds) * len(args.profiles) * (
        (spec["cost"][0] + spec["cost"][1] * spec["rounds"]) * (1 + len(arms[s]))
        + spec["cost"][1] * spec["rounds"] * (FEDBUFF_STEPS_PER_ROUND - 1) * sum(m == "fedbuff" for m, _ in arms[s]))
        for s, spec in specs.items())
    fits = sum(len(seeds) * len(args.profiles) * (1 + len(arms[s])) for s in specs)
    print(f"scale {'pilot' if args.pilot else args.scale}: {fits} fits; expected ~{seconds / args.jobs / 60:.0f} min "
          f"with --jobs {args.jobs} (rough: FedBuff arms take ~{FEDBUFF_STEPS_PER_ROUND}x a wait run's rounds)",
          flush=True)
    if not args.dry_run:
        args.out.mkdir(parents=True, exist_ok=True)
    phase1 = [command(args.out, s, spec, p, "wait", "fedavg", seed, rounds=spec["rounds"])
              for s, spec in specs.items() for p in args.profiles for seed in seeds]
    failed = [] if args.dry_run else run_all(phase1, args.jobs)
    limits, phase2 = {}, []
    for s, spec in specs.items():
        for p in args.profiles:
            b, d = (1000.0, 10.0) if args.dry_run else budget_and_deadline(args.out, s, p, seeds)
            limits[f"{s}/{p}"] = {"budget_s": b, "deadline_s": d}
            phase2 += [command(args.out, s, spec, p, mode, arm, seed, budget=b, deadline=d)
                       for mode, arm in arms[s] for seed in seeds]
    if not args.dry_run:  # a dry run prints the commands and writes nothing (it must not relabel a finished run)
        (args.out / "scale.json").write_text(json.dumps({"scale": "pilot" if args.pilot else args.scale,
                                                         "rounds": {s: spec["rounds"] for s, spec in specs.items()},
                                                         "limits": limits, "command": " ".join(sys.argv)}))
    if args.dry_run:
        for cmd in phase1 + phase2:
            print(" ".join(cmd))
        return 0
    failed += run_all(phase2, args.jobs)
    for err in failed:
        print("FAILED:", err, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
