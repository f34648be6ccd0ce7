"""Kernels a round would launch, counted on any device: the launch-bound cost of a GPU round, measured on a CPU.

A LeNet-5 round on a GPU is bound by kernel launches, not arithmetic (docs/benchmarks.md, "The GPU script").
This script runs bench_loop's round (LeNet-5, CIFAR-shaped samples, batch 50, one local epoch) through a real
Trainer and counts every op dispatched below autograd and vmap (``TorchDispatchMode``: what would run as a
kernel), leaving out views (no kernel), in the second round. It prints the ops per round, per local step
and per client of the round's rest, the host-device synchronisations (``_local_scalar_dense``: a tensor read
as a Python number) and the source lines that dispatch most.

    python benchmarks/count_launches.py [--algorithm fedbcgd_plus] [--runner batched] [--clients 10]
"""
from __future__ import annotations

import argparse
import collections
import traceback
from pathlib import Path

import pytorch_lightning as pl
from torch.utils._python_dispatch import TorchDispatchMode

import bench_loop
from bench_loop import fl_rounds, make_data, quiet

ROOT = Path(__file__).resolve().parents[1]
VIEWS = {"view", "_unsafe_view", "slice", "expand", "t", "transpose", "as_strided", "unsqueeze", "squeeze",
         "permute", "select", "alias", "detach", "_reshape_alias", "unbind", "split", "split_with_sizes", "reshape"}


class Counter(TorchDispatchMode):
    """Counts non-view ops by name and by the innermost fl-lightning source line that dispatched them."""

    def __init__(self):
        super().__init__()
        self.on, self.ops, self.lines = False, collections.Counter(), collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if self.on and name not in VIEWS:
            self.ops[name] += 1
            ours = [f for f in traceback.extract_stack() if f.filename.startswith(str(ROOT))
                    and "site-packages" not in f.filename and not f.filename.endswith("count_launches.py")]
            if ours:
                self.lines[f"{Path(ours[-1].filename).relative_to(ROOT)}:{ours[-1].lineno}"] += 1
        return func(*args, **(kwargs or {}))


class SecondRound(pl.Callback):
    def __init__(self, counter: Counter):
        self.counter = counter

    def on_train_epoch_start(self, trainer, module):
        self.counter.on = trainer.current_epoch == 1

    def on_train_epoch_end(self, trainer, module):
        self.counter.on = False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", default="fedavg")
    parser.add_argument("--runner", default="batched", help="model.client_runner")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--per-client", type=int, default=bench_loop.PER_CLIENT)
    parser.add_argument("--top", type=int, default=12, help="source lines listed")
    args = parser.parse_args()
    quiet()
    bench_loop.PER_CLIENT = args.per_client  # fl_rounds splits the clients by it
    x, y = make_data(args.clients, args.per_client)
    counter = Counter()
    with counter:
        fl_rounds(x, y, 2, algorithm=args.algorithm, client_runner=args.runner, callbacks=[SecondRound(counter)])
    steps = -(-args.per_client // bench_loop.BATCH)
    total = sum(counter.ops.values())
    print(f"{args.algorithm}, {args.runner} runner, {args.clients} clients × {args.per_client} samples, batch "
          f"{bench_loop.BATCH} ({steps} local steps): {total} ops in round 2, "
          f"{counter.ops['_local_scalar_dense']} of them host-device synchronisations")
    for line, n in counter.lines.most_common(args.top):
        print(f"{n:6d}  {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
