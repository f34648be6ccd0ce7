"""The system simulation's own cost.

1. Overhead on the quickstart: the same fit (fedavgm, 10 rounds, one thread) with and without
   ``--model.system mobile --model.round_policy over_selection``; the simulator's own time per round
   (sampling among the available, timing, the policy) is measured directly, as a share of the round.
2. Memory: RSS growth of building the population and simulating 100 rounds' sampling and selection
   for 1,000 and 10,000 clients (each in a fresh process).

    .venv/bin/python benchmarks/bench_systems.py
"""
from __future__ import annotations

import csv
import glob
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def memory(num_clients: int) -> None:
    import numpy as np
    from fl_lightning.systems import RoundPolicy, RoundSimulator, SystemModel
    before = rss_mb()
    sim = RoundSimulator(SystemModel("mobile").population(num_clients), RoundPolicy("over_selection"), 10)
    for r in range(100):
        ids = sim.sample(np.random.default_rng(r), 100)
        times = sim.population.client_times(ids, [1e6] * len(ids), [1e6] * len(ids), [500] * len(ids))
        accepted, duration = sim.policy.select(times, np.ones(len(ids), bool), 100)
        sim.clock.now_s += duration
    print(f"{num_clients} clients: population arrays {sim.population.nbytes / 1e6:.2f} MB, "
          f"RSS growth {rss_mb() - before:.2f} MB (after 100 simulated rounds)")


def fit(extra: list[str]):
    from fl_lightning.cli.lightning_cli import FederatedCLI
    with tempfile.TemporaryDirectory() as tmp:
        cli = FederatedCLI(args=["fit", "--config", str(ROOT / "configs" / "quickstart.yaml"), "--trainer.max_epochs",
                                 "10", "--trainer.enable_progress_bar", "false", "--trainer.enable_checkpointing",
                                 "false", "--trainer.enable_model_summary", "false",
                                 "--trainer.logger.init_args.save_dir", tmp, *extra])
        (path,) = glob.glob(os.path.join(tmp, "**", "metrics.csv"), recursive=True)
        return list(csv.DictReader(open(path))), cli.model.loop.schedule


def overhead() -> None:
    import torch
    torch.set_num_threads(1)
    off, _ = fit([])
    on, simulator = fit(["--model.system", "mobile", "--model.round_policy", "over_selection"])
    round_off = sum(float(r["time/round_s"]) for r in off if r.get("time/round_s")) / 10
    round_on = sum(float(r["time/round_s"]) for r in on if r.get("time/round_s")) / 10
    own = simulator.seconds / 10
    print(f"quickstart round wall time (10 rounds, 1 thread): off {round_off * 1e3:.1f} ms, on {round_on * 1e3:.1f} ms "
          f"(different clients); the simulator's own time {own * 1e3:.3f} ms per round = {100 * own / round_on:.2f} %")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        memory(int(sys.argv[1]))
    else:
        for n in (1000, 10000):
            subprocess.run([sys.executable, __file__, str(n)], check=True)
        overhead()
