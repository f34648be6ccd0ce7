"""LeNet-5 rounds on a GPU: a plain per-client PyTorch loop against fl-lightning's serial and batched client
runners (``model.client_runner``), plus one round of every preset (≤ 5 minutes on one H200). Writes Markdown
to stdout and, when $OUT is set, to $OUT/bench_gpu.md.

    python benchmarks/bench_gpu.py                        # on a machine with CUDA
    python benchmarks/bench_gpu.py --device cpu --quick   # a tiny dry run anywhere (2 clients, 2 presets)

The round is bench_loop's (10 clients × 500 CIFAR-shaped samples, batch 50, one local epoch, data on the
device). Measured: the plain loop, fl-lightning serial, batched (B = 10), batched with ``torch.compile``
(``model.client_runner batched_compiled``),
on a GPU the same compiled with CUDA graphs (``batched_graphed``, an experiment registered here), and 100 clients
in one batch (samples/s); where the serial and batched rounds' time goes (benchmarks/profile_round.py: GPU busy
against wall, the host's time by phase); the memory each client adds to a cohort (peak allocated at
B = 100 minus B = 10, over 90); the paper's Table 3 setting (100 clients, 10 per round, E = 5) timed
for a few rounds and projected to 1000 rounds (training only: evaluation not counted). Then every preset's
round, serial and batched (``--preset-repeats`` timed rounds each); a preset that refuses LeNet-5 (FedBN: no
normalisation layer) or the batched runner is listed with the reason, not timed, and presets not started
within ``--budget-s`` seconds are listed as not timed, so the script ends within about 5 minutes.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from bench_loop import BATCH, LR, PER_CLIENT, WD, fl_rounds, make_data, plain_round, quiet
from fl_lightning.algorithms import REGISTRY
from fl_lightning.errors import ConfigError
from fl_lightning.federation.batched import BatchedRunner
from fl_lightning.federation.seams import RUNNERS
from fl_lightning.models import LeNet5
from profile_round import breakdown

TABLE3_ROUNDS, TABLE3_EPOCHS, TABLE3_CLIENTS, TABLE3_PER_ROUND = 1000, 5, 100, 10


@RUNNERS.register("batched_graphed")
class GraphedBatchedRunner(BatchedRunner):
    """An experiment, not (yet) a runner of the library: the cohort's forward/backward compiled with
    ``mode="reduce-overhead"``, which replays it as a CUDA graph (one launch instead of one per kernel) where
    ``batched_compiled`` launches inductor's kernels one by one. Timed here; promoted once measured."""

    compile_options = {"mode": "reduce-overhead"}


