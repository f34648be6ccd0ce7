"""SIGKILL at random moments, many times over: the quickstart always resumes from a loadable
checkpoint (``--ckpt_path last``) and ends with the metrics of an uninterrupted run —
also with SCAFFOLD, whose control variates live in the client-state files, and with the batched
client runner (model.client_runner batched)."""
import csv
import glob
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fl_lightning.runs.checkpoint_io import load_weights_only

QUICKSTART = str(Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml")
ROUNDS = 30  # ~75 ms each: three kills, each after 1-5 rounds of progress, leave rounds to spare
KILLS = 3


def command(name: str, *extra: str) -> list[str]:
    cli = str(Path(sys.executable).with_name("fl-lightning"))
    return [cli, "fit", "--config", QUICKSTART, "--trainer.max_epochs", str(ROUNDS),
            "--trainer.enable_progress_bar", "false", "--trainer.logger.init_args.name", name, *extra]


def checkpoints(name: str) -> list[str]:
    return glob.glob(f"runs/{name}/*/*/checkpoints/*.ckpt")  # runs/<name>/<label>/version_N


def rows_by_round(name: str) -> dict[str, list[dict]]:
    """Every complete row any version of the run wrote, by round, empty cells dropped."""
    found: dict[str, list[dict]] = {}
    for path in sorted(glob.glob(f"runs/{name}/*/version_*/metrics.csv")):
        with open(path) as f:
            for row in csv.DictReader(f):
                if None in row.values() or None in row or not row.get("round"):
                    continue  # a line torn by the kill
                found.setdefault(row["round"], []).append({k: v for k, v in row.items()
                                                           if v != "" and not k.startswith("time/")})
    return found


def newest_state(name: str) -> dict:
    return load_weights_only(max(checkpoints(name), key=os.path.getmtime))["state_dict"]


@pytest.mark.parametrize("algorithm, runner", [("fedavgm", "serial"), ("scaffold", "serial"), ("scaffold", "batched")])
def test_sigkill_at_random_moments_then_resume_equals_the_uninterrupted_run(algorithm, runner):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # the same thread count in every process: bit-identical sums
    algorithm = [algorithm, "--model.client_runner", runner]
    subprocess.run(command("full", "--model.algorithm", *algorithm), env=env, check=True, capture_output=True)

    rng = random.Random(20261130)
    kills = 0
    while True:
        seen = set(checkpoints("killed"))
        with open("stderr.txt", "w") as stderr:  # a file, not a pipe: a full pipe would stall the process
            process = subprocess.Popen(command("killed", "--model.algorithm", *algorithm, "--ckpt_path", "last"),
                                       env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        if kills == KILLS:
            assert process.wait(timeout=300) == 0, Path("stderr.txt").read_text()[-2000:]
            break
        deadline = time.monotonic() + 120
        while process.poll() is None and not set(checkpoints("killed")) - seen and time.monotonic() < deadline:
            time.sleep(0.01)  # wait for this process to make progress (a new checkpoint) ...
        time.sleep(rng.uniform(0.0, 0.3))  # ... then kill it somewhere in a later round or checkpoint write
        assert process.poll() is None, f"the run ended before kill {kills + 1}: {Path('stderr.txt').read_text()[-2000:]}"
        process.send_signal(signal.SIGKILL)
        process.wait()
        kills += 1
    assert kills == KILLS and [p.split("/")[-1] for p in glob.glob("runs/killed/*/version_*")] == ["version_0"]  # one folder, resumed

    full = {round_: rows[0] for round_, rows in rows_by_round("full").items()}
    assert len(full) == ROUNDS
    interrupted = rows_by_round("killed")
    assert sorted(interrupted, key=float) == sorted(full, key=float)  # every round logged by some piece
    for round_, rows in interrupted.items():
        for row in rows:  # rows logged before a kill and again after the resume: all the same
            assert row == full[round_], round_
    final, expected = newest_state("killed"), newest_state("full")
    assert final.keys() == expected.keys()
    assert all(torch.equal(final[key], expected[key]) for key in final)
