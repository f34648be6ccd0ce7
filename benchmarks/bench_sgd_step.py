"""Whether the local optimizer's fast step earns its place (``plain_sgd_step`` in
fl_lightning/federation/local_training.py): CPU seconds of a round with it and with torch's own
``optimizer.step()``, the cross-device setting of bench_parallel.py (50 clients × 50 images a round,
batch 10, the small CNN: 250 steps), K = 1, one thread. The two ways' fits alternate (A B, B A, …)
and CPU time (not wall time) is read, so a loaded machine moves both alike.

    .venv/bin/python benchmarks/bench_sgd_step.py [--repeats 6]
"""
from __future__ import annotations

import argparse
import logging
import statistics
import time
import warnings

import torch

import fl_lightning.federation.local_training as local_training
from bench_parallel import Setting, fl_rounds

ROUNDS = 4  # timed rounds a fit, after its first


def round_cpu_seconds(setting: Setting, fast: bool, rounds: int = ROUNDS) -> list[float]:
    """Rounds 2.. of a FedAvg fit; ``fast=False`` makes the loop fall back to ``optimizer.step()``."""
    fast_step = local_training.plain_sgd_step
    local_training.plain_sgd_step = fast_step if fast else (lambda optimizer: None)
    try:
        return fl_rounds(setting, 1, rounds=rounds, clock=time.process_time)
    finally:
        local_training.plain_sgd_step = fast_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=6, help="fits of each way, alternating")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    setting = Setting("cross-device")
    round_cpu_seconds(setting, True, 1), round_cpu_seconds(setting, False, 1)  # warm-up
    times = {True: [], False: []}
    for repeat in range(args.repeats):
        for fast in (True, False) if repeat % 2 == 0 else (False, True):
            times[fast].extend(round_cpu_seconds(setting, fast))
    fast, torch_step = statistics.median(times[True]), statistics.median(times[False])
    steps = setting.per_round * -(-setting.per_client // setting.batch)
    print(f"cross-device, K=1, one thread, {args.repeats} fits × {ROUNDS} rounds each way, median CPU s a round: "
          f"fast step {fast:.4f}, torch's step {torch_step:.4f}, ratio {fast / torch_step:.3f} "
          f"({(torch_step - fast) / steps * 1e6:.0f} µs a step)")


if __name__ == "__main__":
    main()
