"""The votes-per-coordinate experiment (docs/robustness.md, "Do block uploads change what robust aggregation can
do?"): its pre-registered grid, run fit by fit, each on one thread, a fit already kept skipped — so it goes on
across sessions. LeNet-5 on the CIFAR-10 JPEG copy, 20 clients × 500, Dirichlet ρ 0.6, 20 % malicious, server
momentum 0.5 and server lr 1 in every arm, 30 d uploaded per client, val/acc every 2 d.

    git archive HEAD | tar -x -C /tmp/vsnap    # the fits import this snapshot (FL_CODE), not a tree in flux
    FL_CODE=/tmp/vsnap nohup .venv/bin/python docs/robustness/votes/run.py --phase search > /tmp/votes.log 2>&1 &
    .venv/bin/python docs/robustness/votes/run.py --phase runs --jobs 2     # after the search (reads chosen.json)
    .venv/bin/python docs/robustness/votes/run.py --phase floor             # key cells under the other kernels
    .venv/bin/python docs/robustness/votes/run.py --dry-run --phase runs    # what is left, and its expected cost

Phases: ``search`` — centered clipping's τ per arm on clean runs (seed 10, not a reported seed), the pick the
smallest τ within 1 point of the best mean of the last 5 evaluations (docs' amendment), written to chosen.json; ``runs`` — arms × attacks × aggregators × seeds 0–2; ``floor`` — the key cells again under the
other ATen CPU kernels (ATEN_CPU_CAPABILITY), kept under floor/.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
DATA = ROOT.parent / "shared" / "data" / "cifar10-jpeg"
CODE = Path(os.environ.get("FL_CODE", ROOT))
BUDGET, EVERY = 30.0, 2.0  # d uploaded per client; evaluate every 2 d
SEEDS, SEARCH_SEED = (0, 1, 2), 10
TAUS = (0.03, 0.1, 0.3, 1.0, 3.0)  # centered clipping's τ, searched per arm on clean runs (widened: docs' amendment)
WITHIN = 0.01  # the pick: the smallest τ whose clean accuracy is within 1 point of the best
ARMS = {  # votes per coordinate: FedAvg S uploads; FedBCGD N = 2, S = 10: 5 per block, 10 on the shared block
    "fedavg_s5": ["--model.algorithm", "fedavgm", "--model.clients_per_round", "5"],
    "fedavg_s10": ["--model.algorithm", "fedavgm", "--model.clients_per_round", "10"],
    "fedbcgd_s10": ["--model.algorithm", "fedbcgd", "--model.algorithm.num_blocks", "2",
                    "--model.algorithm.block_division", "balanced", "--model.clients_per_round", "10"],
}
ATTACKS = {"none": [], "sign_flip": ["--model.attack", "sign_flip", "--model.attack.fraction", "0.2"],
           "alie": ["--model.attack", "alie", "--model.attack.fraction", "0.2"]}
AGGREGATORS = ("mean", "median", "median_bucket2", "centered_clip")
FLOOR = [("fedavg_s5", "median", "sign_flip"), ("fedavg_s5", "median", "none"), ("fedbcgd_s10", "median", "sign_flip"),
         ("fedbcgd_s10", "median", "none")]
SECONDS = {"fedavg_s5": 150, "fedavg_s10": 200, "fedbcgd_s10": 330}  # one fit on one core, measured (search phase)


def aggregator_args(name: str, tau: float | None) -> list[str]:
    if name == "median_bucket2":
        return ["--model.aggregator", "median", "--model.aggregator.bucket", "2"]
    if name == "centered_clip":
        return ["--model.aggregator", "centered_clip", "--model.aggregator.tau", str(tau),
                "--model.aggregator.iterations", "1", "--model.aggregator.momentum", "0.9"]
    return ["--model.aggregator", name]


@dataclass(frozen=True)
class Fit:
    """One fit: where it is kept, and its command."""

    folder: Path
    arm: str
    aggregator: str
    attack: str
    seed: int
    tau: float | None = None
    kernels: str | None = None  # ATEN_CPU_CAPABILITY for the floor's reruns

    @property
    def name(self) -> str:
        tau = f"-tau{self.tau:g}" if self.tau is not None else ""
        return f"{self.arm}-{self.aggregator}{tau}-{self.attack}-s{self.seed}"

    @property
    def kept(self) -> Path:
        return self.folder / self.name

    def finished(self) -> bool:
        return (self.kept / "metrics.csv").exists()

    def argv(self, scratch: Path) -> list[str]:
        rounds = int(BUDGET) * 3  # the budget stops it first (FedBCGD: about 2 rounds per d)
        return [str(ROOT / ".venv" / "bin" / "python"), "-m", "fl_lightning.cli", "fit",
                "--config", str(CODE / "configs" / "experiments" / "cifar10_lenet5.yaml"),
                "--data.root", str(DATA), "--data.num_clients", "20", *ARMS[self.arm],
                "--model.algorithm.server_momentum", "0.5", *aggregator_args(self.aggregator, self.tau),
                *ATTACKS[self.attack], "--model.max_upload_d", str(BUDGET), "--model.eval_every_d", str(EVERY),
                "--trainer.max_epochs", str(rounds), "--trainer.check_val_every_n_epoch", "1",
                "--trainer.enable_checkpointing", "false", "--trainer.enable_progress_bar", "false",
                "--seed_everything", str(self.seed), "--threads", "1",
                "--trainer.logger.init_args.save_dir", str(scratch), "--trainer.logger.init_args.name", "run"]

    def run(self) -> str:
        scratch = Path("/tmp/votes_runs") / self.folder.name / self.name
        shutil.rmtree(scratch, ignore_errors=True)
        env = {**os.environ, "WANDB_MODE": "offline", "PYTHONPATH": str(CODE), "OMP_NUM_THREADS": "1"}
        if self.kernels:
            env["ATEN_CPU_CAPABILITY"] = self.kernels
        done = subprocess.run(self.argv(scratch), cwd=CODE, env=env, capture_output=True, text=True)
        if done.returncode:
            return f"{self.name} rc {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
        run_dir = next(scratch.rglob("version_0"))
        self.kept.mkdir(parents=True, exist_ok=True)
        for file in ("clients.csv", "config.yaml", "metrics.csv"):  # metrics.csv last: it marks the fit finished
            if file != "clients.csv" or (run_dir / file).exists():  # the plain mean without an attack writes none
                shutil.copy(run_dir / file, self.kept / file)
        return f"{self.name} done: {(done.stdout.strip().splitlines() or [''])[-1]}"


def search_fits() -> list[Fit]:
    return [Fit(HERE / "search", arm, "centered_clip", "none", SEARCH_SEED, tau) for arm in ARMS for tau in TAUS]


def chosen_taus() -> dict[str, float]:
    path = HERE / "chosen.json"
    return json.loads(path.read_text()) if path.exists() else {}


def grid_fits() -> list[Fit]:
    taus = chosen_taus()
    fits = []
    for seed, arm, attack, aggregator in itertools.product(SEEDS, ARMS, ATTACKS, AGGREGATORS):
        if aggregator == "centered_clip" and arm not in taus:
            continue  # its τ is not chosen yet
        fits.append(Fit(HERE / "runs", arm, aggregator, attack, seed,
                        taus.get(arm) if aggregator == "centered_clip" else None))
    return fits


def floor_fits(kernels: str) -> list[Fit]:
    return [Fit(HERE / "floor", arm, aggregator, attack, 0, kernels=kernels) for arm, aggregator, attack in FLOOR]


def other_kernels() -> str:
    """The ATen CPU kernels that are not this machine's native ones."""
    native = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-c", "import torch; print(torch.backends.cpu."
                             "get_cpu_capability())"], capture_output=True, text=True, env={**os.environ,
                            "ATEN_CPU_CAPABILITY": ""}).stdout.strip()
    return "avx2" if native == "AVX512" else "default"


