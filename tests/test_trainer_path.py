"""Clients' local epochs in the user's own pl.Trainer give the fast path's numbers (quickstart
settings, 2 rounds), with the algorithm's hooks as Lightning callbacks; the user's callbacks run in it."""
import csv
import logging
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities.rank_zero import rank_zero_module

from fl_lightning import FederatedDataModule, FederatedModule
from fl_lightning.models import MLP
from tests.conftest import make_trainer

REPO = Path(__file__).resolve().parents[1]


class CountSteps(pl.Callback):
    def __init__(self):
        self.steps = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.steps += 1


def quickstart(algorithm="fedavgm", rounds=2, **options):
    pl.seed_everything(0, verbose=False)
    module = FederatedModule(MLP(64, 10, hidden=[200, 200]), algorithm=algorithm, clients_per_round=10, local_epochs=2,
                             batch_size=10, lr=0.1, lr_decay=0.998, weight_decay=1e-3, **options)
    trainer = make_trainer(rounds)
    trainer.fit(module, FederatedDataModule("digits", num_clients=20, partition="dirichlet", dirichlet_rho=0.5))
    return {k: float(v) for k, v in trainer.callback_metrics.items()}, module


@pytest.mark.parametrize("algorithm", ["fedavgm", "fedprox", "scaffold", "fedbcgd"])
def test_the_users_trainer_gives_the_fast_paths_numbers(algorithm):
    fast, _ = quickstart(algorithm)
    counter = CountSteps()
    slow, module = quickstart(algorithm, local_trainer={"callbacks": [counter]})
    print(algorithm, {k: (fast[k], slow[k]) for k in ("val/acc", "train/loss", "time/wall_s")})
    for key in ("val/acc", "val/loss", "train/loss", "comm/upload_d"):
        assert slow[key] == pytest.approx(fast[key], rel=1e-5, abs=1e-6), key
    assert counter.steps > 0 and module.loop.local_trainer.config.local_trainer is not None


def test_the_users_trainer_options_apply():
    """accumulate_grad_batches 2 halves the optimizer steps (the step-end hooks count them), a user callback runs;
    the clients' Trainers say nothing at info level (the run's Trainer says "GPU available" once, not 1 + S)."""
    counter = CountSteps()
    lines = Lines()
    rank_zero_module.log.addHandler(lines)
    try:
        metrics, module = quickstart("fedavg", rounds=1, local_trainer={"accumulate_grad_batches": 2,
                                                                        "gradient_clip_val": 1.0, "callbacks": [counter]})
    finally:
        rank_zero_module.log.removeHandler(lines)
    assert metrics["val/acc"] > 0.1 and counter.steps > 0
    assert sum("GPU available" in line for line in lines.seen) == 1
    assert sum("`Trainer.fit` stopped" in line for line in lines.seen) == 1


class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.seen = []

    def emit(self, record):
        self.seen.append(record.getMessage())


def test_callbacks_given_as_class_path_dicts_on_the_command_line_run_in_the_local_trainer(capsys):
    from fl_lightning.cli import main

    # the form docs/callbacks_outside_fl_lightning.md shows (LearningRateMonitor with a logger), plus a callback of ours
    spec = ('{"logger": {"class_path": "pytorch_lightning.loggers.CSVLogger", "init_args": {"save_dir": "local_logs"}}, '
            '"callbacks": [{"class_path": "pytorch_lightning.callbacks.LearningRateMonitor"}, '
            '{"class_path": "tests.test_trainer_path.PrintSteps", "init_args": {"label": "local"}}]}')
    assert main(["fit", "--config", str(REPO / "configs" / "quickstart.yaml"), "--trainer.max_epochs", "1",
                 "--trainer.enable_progress_bar", "false", "--model.local_trainer", spec]) == 0
    out = capsys.readouterr().out
    # 10 clients × 2 local epochs of ⌈n_i / 10⌉ steps: one line per client's fit
    assert out.count("local: fit ended after") == 10
    assert "local_trainer:" in open(next(Path("runs").rglob("config.yaml"))).read()
    (local,) = Path("local_logs").rglob("metrics.csv")  # the monitor's lr: 0.1 in round 1, at each client's start
    assert [float(row["lr-SGD"]) for row in csv.DictReader(open(local)) if row["step"] == "0"] == [0.1] * 10


class PrintSteps(pl.Callback):
    def __init__(self, label: str):
        self.label = label

    def on_fit_end(self, trainer, pl_module):
        print(f"{self.label}: fit ended after {trainer.global_step} steps")


@pytest.mark.parametrize("options, match", [
    ({"max_epochs": 3}, "model.local_trainer: max_epochs: decided by the round"),
    ([1], "model.local_trainer: needs a dict"),
    ({"callbacks": [{"class_path": "nope.Missing"}]}, "model.local_trainer.callbacks: cannot import 'nope.Missing'"),
    ({"callbacks": [{"class_path": "lightning.pytorch.callbacks.LearningRateMonitor"}]},
     "model.local_trainer.callbacks: LearningRateMonitor logs to the local Trainer's logger, and it has none")])
def test_bad_local_trainer_options_are_one_line(options, match):
    from fl_lightning.errors import FLUserError

    with pytest.raises(FLUserError, match=f"^{match}"):
        FederatedModule(MLP(64, 10), local_trainer=options)
