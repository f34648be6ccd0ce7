"""One process × 2 threads against 2 DDP processes × 1 thread (``make bench-distributed``).

Two settings, FedAvg, validation off, CIFAR-shaped random images (3×32×32):
  cross-device  1,000 clients × 50 samples, 50 clients per round, batch 10, a small 2-conv CNN
  paper         10 clients × 500 samples, all 10 per round, batch 50, LeNet-5
Each configuration runs as its own command (2 processes through Lightning's DDP launcher, gloo),
rounds 1–2 are warm-up, the rest are timed on rank 0 (a round ends after the all-reduce, so it
includes waiting for the other rank). The two configurations alternate, twice each; samples/s
is the median over the timed rounds of both repeats. Target: 2 processes ≥ 1.1× one process in
the cross-device setting.

    .venv/bin/python benchmarks/bench_distributed.py [--repeats 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

SETTINGS = {  # clients, samples per client, clients per round, batch, network, rounds
    "cross-device": (1000, 50, 50, 10, "cnn", 12),
    "paper": (10, 500, 10, 50, "lenet5", 7),
}
CONFIGS = {"1 process × 2 threads": (1, 2), "2 processes × 1 thread": (2, 1)}
WARMUP = 2


def run(setting: str, devices: int, threads: int) -> None:
    """One configuration (every DDP rank runs this); rank 0 prints the timed rounds."""
    import pytorch_lightning as pl
    import torch
    from torch import nn

    from fl_lightning import FederatedDataModule, FederatedModule
    from fl_lightning.data import DataSplit
    from fl_lightning.models import LeNet5

    from bench_loop import RoundTimer  # this script's folder is on sys.path

    torch.set_num_threads(threads)
    clients, per_client, per_round, batch, network, rounds = SETTINGS[setting]
    generator = torch.Generator().manual_seed(0)
    n = clients * per_client
    x = torch.randn(n, 3, 32, 32, generator=generator)
    y = torch.randint(0, 10, (n,), generator=generator)
    split = DataSplit(x, y, x[:100], y[:100], 10)
    parts = [torch.arange(i * per_client, (i + 1) * per_client) for i in range(clients)]
    if network == "cnn":
        net = nn.Sequential(nn.Conv2d(3, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 5), nn.ReLU(),
                            nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 5 * 5, 10))
    else:
        net = LeNet5(num_classes=10)
    pl.seed_everything(0, verbose=False)
    module = FederatedModule(net, algorithm="fedavg", clients_per_round=per_round, batch_size=batch, lr=0.05)
    module.prints_summary = False  # a timed round, not a run to report
    timer = RoundTimer()
    trainer = pl.Trainer(max_epochs=rounds, accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto",
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0, callbacks=[timer])
    trainer.fit(module, FederatedDataModule.from_tensors(split, parts))
    if trainer.is_global_zero:
        print("ROUND_SECONDS " + " ".join(f"{t:.4f}" for t in timer.times[WARMUP:]), flush=True)


def measure(setting: str, devices: int, threads: int) -> list[float]:
    command = [sys.executable, os.path.abspath(__file__), "--run", setting, "--devices", str(devices),
               "--threads", str(threads)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("ROUND_SECONDS ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{setting}, {devices} process(es) failed:\n{done.stderr[-3000:]}")
    return [float(t) for t in lines[0].split()[1:]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--run", choices=SETTINGS)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.run:
        return run(args.run, args.devices, args.threads)
    print("| setting | configuration | samples/s | ratio |\n|---|---|---|---|")
    for setting, (_, per_client, per_round, *_rest) in SETTINGS.items():
        times = {name: [] for name in CONFIGS}
        for _ in range(args.repeats):
            for name, (devices, threads) in CONFIGS.items():
                times[name] += measure(setting, devices, threads)
        rates = {name: per_round * per_client / statistics.median(t) for name, t in times.items()}
        base = rates["1 process × 2 threads"]
        for name, rate in rates.items():
            print(f"| {setting} | {name} | {rate:,.0f} | {rate / base:.2f} |", flush=True)


if __name__ == "__main__":
    main()