def pick_taus() -> None:
    """τ per arm: the smallest τ whose clean mean of the last 5 evaluations is within WITHIN of the best (docs'
    amendment: on clean runs the best is always the largest τ, which clips least)."""
    from summarise import last5  # noqa: E402 (beside this file)

    taus = chosen_taus()
    for arm in ARMS:
        scored = {fit.tau: last5(fit.kept) for fit in search_fits() if fit.arm == arm and fit.finished()}
        if len(scored) == len(TAUS):
            best = min(tau for tau, score in scored.items() if score >= max(scored.values()) - WITHIN - 1e-9)
            taus[arm] = best
            edge = " (at the grid's lower edge: widen it)" if best == TAUS[0] else ""
            print(f"{arm}: τ = {best:g}{edge}; " + ", ".join(f"{t:g}: {s:.4f}" for t, s in sorted(scored.items())))
    (HERE / "chosen.json").write_text(json.dumps(taus, indent=1, sort_keys=True) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description="the votes-per-coordinate experiment's fits")
    parser.add_argument("--phase", choices=["search", "runs", "floor"], required=True)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--kernels", default=None, help="ATEN_CPU_CAPABILITY of the floor phase's reruns (default: "
                        "avx2 on an AVX-512 machine, default — ATen's scalar kernels — on an AVX2 one)")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    kernels = args.kernels or other_kernels()
    fits = {"search": search_fits, "runs": grid_fits, "floor": lambda: floor_fits(kernels)}[args.phase]()
    todo = [fit for fit in fits if not fit.finished()]
    cost = sum(SECONDS[fit.arm] for fit in todo) / max(1, args.jobs) / 60
    print(f"{args.phase}: {len(fits) - len(todo)} of {len(fits)} fits kept, {len(todo)} to run, ~{cost:.0f} min "
          f"on {args.jobs} core(s)", flush=True)
    if args.dry_run:
        return
    with ThreadPoolExecutor(args.jobs) as pool:
        for line in pool.map(Fit.run, todo):
            print(line, flush=True)
    if args.phase == "search":
        sys.path.insert(0, str(HERE))
        pick_taus()


if __name__ == "__main__":
    main()
