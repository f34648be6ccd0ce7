"""How close local training gets to this CPU's fp32 matrix-multiply peak (``make bench``).

The peak: the best of a few 2048² fp32 matrix products at the process's thread count. The work of a
round: the FLOPs of one LeNet-5 training step at batch 50 (torch.utils.flop_counter, forward and
backward) times the steps of bench_loop's round (10 clients × 500 samples). Timed interleaved, medians:
a plain PyTorch loop with contiguous and with channels_last batches, and fl-lightning's round with
``channels_last`` off (before) and on (after, the default for conv networks on the CPU); with
``bf16-mixed`` too where the CPU has native bf16 instructions (else it says so and skips it).
"""
from __future__ import annotations

import argparse
import logging
import statistics
import time
import warnings

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from bench_loop import BATCH, CLIENTS, LR, PER_CLIENT, WD, fl_rounds, make_data, plain_round
from fl_lightning.federation.memory_format import cpu_has_native_bf16
from fl_lightning.models import LeNet5


def matmul_peak_gflops(size: int = 2048, repeats: int = 5) -> float:
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * size ** 3 / best / 1e9


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def round_gflop() -> float:
    model, x, y = LeNet5(), torch.randn(BATCH, 3, 32, 32), torch.randint(0, 10, (BATCH,))
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(x), y).backward()
    return counter.get_total_flops() * CLIENTS * PER_CLIENT / BATCH / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="interleaved measurements of each side")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    pl.seed_everything(0, verbose=False)
    x, y = make_data()
    model = LeNet5()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, weight_decay=WD)
    generator = torch.Generator().manual_seed(0)
    sides = {"plain loop, contiguous": lambda: plain_round(model, optimizer, x, y, generator),
             "plain loop, channels_last": lambda: plain_round(model, optimizer, x, y, generator, channels_last=True),
             "fl-lightning, channels_last off (before)": lambda: fl_rounds(x, y, 1, channels_last=False)[0],
             "fl-lightning, default (after)": lambda: fl_rounds(x, y, 1)[0]}
    if cpu_has_native_bf16():
        sides["fl-lightning, bf16-mixed"] = lambda: fl_rounds(x, y, 1, precision="bf16-mixed")[0]
    for run in sides.values():  # warm-up
        run()
    times = {name: [] for name in sides}
    for _ in range(args.repeats):
        for name, run in sides.items():
            times[name].append(run())
    peak, work = matmul_peak_gflops(), round_gflop()
    print(f"threads: {torch.get_num_threads()}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"fp32 matmul peak {peak:.1f} GFLOP/s, one round {work:.1f} GFLOP (LeNet-5, batch {BATCH})")
    for name, seconds in times.items():
        median = statistics.median(seconds)
        print(f"{name:42s}: {median:6.2f} s/round, {work / median:5.1f} GFLOP/s = {work / median / peak:5.1%} of peak")
    if not cpu_has_native_bf16():
        print("bf16-mixed: not timed, this CPU has no native bf16 instructions (AVX512-BF16 or AMX): emulated, slower")


if __name__ == "__main__":
    main()
