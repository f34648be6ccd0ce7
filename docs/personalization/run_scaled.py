"""Personalisation at a scale where learning beats the label prior: CIFAR-10 LeNet-5, 20 clients × 500 images
(20 % of each held out for pval/*), 10 sampled per round, 1 local epoch of batch 25; Dirichlet ρ = 0.1, ρ = 0.6 and
2-class shards; 3 seeds; FedBCGD-personal against FedRep, FedPer, Ditto, APFL, FedAvg-FT, FedBN, Local and FedAvg.

Two phases:
1. search: each method's own hyper-parameter (SEARCH below) on seed 10 — not a reported seed — per partition; the
   value with the best final pval/acc_mean is kept (ties, to 6 decimals: the first listed).
2. runs: every method with its kept value, seeds 0, 1, 2. pval/* is logged every ROUNDS/5 rounds, so the summary
   compares at equal rounds (the last) and at equal floats (each method's pval at FedBCGD-personal's total floats).

  python docs/personalization/run_scaled.py OUT --scale reduced --jobs 2       # ~2 h on 2 cores
  python docs/personalization/run_scaled.py OUT --scale session --jobs 2 --chosen docs/personalization/runs_scaled/chosen.json
  python docs/personalization/run_scaled.py OUT --scale full --jobs 16         # 50 rounds
  python docs/personalization/summarise_scaled.py OUT                           # the table (markdown)

--scale full: 50 rounds, three partitions. session: 50 rounds on ρ = 0.1, 12 on ρ = 0.6 and shards (~5 h on 2
cores with --chosen, half of it FedAvg-FT's 80 fine-tune epochs at each evaluation). reduced: 12 rounds (rounds shrunk, data per client kept) and ρ = 0.1 only. --dry-run prints
the commands and how long they should take; --pilot R: R rounds, seed 0, no search;
--parts / --algs narrow the grid and --samples shrinks the clients (pilots only); --search-only stops after the
search.
Each fit runs as its own process with one thread (--threads 1); --jobs N run at a time. A fit that already ran to
its end in OUT is not run again, so a widened grid or an interrupted run goes on where it stopped.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FL = os.environ.get("FL", str(ROOT / ".venv" / "bin" / "fl-lightning"))
CONFIG = "docs/personalization/cifar10_lenet5.yaml"
PARTITIONS = {"dirichlet0.1": ["--data.dirichlet_rho", "0.1"], "dirichlet0.6": ["--data.dirichlet_rho", "0.6"],
              "shards2": ["--data.partition", "shards", "--data.classes_per_client", "2"]}
ALGORITHMS = ["fedavg", "local", "fedavg_ft", "fedbn", "fedper", "fedrep", "ditto", "apfl", "fedbcgd_personal"]
# each method's own hyper-parameter and the values searched (methods not listed have none to tune here)
# (widened past every edge pick: the first grid, two values each, picked an edge every time; FedAvg-FT's profile is
# flat from 80 fine-tune epochs to 160, so the grid stops there)
# Local's own epochs per round (model.local_epochs) on FedAvg-FT's grid: Local at equal computation (docs)
SEARCH = {"fedavg_ft": ("finetune_epochs", [1, 5, 10, 20, 40, 80, 160]), "fedrep": ("head_epochs", [1, 5, 10, 20]),
          "local": ("local_epochs", [1, 5, 10, 20, 40, 80, 160]),
          "ditto": ("lam", [0.001, 0.01, 0.03, 0.1, 0.3, 1.0]), "apfl": ("alpha", [0.1, 0.25, 0.5, 0.75]),
          "fedbcgd_personal": ("server_momentum", [0.0, 0.5, 0.8, 0.9, 0.95])}
# rounds per partition; "session": 50 rounds on ρ 0.1 (where the earlier table had 12), the other two partitions at
# 12, reusing the kept ρ 0.1 search (--chosen) instead of searching again
SCALES = {"full": {"rounds": dict.fromkeys(PARTITIONS, 50)},
          "session": {"rounds": {"dirichlet0.1": 50, "dirichlet0.6": 12, "shards2": 12}},
          "reduced": {"rounds": {"dirichlet0.1": 12}}}
SEEDS, SEARCH_SEED = [0, 1, 2], 10
# seconds of one fit (one thread, 2 shared cores, 20 × 500 images), fitted to measured fits: start-up (data, model)
# + rounds × per round, averaged over the methods (FedAvg ~3.5 s a round, Ditto/APFL ~2×); FedAvg-FT adds
# FINETUNE_EPOCH_S per fine-tune epoch at each personal evaluation (all 20 clients; measured: 80 epochs, 6
# evaluations, 2,448 s a fit); FedRep adds HEAD_EPOCH_S per head epoch per round (the round's 10 clients; measured:
# 10 epochs, 12 rounds, 391 s a fit)
START_S, ROUND_S, FINETUNE_EPOCH_S, HEAD_EPOCH_S = 15.0, 5.5, 4.9, 2.6
LOCAL_EPOCH_S = FINETUNE_EPOCH_S / 2  # Local: one more epoch on each of the round's 10 clients (of 20)
MODULE_OPTIONS = {"local_epochs"}  # options of the module (--model.X), not of the algorithm (--model.algorithm.X)


@dataclass(frozen=True)
class Fit:
    """One fit of the grid: its command, its run folder (OUT/group/partition/name) and its expected cost."""
    out: Path
    group: str  # "search" or "runs"
    alg: str
    seed: int
    rounds: int
    part: str
    option: tuple | None = None  # (the method's hyper-parameter, its value)
    samples: int = 500

    @property
    def name(self) -> str:
        return self.alg + (f",{self.option[0]}={self.option[1]}" if self.option else "") + f",seed={self.seed}"

    @property
    def run(self) -> Path:
        return self.out / self.group / self.part / self.name

    @property
    def every(self) -> int:
        # five or six personal evaluations a fit (FedAvg-FT fine-tunes at each); a search fit is scored by its last
        # one only, so it evaluates only then (evaluating changes no trained number: the final pval is the same)
        return self.rounds if self.group == "search" else max(1, self.rounds // 5)

    def argv(self) -> list[str]:
        extra = ["--model.network.norm", "bn"] if self.alg == "fedbn" else []
        if self.option:
            scope = "model" if self.option[0] in MODULE_OPTIONS else "model.algorithm"
            extra += [f"--{scope}.{self.option[0]}", str(self.option[1])]
        return [FL, "fit", "--config", CONFIG, "--model.algorithm", self.alg, *extra, *PARTITIONS[self.part],
                "--data.samples_per_client", str(self.samples), "--trainer.max_epochs", str(self.rounds),
                "--trainer.check_val_every_n_epoch", str(self.rounds), "--model.personal_eval_every", str(self.every),
                "--seed_everything", str(self.seed), "--threads", "1",
                "--trainer.logger.init_args.save_dir", str(self.out / self.group),
                "--trainer.logger.init_args.name", self.part, "--trainer.logger.init_args.version", self.name]

    def finished(self) -> bool:
        """Whether it already ran to its end (its test/acc row is logged): it is not run again."""
        if not (self.run / "metrics.csv").exists():
            return False
        with open(self.run / "metrics.csv") as f:
            return any(r.get("test/acc") for r in csv.DictReader(f))

    def expected_s(self) -> float:
        """The seconds it should take on one thread (the measured constants above)."""
        option, value = self.option or (None, 0)
        evaluations = -(-self.rounds // self.every)  # every k rounds, and after the last
        return (START_S + ROUND_S * self.rounds
                + FINETUNE_EPOCH_S * (value if option == "finetune_epochs" else 0) * evaluations
                + HEAD_EPOCH_S * (value if option == "head_epochs" else 0) * self.rounds
                + LOCAL_EPOCH_S * (value - 1 if option == "local_epochs" else 0) * self.rounds)


def final_pval(run: Path) -> float:
    with open(run / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("pval/acc_mean")]
    return float(rows[-1]["pval/acc_mean"]) if rows else float("-inf")


def earlier(path: Path) -> dict:
    """What an earlier run into OUT recorded in ``path`` (scale.json, chosen.json): a run of some partitions merges
    into it instead of dropping the others'."""
    return json.loads(path.read_text()) if path.exists() else {}


