"""Runs a finished DDP fit (2 CPU ranks, gloo, Lightning's own launcher) N times and counts the exit
codes (a fit that had finished every round once ended with ``terminate called without an
active exception``, exit 134).

    python benchmarks/ddp_exit_check.py [--runs 20] [--rounds 2]

Prints one line per run (exit code, seconds, any ``terminate called`` line) and then
``exit 0: K of N``; the script's own exit code is 0 only when every run exited 0.
"""
from __future__ import annotations

import argparse
import collections
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(rounds: int) -> tuple[int, float, str]:
    cli = Path(sys.executable).with_name("fl-lightning")
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_PORT": str(free_port()), "WANDB_MODE": "offline"}
        started = time.perf_counter()
        done = subprocess.run([str(cli), "fit", "--config", str(ROOT / "configs" / "quickstart.yaml"),
                               "--trainer.max_epochs", str(rounds), "--trainer.devices", "2",
                               "--trainer.accelerator", "cpu", "--trainer.strategy", "ddp",
                               "--trainer.enable_progress_bar", "false", "--trainer.enable_checkpointing", "false"],
                              cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - started
    bad = [line for line in (done.stdout + done.stderr).splitlines() if "terminate called" in line or "Aborted" in line]
    return done.returncode, seconds, bad[0] if bad else ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    codes = collections.Counter()
    for i in range(args.runs):
        code, seconds, bad = one_run(args.rounds)
        codes[code] += 1
        print(f"run {i + 1}: exit {code} in {seconds:.1f} s {bad}".rstrip(), flush=True)
    print(f"exit 0: {codes[0]} of {args.runs}" + (f" (others: {dict(codes)})" if codes[0] != args.runs else ""))
    return 0 if codes[0] == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
