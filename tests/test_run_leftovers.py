"""Leftovers and merges: Ctrl-C in round 1 leaves no empty version_N; report says when it joins versions of one run."""
import glob
import os
import signal
import subprocess
import time

from fl_lightning.cli import main
from tests.test_cli import FL, QUICKSTART, QUIET

RUN = "runs/quickstart/fedavgm,seed=0"


def test_ctrl_c_in_round_1_leaves_no_run_folder():
    slow = ["--model.local_epochs", "400", "--trainer.max_epochs", "2"]  # round 1 takes many seconds
    fit = subprocess.Popen([FL, "fit", "--config", QUICKSTART, *QUIET, *slow], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
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