def plan(fits: list[Fit], jobs: int, what: str) -> list[Fit]:
    """The fits still to run; prints how many and how long they should take."""
    todo = [fit for fit in fits if not fit.finished()]
    if fits:
        seconds = [fit.expected_s() for fit in todo]
        # jobs at a time: no sooner than the longest fit, nor than the total shared evenly
        minutes = max(max(seconds, default=0), sum(seconds) / max(jobs, 1)) / 60
        print(f"{what}: {len(todo)} fits to run ({len(fits) - len(todo)} already finished in OUT, not run "
              f"again); expected ~{minutes:.0f} min with --jobs {jobs}", flush=True)
    return todo


def run_all(fits: list[Fit], jobs: int, what: str) -> list[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")

    def one(fit):
        started = time.time()
        done = subprocess.run(["nice", "-n", "5", *fit.argv()], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        print(f"  {'ok' if done.returncode == 0 else 'FAILED'} {fit.part}/{fit.name} in "
              f"{time.time() - started:.0f} s", flush=True)
        return "" if done.returncode == 0 else " ".join(fit.argv()) + "\n" + done.stderr[-2000:]

    with ThreadPoolExecutor(jobs) as pool:
        return [err for err in pool.map(one, plan(fits, jobs, what)) if err]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--scale", choices=tuple(SCALES), default="reduced")
    parser.add_argument("--jobs", type=int, default=2, help="fits at a time, one thread each")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--pilot", type=int, help="R rounds, seed 0, no search (a check that it runs)")
    parser.add_argument("--parts", nargs="+", choices=tuple(PARTITIONS), help="default: the scale's")
    parser.add_argument("--algs", nargs="+", choices=ALGORITHMS, default=ALGORITHMS)
    parser.add_argument("--samples", type=int, default=500, help="images per client (500; smaller for a pilot only)")
    parser.add_argument("--search-only", action="store_true", help="stop after the search (and its chosen.json)")
    parser.add_argument("--chosen", type=Path, help="an earlier run's chosen.json: reuse its values, search no more; a "
                        "partition it lacks takes the values chosen for dirichlet0.1")
    args = parser.parse_args()
    scale = dict(SCALES[args.scale])
    args.parts = args.parts or list(scale["rounds"])
    rounds = {part: args.pilot or scale["rounds"].get(part, max(scale["rounds"].values())) for part in args.parts}
    reused = json.loads(args.chosen.read_text()) if args.chosen else None
    search = [] if args.pilot or reused else [(part, alg, value) for part in args.parts for alg, (_, values)
                                              in SEARCH.items() if alg in args.algs for value in values]
    seeds = [0] if args.pilot else SEEDS
    print(f"scale {args.scale if not args.pilot else 'pilot'}: rounds {rounds}; {len(search)} search fits + "
          f"{len(args.parts) * len(args.algs) * len(seeds)} fits", flush=True)
    if not args.dry_run:  # a dry run prints the commands and writes nothing (it must not relabel a finished run)
        args.out.mkdir(parents=True, exist_ok=True)
        scale_name = "pilot" if args.pilot else args.scale
        before = earlier(args.out / "scale.json")
        same = before.get("scale") == scale_name and isinstance(before.get("rounds"), dict)  # a run of some parts
        (args.out / "scale.json").write_text(json.dumps({
            "scale": scale_name, "rounds": (before["rounds"] if same else {}) | rounds,
            "command": before["command"] if same else " ".join(sys.argv)}))
    def search_fit(part, alg, value):
        return Fit(args.out, "search", alg, SEARCH_SEED, rounds[part], part, (SEARCH[alg][0], value), args.samples)

    search_fits = [search_fit(*point) for point in search]
    if args.dry_run:
        plan(search_fits, args.jobs, "search")
        for fit in search_fits:
            print(" ".join(fit.argv()))
    failed = [] if args.dry_run else run_all(search_fits, args.jobs, "search")
    # a dry run before the search has run cannot know the picks: each grid's first value stands in
    guessed = args.dry_run and not reused and not all(fit.finished() for fit in search_fits)
    chosen = {}
    for part in args.parts:
        for alg, (option, values) in SEARCH.items():
            if alg not in args.algs:  # its search did not run here; chosen.json keeps its earlier pick
                continue
            if args.pilot or guessed:
                chosen[(part, alg)] = (option, values[0])
                continue
            if reused:
                pick = reused.get(f"{part}/{alg}") or reused.get(f"dirichlet0.1/{alg}")
                if pick:  # none chosen for this method (a chosen.json from before its search): the config's value
                    chosen[(part, alg)] = tuple(pick)
                continue
            # to 6 decimals: two means of 20 clients' accuracies (multiples of 0.0005) that differ below that
            # differ only by float rounding (80 and 160 fine-tune epochs: 0.8154999999999999, 0.8155000000000001)
            scores = [round(final_pval(search_fit(part, alg, v).run), 6) for v in values]
            chosen[(part, alg)] = (option, values[scores.index(max(scores))])
    if not args.dry_run:  # merged into OUT's earlier picks: a run of some partitions keeps the others'
        path = args.out / "chosen.json"
        path.write_text(json.dumps(earlier(path) | {f"{p}/{a}": list(v) for (p, a), v in chosen.items()}))
    if args.search_only:
        return 1 if failed else 0
    # longest partitions first; among partitions of as many rounds, seed-major (seed 0 of each, then seed 1, ...):
    # a run cut short still has whole seeds, and every partition its first ones
    lengths = sorted(set(rounds.values()), reverse=True)
    main_fits = [Fit(args.out, "runs", alg, seed, rounds[part], part, chosen.get((part, alg)), args.samples)
                 for length in lengths for seed in seeds for part in args.parts if rounds[part] == length
                 for alg in args.algs]
    if args.dry_run:
        plan(main_fits, args.jobs, "runs (at each grid's first value: the search has not run)" if guessed else "runs")
        for fit in main_fits:
            print(" ".join(fit.argv()))
        return 0
    failed += run_all(main_fits, args.jobs, "runs")
    for err in failed:
        print("FAILED:", err, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
