"""Leftovers and merges: Ctrl-C in round 1 leaves no empty version_N, a fit killed there leaves its folder to the next
fit of the run; two fits at once are two versions, and report says when it joins versions of one run."""
import glob
import os
import signal
import subprocess
import time
from pathlib import Path

from fl_lightning.cli import main
from fl_lightning.runs.identity import read_run_id
from fl_lightning.runs.leftovers import is_leftover
from tests.test_cli import FL, QUICKSTART, QUIET

RUN = "runs/quickstart/fedavgm,seed=0"


def ctrl_c_delivered() -> None:
    """In the child before it starts: SIGINT as a terminal delivers it. A shell runs background jobs with SIGINT
    ignored, and Python keeps an ignored SIGINT ignored, so under a backgrounded test run Ctrl-C would never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_in_round_1_leaves_no_run_folder():
    slow = ["--model.local_epochs", "400", "--trainer.max_epochs", "2"]  # round 1 takes many seconds
    fit = subprocess.Popen([FL, "fit", "--config", QUICKSTART, *QUIET, *slow], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, preexec_fn=ctrl_c_delivered)
    run, deadline = "runs/quickstart/fedavgm,local_epochs=400,seed=0", time.monotonic() + 60
    while not glob.glob(f"{run}/version_0/config.yaml") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert os.listdir(f"{run}/version_0")  # its files exist while round 1 runs
    time.sleep(1.0)
    fit.send_signal(signal.SIGINT)
    output = fit.communicate(timeout=60)[0]
    assert fit.returncode != 0 and os.listdir(run) == [], output  # Lightning numbers the next fit's folder version_0


def test_report_says_in_one_line_when_it_joins_versions_of_one_run(capsys):
    for rounds in ("2", "3"):  # the same run id twice without a checkpoint: version_0 (2 rounds), version_1 (3)
        assert main(["fit", "--config", QUICKSTART, *QUIET, "--trainer.max_epochs", rounds,
                     "--trainer.enable_checkpointing", "false"]) == 0
    capsys.readouterr()
    assert main(["report", "runs", "--target", "0.05", "--out", "table"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "merged" in line]
    assert lines == [f"fl-lightning report: {RUN}: merged 2 versions of one run (version_0 rounds 1–2, version_1 rounds "
                     "1–3); where rounds overlap, version_1's rows are taken"]


def started(run: str, log: str, seen: str = "", timeout: float = 90) -> None:
    """Waits until the fit logging to ``log`` wrote its start files in ``run/version_0`` (and printed ``seen``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(f"{run}/version_0/partition.csv") and seen in open(log).read():
            return
        time.sleep(0.05)
    raise AssertionError(open(log).read()[-2000:])


def test_a_fit_killed_in_round_1_leaves_its_folder_to_the_next_fit_of_the_run():
    slow = ["--model.local_epochs", "400", "--trainer.max_epochs", "2"]  # round 1 takes many seconds
    run = "runs/quickstart/fedavgm,local_epochs=400,seed=0"
    with open("first.log", "w") as log:
        first = subprocess.Popen([FL, "fit", "--config", QUICKSTART, *QUIET, *slow], stdout=log, stderr=log)
    started(run, "first.log")
    time.sleep(0.5)  # in round 1
    first.send_signal(signal.SIGKILL)  # no handler runs: its folder stays, its lock is the kernel's to drop
    first.wait()
    version = Path(run, "version_0")
    identity = read_run_id(version / "config.yaml")
    assert sorted(os.listdir(version)) == [".fit.lock", "config.yaml", "hparams.yaml", "partition.csv"]
    assert is_leftover(version, identity) and not is_leftover(version, "another run id")
    with open("second.log", "w") as log:
        second = subprocess.Popen([FL, "fit", "--config", QUICKSTART, *QUIET, *slow], stdout=log, stderr=log)
    try:
        started(run, "second.log", seen=f"fl-lightning: removed {run}/version_0: a fit of this run stopped there "
                                         "before its first round")
        assert os.listdir(run) == ["version_0"]  # the number again, not version_1 beside an empty version_0
        assert not is_leftover(version, identity)  # a running fit's folder: its lock is held
    finally:
        second.send_signal(signal.SIGKILL)
        second.wait()


def test_two_fits_of_one_run_at_once_are_two_versions_that_report_names_in_one_line(capsys):
    fits = [subprocess.Popen([FL, "fit", "--config", QUICKSTART, *QUIET, "--trainer.max_epochs", "2"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outputs = [fit.communicate(timeout=120)[0] for fit in fits]
    assert [fit.returncode for fit in fits] == [0, 0], outputs
    assert sorted(os.listdir(RUN)) == ["version_0", "version_1"]  # neither took the other's folder
    for version in ("version_0", "version_1"):
        files = os.listdir(f"{RUN}/{version}")  # each its own whole run; its lock released with its file
        assert {"config.yaml", "metrics.csv", "checkpoints"} <= set(files) and ".fit.lock" not in files
    assert main(["report", "runs", "--target", "0.05", "--out", "table"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "merged" in line]
    assert lines == [f"fl-lightning report: {RUN}: merged 2 versions of one run (version_0 rounds 1–2, version_1 rounds "
                     "1–2); where rounds overlap, version_1's rows are taken"]
