"""The paper's CIFAR-10 LeNet-5 comparison at its own scale, with the batched client runner on one GPU.

100 clients × 500 images, 10 per round, E = 5, batch 50, Dirichlet ρ ∈ {0.1, 0.6}; FedAvg, FedAvgM,
SCAFFOLD, FedBCGD, FedBCGD+; 3 seeds; every run stops at the same upload budget (100 d per sampled
client, ``model.max_upload_d``) and is evaluated on the test set at every 10 d (``model.eval_every_d``).
The settings are configs/paper/lenet5_cifar10_rho*.yaml's, with ``--model.client_runner batched``.

    python docs/paper_scale/run.py --data PATH [--out runs/paper_scale] [--jobs 8]
    python docs/paper_scale/run.py pack ../shared/data/cifar10-jpeg data/cifar10_jpeg.pack   # for a machine without it

``--data``: an ImageFolder root (``train/<class>/*.jpg``, ``test/<class>/*.jpg``; read through the ordinary
``data.dataset imagefolder`` path and its uint8 cache) or a ``.pack`` file from ``pack`` (the JPEG files'
bytes in one file, ~57 MB for CIFAR-10: unpacked next to it once). Before the grid it times a few rounds
with ``--jobs`` runs at once and prints the expected time: Σ over runs of rounds × seconds per round ×
the algorithm's cost (SCAFFOLD 1.1, FedBCGD+ 2: its SVRG term is a second forward/backward), ÷ jobs.
Then the runs (``--jobs`` at a time, one process each), then ``fl-lightning report`` per ρ:
``OUT/rho0.1/report.md``, ``OUT/rho0.6/report.md`` (tables, curves). ``--tiny`` is the CI size (5 clients × 10 images).
"""
from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "paper" / "lenet5_cifar10_rho{rho}.yaml"
ALGORITHMS = ("fedavg", "fedavgm", "scaffold", "fedbcgd", "fedbcgd_plus")
# arms beside the algorithms: name → (algorithm, its options); FedBCGD+ without the SVRG term (spec Eq. 4), which
# failed at ρ 0.1 (docs/paper_scale/results.md)
ARMS = {"fedbcgd_plus_no_svrg": ("fedbcgd_plus", ["--model.algorithm.init_args.variance_reduction", "false"])}
# per-round time relative to FedAvg (hooks; SVRG's second pass)
COST = {"scaffold": 1.1, "fedbcgd_plus": 2.0, "fedbcgd_plus_no_svrg": 1.1}
CALIBRATION_ROUNDS = 4  # the first is a warm-up
CACHE_DIR = "~/.cache/fl-lightning"  # FederatedDataModule's default cache_dir


def cli() -> str:
    return str(Path(sys.executable).with_name("fl-lightning"))


def pack(source: str, destination: str) -> None:
    """Every file under ``source`` in one torch file: the bytes end to end, their offsets, their relative paths."""
    paths = sorted(p for p in Path(source).rglob("*") if p.is_file())
    contents = [p.read_bytes() for p in paths]
    names = "\n".join(str(p.relative_to(source)) for p in paths).encode()
    offsets = torch.tensor([0] + [len(c) for c in contents], dtype=torch.int64).cumsum(0)
    torch.save({"names": torch.frombuffer(bytearray(names), dtype=torch.uint8), "offsets": offsets,
                "bytes": torch.frombuffer(bytearray(b"".join(contents)), dtype=torch.uint8)}, destination)
    print(f"packed {len(paths)} files, {os.path.getsize(destination) / 2**20:.1f} MiB → {destination}")


def image_root(data: str) -> str:
    """An ImageFolder root: ``data`` itself, or a pack unpacked next to it (once)."""
    if os.path.isdir(data):
        return data
    target = data + ".d"
    if not os.path.isdir(target):
        packed = torch.load(data, weights_only=True)
        names = packed["names"].numpy().tobytes().decode().split("\n")
        offsets, content = packed["offsets"].tolist(), packed["bytes"].numpy()
        for i, relative in enumerate(names):
            path = Path(target + ".partial") / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content[offsets[i]:offsets[i + 1]].tobytes())
        os.replace(target + ".partial", target)
    return target


