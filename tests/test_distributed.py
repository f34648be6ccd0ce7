"""One round's clients over 2 processes (gloo on CPU) equal one process bit for bit; resume under DDP is exact;
a rank that dies fails the run in one line. The ranks are launched the way torchrun and
SLURM do (environment variables), and once through the CLI with Lightning's own launcher."""
import csv
import io
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.ddp_runs import CASES, fit, result

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rows(text: str) -> list[dict]:
    """metrics.csv rows, wall time aside (the one value a rerun may change)."""
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(io.StringIO(text))]


@pytest.fixture(scope="module")
def ddp_results(tmp_path_factory):
    """Both ranks of tests/ddp_runs.py: every case, then a checkpointed scaffold run and its resume."""
    out = tmp_path_factory.mktemp("ddp")
    port = free_port()
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2", "NODE_RANK": "0",
           "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    ranks = [subprocess.Popen([sys.executable, "-m", "tests.ddp_runs", str(out)], cwd=out, env={**env, "LOCAL_RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    logs = [rank.communicate(timeout=400)[0] for rank in ranks]
    for rank, log in zip(ranks, logs):
        assert rank.returncode == 0, log[-3000:]
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_two_ranks_equal_one_process_bit_for_bit(case, ddp_results, tmp_path):
    """The ranks ran at 1 thread each; so does the one process (uploads, losses and evaluation
    batches are combined in plan and batch order, so every value is that of one process)."""
    torch.set_num_threads(1)
    ddp = torch.load(ddp_results / f"{case}.pt", weights_only=True)
    single = result(fit(case, str(tmp_path), ddp=False))
    assert torch.equal(ddp["global"], single["global"])
    ddp_rows, single_rows = rows(ddp["rows"]), rows(single["rows"])
    assert len(ddp_rows) == len(single_rows) == 3 and ddp_rows == single_rows  # comm/* count FL uploads only


def test_resume_under_ddp_equals_the_uninterrupted_ddp_run(ddp_results):
    saved = torch.load(ddp_results / "resume.pt", weights_only=True)
    full, resumed = rows(saved["full"]["rows"]), rows(saved["resumed"]["rows"])
    assert [row["round"] for row in resumed] == ["3.0", "4.0"]
    assert resumed == full[2:]
    assert torch.equal(saved["resumed"]["global"], saved["full"]["global"])
    # the scaffold c_i rows stay in the first run's client_state/, the checkpoints hold their slots
    state = ddp_results / "resume" / "scaffold" / "version_0" / "client_state"
    assert (state / "control_variate.f32").is_file()
    assert not (ddp_results / "resume" / "scaffold" / "version_1" / "client_state").exists()


def cli_on_two_ranks(cwd, *options: str) -> subprocess.CompletedProcess:
    """The quickstart for 5 rounds on 2 CPU ranks, started by Lightning's own launcher through the CLI."""
    cli = Path(sys.executable).with_name("fl-lightning")
    return subprocess.run([str(cli), "fit", "--config", str(REPO / "configs" / "quickstart.yaml"),
                           "--trainer.max_epochs", "5", "--trainer.devices", "2", "--trainer.accelerator", "cpu",
                           "--trainer.enable_progress_bar", "false", *options],
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=180)


def test_cli_with_a_rank_that_dies_fails_in_one_line(tmp_path):
    """Rank 1 is SIGKILLed in round 2; rank 0 must not hang."""
    done = cli_on_two_ranks(tmp_path, "--trainer.strategy", "ddp", "--trainer.callbacks+=tests.ddp_runs.DieOnRank")
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("fl-lightning: error: rank 0: a collective with the other 1 rank(s) failed — one of "
                           "them died or timed out"), done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_cli_with_a_rank_that_hangs_times_out_in_one_line(tmp_path):
    """Rank 1 stops answering in round 2 (alive, asleep); the strategy's 20 s timeout (it also bounds the
    ranks' rendezvous: 10 s was once too short for rank 1 to connect) ends the run, and
    no rank outlives it."""
    done = cli_on_two_ranks(tmp_path, "--trainer.strategy", "pytorch_lightning.strategies.DDPStrategy",
                            "--trainer.strategy.timeout", "0:00:20", "--trainer.callbacks+=tests.ddp_runs.StallOnRank")
    assert done.returncode == 2
    ours = [line for line in done.stderr.splitlines() if line.startswith("fl-lightning: error:")]
    assert len(ours) == 1 and ours[0].startswith("fl-lightning: error: rank 0: a collective with the other 1 "
                                                 "rank(s) failed — one of them died or timed out"), done.stderr[-2000:]
    leftover = subprocess.run(["pgrep", "-f", "tests.ddp_runs.StallOnRank"], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""
