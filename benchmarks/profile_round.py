"""Where one round's time goes: the host time of fl-lightning's functions, and on a GPU how busy the GPU was.

A LeNet-5 round on a GPU is bound by the host (docs/benchmarks.md, "The GPU script"): the GPU waits while
Python and the dispatcher queue the next kernel. This script runs bench_loop's round through a real Trainer
under ``torch.profiler`` (Python stacks on) in the second round of a fit and prints: the round's wall time;
on a GPU the time its kernels ran (the sum of every op's self device time) and the host's time blocked on
the device (``cudaStreamSynchronize``/``cudaDeviceSynchronize``/``cudaMemcpy*``); and the inclusive host
time of the fl-lightning functions that took most. Profiling slows the host, so the wall time here is
above bench_gpu's; the shares are what to read.

    python benchmarks/profile_round.py [--device cuda] [--runner batched] [--algorithm fedavg] [--clients 10]
    python benchmarks/profile_round.py --device cpu --setting cross-device --runner serial [--parallel-clients 2]

``--setting cross-device`` profiles bench_parallel.py's cross-device round instead (1,000 clients × 50 images,
50 a round, batch 10, its 2-conv CNN); with ``--parallel-clients 2`` the worker threads' ops are in the
profile too, so the host times add up to more than the wall.
"""
from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.profiler import ProfilerActivity, profile

import bench_loop
from bench_loop import fl_rounds, make_data, quiet

ROOT = str(Path(__file__).resolve().parents[1] / "fl_lightning")
WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cudaMemcpyAsync")


class ProfileSecondRound(pl.Callback):
    """``torch.profiler`` over the fit's second round (the first compiles, allocates and warms up)."""

    def __init__(self, device: torch.device):
        self.activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        self.profiler = None

    def on_train_epoch_start(self, trainer, module):
        if trainer.current_epoch == 1:
            bench_loop.synchronize(module.device)
            self.profiler = profile(activities=self.activities, with_stack=True)
            self.profiler.__enter__()

    def on_train_epoch_end(self, trainer, module):
        if trainer.current_epoch == 1:
            bench_loop.synchronize(module.device)
            self.profiler.__exit__(None, None, None)


PHASES = {  # label: the function whose inclusive host time it is (file: function; the batched runner's, then the serial one's)
    "the round (training_step)": "module.py: training_step",
    "clients trained (batched cohort)": "batched.py: _train_cohort",
    "— forward/backward": "stack.py: forward_backward",
    "— clip, hooks, SGD step": "batched.py: _local_step",
    "— minibatches drawn": "local_training.py: minibatches",
    "— uploads made (end of client)": "batched.py: _finish",
    "clients trained (serial)": "local_training.py: run_client",
    "— local steps (serial)": "local_training.py: train_local",
    "— minibatches drawn (serial)": "local_training.py: minibatches",
    "— upload made (serial)": "local_training.py: end_client",
    "clients handed back in order (threads)": "parallel.py: run",
    "uploads summed": "messages.py: add",
    "server update": "loop.py: server_update",
}


def breakdown(x: torch.Tensor, y: torch.Tensor, accelerator: str, top: int = 12, fit_options=None,
              **options) -> list[str]:
    """Markdown lines: wall, GPU busy and host waits; the round's phases; the ``top`` entries by self host time
    (fl-lightning's Python functions, excluding what they call, and the ops)."""
    device = x.device
    hook = ProfileSecondRound(device)
    wall = fl_rounds(x, y, 2, accelerator=accelerator, callbacks=[hook], **options, **(fit_options or {}))[1]
    inclusive: dict[str, float] = collections.Counter()
    own: dict[str, float] = collections.Counter()
    calls: dict[str, int] = collections.Counter()
    waited, waits = 0.0, 0
    for event in hook.profiler.events():
        name = event.name
        if name.startswith(ROOT):
            name = name[len(ROOT) + 1:]
        elif "/" in name or name.startswith("<built-in"):
            continue  # another package's Python function: its time is its caller's
        if name in WAITS:
            waited += event.cpu_time_total / 1e3
            waits += 1
        inclusive[name] += event.cpu_time_total / 1e3
        own[name] += event.self_cpu_time_total / 1e3
        calls[name] += 1
    label = ", ".join(f"{k} {v}" for k, v in options.items())
    lines = [f"Round 2 ({label}) under torch.profiler: wall {wall * 1e3:.1f} ms"]
    if device.type == "cuda":
        busy = sum(e.self_device_time_total for e in hook.profiler.key_averages()) / 1e3
        lines[0] += (f"; GPU kernels ran {busy:.1f} ms ({busy / (wall * 1e3):.0%} of the wall); the host waited on "
                     f"the device {waited:.1f} ms in {waits} calls")
    lines += ["", "| phase | host ms (inclusive) | calls |", "| --- | --- | --- |"]
    for label, function in PHASES.items():
        file, func = function.split(": ")
        matches = [name for name in inclusive if re.search(rf"(^|/){re.escape(file)}\(\d+\): {func}$", name)]
        if matches:
            lines.append(f"| {label} | {sum(inclusive[m] for m in matches):.1f} | {sum(calls[m] for m in matches)} |")
    lines += ["", "| function or op | host ms (self) | calls |", "| --- | --- | --- |"]
    for name, ms in own.most_common(top):
        lines.append(f"| {name} | {ms:.1f} | {calls[name]} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    parser.add_argument("--runner", default="batched", help="model.client_runner")
    parser.add_argument("--algorithm", default="fedavg")
    parser.add_argument("--clients", type=int, default=bench_loop.CLIENTS)
    parser.add_argument("--top", type=int, default=12, help="functions listed")
    parser.add_argument("--setting", default="paper-loop", choices=["paper-loop", "cross-device"],
                        help="paper-loop: bench_loop's round (LeNet-5, --clients × 500, batch 50); cross-device: "
                             "bench_parallel's (2-conv CNN, 1,000 × 50, 50 a round, batch 10)")
    parser.add_argument("--parallel-clients", type=int, default=1, help="model.parallel_clients")
    args = parser.parse_args()
    quiet()
    device = torch.device(args.device)
    fit_options = {}
    if args.setting == "cross-device":
        import bench_parallel
        setting = bench_parallel.Setting("cross-device")
        x, y = setting.x.to(device), setting.y.to(device)
        fit_options = dict(network=setting.network, per_client=setting.per_client, batch=setting.batch,
                           per_round=setting.per_round)
    else:
        x, y = (t.to(device) for t in make_data(args.clients))
    print("\n".join(breakdown(x, y, "gpu" if device.type == "cuda" else "cpu", args.top, fit_options,
                              algorithm=args.algorithm, client_runner=args.runner,
                              parallel_clients=args.parallel_clients)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