def warm_cache(root: str) -> None:
    """Decodes the images once into the runs' uint8 cache (data.cache_dir's default), before runs start at once."""
    from fl_lightning.data.image_datasets import load_image_folder
    from fl_lightning.data.split import DataOptions
    started = time.perf_counter()
    load_image_folder(DataOptions(root=root, cache_dir=os.path.expanduser(CACHE_DIR)))
    print(f"images decoded or read from {CACHE_DIR} in {time.perf_counter() - started:.0f} s", flush=True)


def registered_algorithms() -> list[str]:
    from fl_lightning.algorithms import REGISTRY
    return list(REGISTRY)


def rounds_to_budget(name: str, budget: float) -> int:
    """Rounds until ``comm/upload_d`` reaches the budget: d per round for FedAvg(M), 2d for SCAFFOLD, the
    mean block upload (and as much again for FedBCGD+'s control variates) for the FedBCGD family."""
    from fl_lightning.federation.blocks import partition_for
    from fl_lightning.models import LeNet5
    from fl_lightning.module_options import resolve
    algorithm = ARMS.get(name, (name,))[0]
    algo, _ = resolve(algorithm, None)
    blocks = partition_for(LeNet5(num_classes=10, in_channels=3), algo)
    if blocks is None:
        per_round = 2.0 if algorithm == "scaffold" else 1.0
    else:
        sizes = [sum(b - a for a, b in blocks.upload_ranges(j)) for j in range(blocks.num_blocks)]
        per_round = sum(sizes) / len(sizes) / blocks.num_params * (2 if algorithm == "fedbcgd_plus" else 1)
    return int(-(-budget // per_round))


def command(args, arm: str, rho: str, seed: int, name: str, budget: float, save_dir: str,
            rounds=None) -> list[str]:
    algorithm, options = ARMS.get(arm, (arm, []))
    cmd = [cli(), "fit", "--config", str(CONFIG).format(rho=rho), "--model.algorithm", algorithm, *options,
           "--seed_everything", str(seed), "--data.dataset", "imagefolder", "--data.root", args.root,
           "--data.download", "false", "--model.client_runner", args.runner, "--model.max_upload_d", str(budget),
           "--model.eval_every_d", str(args.eval_every_d), "--trainer.check_val_every_n_epoch", "1",
           "--trainer.accelerator", args.accelerator, "--trainer.devices", "1",
           "--trainer.enable_progress_bar", "false", "--trainer.enable_checkpointing", "false",
           "--trainer.logger.init_args.save_dir", save_dir, "--trainer.logger.init_args.name", name]
    if rounds is not None:
        cmd += ["--trainer.max_epochs", str(rounds)]
    if args.test_samples is not None:  # a seeded subsample of test/, recorded in each run's config.yaml
        cmd += ["--data.eval_samples", str(args.test_samples)]
    if args.tiny:  # the CI size: every client in every round (FedBCGD needs S ≥ N = 5)
        cmd += ["--data.num_clients", "5", "--data.samples_per_client", "10", "--model.clients_per_round", "5",
                "--model.batch_size", "5", "--model.local_epochs", "1"]
    return cmd


def run(cmd: list[str], log: Path) -> int:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    with open(log, "w") as out:
        return subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env).returncode


def round_seconds(save_dir: str) -> list[float]:
    """time/round_s of every round after the first, from every metrics.csv under ``save_dir``."""
    times = []
    for path in Path(save_dir).rglob("metrics.csv"):
        with open(path) as f:
            rows = [row for row in csv.DictReader(f) if row.get("time/round_s")]
        times += [float(row["time/round_s"]) for row in rows if float(row["round"]) > 1]
    return times


def calibrate(args, out: Path, rho: str) -> tuple:
    """(seconds per FedAvg round, seconds of a run's start-up and end) with ``--jobs`` runs at once."""
    calibration = str(out / "calibration")
    started = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(lambda i: run(command(args, "fedavg", rho, 100 + i, f"run{i}", 1e9, calibration,
                                            CALIBRATION_ROUNDS), out / f"calibration{i}.log"), range(args.jobs)))
    wall, measured = time.perf_counter() - started, round_seconds(calibration)
    if not measured:
        return None, None
    per_round = sorted(measured)[len(measured) // 2]
    return per_round, max(0.0, wall - CALIBRATION_ROUNDS * per_round)


def main() -> int:
    if sys.argv[1:2] == ["pack"]:
        pack(*sys.argv[2:4])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="ImageFolder root or .pack file of CIFAR-10")
    parser.add_argument("--out", default="runs/paper_scale")
    parser.add_argument("--jobs", type=int, default=8, help="runs at once (processes sharing the GPU)")
    parser.add_argument("--budget_d", type=float, default=100.0)
    parser.add_argument("--eval_every_d", type=float, default=10.0)
    parser.add_argument("--test_samples", type=int, help="evaluate on this many test images (data.eval_samples: "
                        "the same seeded draw in every run, recorded in config.yaml); default all")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--rhos", default="0.1,0.6")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS),
                        help=f"algorithms and arms ({', '.join(ARMS)})")
    parser.add_argument("--accelerator", default="gpu")
    parser.add_argument("--runner", default="batched", help="model.client_runner (batched_compiled: torch.compile'd)")
    parser.add_argument("--target", type=float, default=0.4, help="fl-lightning report's target test accuracy")
    parser.add_argument("--tiny", action="store_true", help="the CI size (5 clients × 10 images, E = 1)")
    parser.add_argument("--seconds_per_round", type=float, help="skip the calibration: this FedAvg round time")
    parser.add_argument("--estimate_only", action="store_true", help="calibrate, print the expected time, stop")
    args = parser.parse_args()
    unknown = [a for a in args.algorithms.split(",") if a not in ARMS and a not in registered_algorithms()]
    if unknown:  # before anything is unpacked, decoded or run
        print(f"run.py: error: --algorithms: {', '.join(unknown)} is neither a registered algorithm nor an arm "
              f"({', '.join(ARMS)}); fix the name", file=sys.stderr)
        return 2
    args.root = image_root(args.data)
    warm_cache(args.root)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds, rhos = [int(s) for s in args.seeds.split(",")], args.rhos.split(",")
    algorithms = args.algorithms.split(",")
    grid = [(a, rho, seed) for rho in rhos for a in algorithms for seed in seeds]

    if args.seconds_per_round is None:
        per_round, start_up = calibrate(args, out, rhos[0])
        if per_round is None:
            print(f"calibration failed: see {out}/calibration0.log")
            return 1
    else:
        per_round, start_up = args.seconds_per_round, 0.0
    rounds = {a: rounds_to_budget(a, args.budget_d) for a in algorithms}
    waves = -(-len(grid) // args.jobs)
    total = sum(rounds[a] * per_round * COST.get(a, 1.0) for a, _, _ in grid) / min(args.jobs, len(grid))
    print(f"{len(grid)} runs ({len(algorithms)} algorithms × ρ {args.rhos} × seeds {args.seeds}), "
          f"{args.budget_d:g} d each: rounds {rounds}; {per_round * 1e3:.0f} ms a FedAvg round and {start_up:.0f} s "
          f"start-up per run with {args.jobs} runs at once → expected ≈ {(total + waves * start_up) / 60:.1f} min "
          "(+ evaluation)", flush=True)
    if args.estimate_only:
        return 0

    started = time.perf_counter()

    def one(item) -> int:
        algorithm, rho, seed = item
        name = f"{algorithm}_seed{seed}"
        return run(command(args, algorithm, rho, seed, name, args.budget_d, str(out / f"rho{rho}")),
                   out / f"rho{rho}_{name}.log")

    with ThreadPoolExecutor(args.jobs) as pool:
        codes = list(pool.map(one, grid))
    failed = [f"{a} ρ {rho} seed {s}" for (a, rho, s), code in zip(grid, codes) if code]
    print(f"{len(grid) - len(failed)} of {len(grid)} runs done in {(time.perf_counter() - started) / 60:.1f} min"
          + (f"; failed: {', '.join(failed)} (logs in {out})" if failed else ""), flush=True)
    for rho in rhos:
        subprocess.run([cli(), "report", str(out / f"rho{rho}"), "--target", str(args.target), "--label", "dir",
                        "--at-d", ",".join(f"{args.budget_d * k / 4:g}" for k in (1, 2, 3, 4)),
                        "--title", f"CIFAR-10 LeNet-5, ρ = {rho}, paper scale", "--out", str(out / f"rho{rho}" / "report")],
                       check=False)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
