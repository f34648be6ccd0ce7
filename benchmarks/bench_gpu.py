"""One round of every preset and the paper's LeNet-5 round on a GPU, against a plain PyTorch loop
there (issue 21; at most ~5 minutes on one GPU). Writes a Markdown table to stdout and, when $OUT
is set, to $OUT/bench_gpu.md.

    python benchmarks/bench_gpu.py               # on a machine with CUDA
    python benchmarks/bench_gpu.py --device cpu --repeats 1 --presets fedavg   # a dry run anywhere

The work is bench_loop's round (LeNet-5, 10 clients × 500 CIFAR-shaped samples, batch 50, one local
epoch), data on the device. Per preset: one warm-up round, then ``--repeats`` rounds in one fit;
the median against the median plain round (plain rounds interleaved with the presets). Also
FedAvg with 2 and 4 clients at a time (``--model.parallel_clients``, one CUDA stream each).
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
import warnings

import pytorch_lightning as pl
import torch

from bench_loop import LR, WD, fl_rounds, make_data, plain_round
from fl_lightning.algorithms import REGISTRY
from fl_lightning.models import LeNet5


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per preset")
    parser.add_argument("--presets", default=",".join(name for name in REGISTRY if name != "centralized"))
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_gpu: no CUDA device here; nothing timed (run it where a GPU is, or --device cpu for a dry run)")
        return 2
    warnings.filterwarnings("ignore")
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    pl.seed_everything(0, verbose=False)
    device = torch.device(args.device)
    x, y = (t.to(device) for t in make_data())
    model = LeNet5().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, weight_decay=WD)
    generator = torch.Generator().manual_seed(0)  # batch orders drawn on the CPU, as in the plain loop
    accelerator = "gpu" if args.device == "cuda" else "cpu"
    plain_round(model, optimizer, x, y, generator)  # warm-up (kernels, allocator)
    plain, rows = [], []
    cases = [(name, 1) for name in args.presets.split(",")] + [("fedavg", 2), ("fedavg", 4)]
    started = time.perf_counter()
    for name, k in cases:
        plain.append(plain_round(model, optimizer, x, y, generator))
        times = fl_rounds(x, y, 1 + args.repeats, name, accelerator=accelerator, parallel_clients=k)[1:]
        rows.append((name if k == 1 else f"{name}, {k} clients at a time", statistics.median(times)))
    base = statistics.median(plain)
    name = torch.cuda.get_device_name(device) if args.device == "cuda" else "CPU"
    lines = [f"{name}, torch {torch.__version__}; plain LeNet-5 round {base * 1e3:.0f} ms (median of {len(plain)}); "
             f"{time.perf_counter() - started:.0f} s in all", "",
             "| preset | round (ms) | round / plain round |", "| --- | --- | --- |"]
    lines += [f"| {label} | {seconds * 1e3:.0f} | {seconds / base:.2f} |" for label, seconds in rows]
    text = "\n".join(lines)
    print(text)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "bench_gpu.md"), "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