def peak_memory(device: torch.device, run) -> float:
    """Peak bytes allocated while ``run()`` runs (0 on the CPU)."""
    if device.type != "cuda":
        run()
        return 0.0
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    run()
    return float(torch.cuda.max_memory_allocated(device))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--quick", action="store_true", help="2 clients, 4 for 'many', presets fedavg,fedbn")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per case")
    parser.add_argument("--presets", default=",".join(name for name in REGISTRY if name != "centralized"))
    parser.add_argument("--preset-repeats", type=int, default=2, help="timed rounds per preset and runner")
    parser.add_argument("--budget-s", type=float, default=270.0, help="presets not started after this are listed")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile cases")
    parser.add_argument("--no-profile", action="store_true", help="skip where the serial and batched rounds' time goes")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_gpu: no CUDA device here; nothing timed (run it where a GPU is, or --device cpu --quick)")
        return 2
    quiet()
    device, started = torch.device(args.device), time.perf_counter()
    clients, many = (2, 4) if args.quick else (10, 100)
    presets = "fedavg,fedbn" if args.quick else args.presets
    args.repeats = 1 if args.quick else args.repeats
    args.preset_repeats = 1 if args.quick else args.preset_repeats
    accelerator = "gpu" if args.device == "cuda" else "cpu"
    x, y = (t.to(device) for t in make_data(clients))
    big_x, big_y = (t.to(device) for t in make_data(many))
    model = LeNet5().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, weight_decay=WD)
    generator = torch.Generator().manual_seed(0)  # batch orders drawn on the CPU, as in the plain loop

    def timed(data, repeats=args.repeats, **options) -> float:
        return statistics.median(fl_rounds(*data, 1 + repeats, accelerator=accelerator, **options)[1:])

    plain_round(model, optimizer, x, y, generator, clients=clients)  # warm-up (kernels, allocator)
    plain = statistics.median(plain_round(model, optimizer, x, y, generator, clients=clients)
                              for _ in range(args.repeats))
    rows = [("plain per-client PyTorch loop", clients, plain)]
    rows.append(("fl-lightning, serial", clients, timed((x, y))))
    small = peak_memory(device, lambda: rows.append(("fl-lightning, batched (B = all)", clients,
                                                     timed((x, y), client_runner="batched"))))
    failures = []
    if not args.no_compile:
        try:
            rows.append(("fl-lightning, batched + torch.compile", clients,
                         timed((x, y), client_runner="batched_compiled")))
        except Exception as err:  # a compiler failure is a result to report, not the end of the benchmark
            failures.append(f"batched + torch.compile failed: {type(err).__name__}: {str(err).splitlines()[0]}")
    if device.type == "cuda" and not args.no_compile:
        try:
            rows.append(("fl-lightning, batched + torch.compile reduce-overhead (CUDA graphs; experiment)", clients,
                         timed((x, y), client_runner="batched_graphed")))
        except Exception as err:
            failures.append(f"batched + CUDA graphs failed: {type(err).__name__}: {str(err).splitlines()[0]}")
    profiles = [] if args.no_profile else [
        breakdown(x, y, accelerator, client_runner=runner) for runner in ("serial", "batched")]
    large = peak_memory(device, lambda: rows.append((f"fl-lightning, batched, {many} clients in one batch", many,
                                                     timed((big_x, big_y), client_runner="batched"))))
    per_client = (large - small) / (many - clients)
    table3 = {runner: timed((big_x, big_y), local_epochs=TABLE3_EPOCHS, per_round=TABLE3_PER_ROUND if not
                            args.quick else clients, client_runner=runner) for runner in ("serial", "batched")}
    lines = [f"{torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}, torch {torch.__version__}, "
             f"{torch.get_num_threads()} CPU threads; LeNet-5, {PER_CLIENT} samples per client, batch {BATCH}, E = 1",
             "", "| runner | clients | round (ms) | samples/s | × plain loop (samples/s) |", "| --- | --- | --- | --- | --- |"]
    base = clients * PER_CLIENT / plain
    for label, n, seconds in rows:
        rate = n * PER_CLIENT / seconds
        lines.append(f"| {label} | {n} | {seconds * 1e3:.1f} | {rate:,.0f} | {rate / base:.2f} |")
    lines += [""] + failures if failures else []
    lines += ["", f"Memory each client adds to a batched cohort (peak allocated, B = {many} vs {clients}): "
              f"{per_client / 2**20:.1f} MiB" if device.type == "cuda" else "Memory per client: CUDA only.", ""]
    for runner, seconds in table3.items():
        lines.append(f"Table 3 setting ({TABLE3_PER_ROUND if not args.quick else clients} of {many} clients per round, "
                     f"E = {TABLE3_EPOCHS}), {runner}: {seconds * 1e3:.0f} ms a round → {TABLE3_ROUNDS} rounds "
                     f"≈ {seconds * TABLE3_ROUNDS / 60:.1f} min (training only)")
    compiled = [seconds for label, _, seconds in rows if label.endswith("torch.compile")]
    if compiled:
        lines.append(f"Table 3 setting, batched + torch.compile, scaled from its E = 1 round of {clients} clients × "
                     f"{TABLE3_EPOCHS}: {compiled[0] * TABLE3_EPOCHS * 1e3:.0f} ms a round → {TABLE3_ROUNDS} rounds ≈ "
                     f"{compiled[0] * TABLE3_EPOCHS * TABLE3_ROUNDS / 60:.1f} min")
    for profile in profiles:
        lines += [""] + profile
    lines += ["", "| preset | serial round (ms) | batched round (ms) | serial / batched |", "| --- | --- | --- | --- |"]
    for name in presets.split(","):
        if time.perf_counter() - started > args.budget_s:
            lines.append(f"| {name} | not timed: the script's {args.budget_s:.0f} s budget was spent | | |")
            continue
        try:
            serial = timed((x, y), args.preset_repeats, algorithm=name)
        except ConfigError as err:
            lines.append(f"| {name} | skipped: {err} | | |")
            continue
        try:
            batched = timed((x, y), args.preset_repeats, algorithm=name, client_runner="batched")
            lines.append(f"| {name} | {serial * 1e3:.1f} | {batched * 1e3:.1f} | {serial / batched:.2f} |")
        except ConfigError as err:
            lines.append(f"| {name} | {serial * 1e3:.1f} | refused: {err} | |")
    lines += ["", f"{time.perf_counter() - started:.0f} s in all"]
    text = "\n".join(lines)
    print(text)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "bench_gpu.md"), "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
