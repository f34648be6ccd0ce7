"""The round engine inside a real Trainer: determinism, exact resume, budgets, targets, NaN."""
import csv

import pytest
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger

from fl_lightning import FederatedDataModule
from fl_lightning.algorithms import get
from fl_lightning.errors import ConfigError, DivergenceError
from fl_lightning.models import MLP
from tests.conftest import fl_module, make_trainer


def digits_run(rounds, name, algorithm="fedavgm", ckpt_path=None, callbacks=(), check_val_every_n_epoch=1, **hparams):
    torch.manual_seed(0)
    settings = dict(clients_per_round=4, local_epochs=1, batch_size=16, lr=0.1)
    if "server_momentum" in get(algorithm).algorithm.option_names():
        settings["server_momentum"] = 0.5
    module = fl_module(MLP(64, 10, hidden=[32]), algorithm=algorithm, **{**settings, **hparams})
    data = FederatedDataModule("digits", num_clients=8, dirichlet_rho=0.5, val_fraction=0.0)
    logger = CSVLogger("runs", name=name)
    checkpointing = any(isinstance(cb, ModelCheckpoint) for cb in callbacks)
    trainer = make_trainer(rounds, logger=logger, callbacks=list(callbacks), enable_checkpointing=checkpointing,
                           check_val_every_n_epoch=check_val_every_n_epoch)
    trainer.fit(module, data, ckpt_path=ckpt_path)
    return module, trainer, read_rows(logger.log_dir)


def read_rows(log_dir):
    with open(f"{log_dir}/metrics.csv") as f:
        return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(f)]  # wall time aside


def test_same_seed_same_metrics():
    _, _, a = digits_run(3, "a")
    _, _, b = digits_run(3, "b")
    assert a == b
    assert [r["round"] for r in a] == ["1.0", "2.0", "3.0"]
    assert [float(r["comm/upload_d"]) for r in a] == [1.0, 2.0, 3.0]  # FedAvg-style: exactly +1 d per round
    assert float(a[-1]["val/acc"]) > 0.3


def test_resume_matches_uninterrupted_run():
    every_round = ModelCheckpoint(dirpath="ckpts", filename="{epoch}", save_top_k=-1, every_n_epochs=1)
    _, _, full = digits_run(4, "full", callbacks=[every_round])
    _, trainer, resumed = digits_run(4, "resumed", ckpt_path="ckpts/epoch=1.ckpt")
    assert [r["round"] for r in resumed] == ["3.0", "4.0"]
    assert resumed == full[2:]


class RowsOnDiskAtEachCheckpoint(ModelCheckpoint):
    """After each checkpoint it writes, the rounds whose rows metrics.csv already holds on disk."""

    def __init__(self, **kwargs):
        super().__init__(dirpath="ckpts", filename="{epoch}", save_top_k=-1, **kwargs)
        self.seen: list[tuple[int, list[str]]] = []

    def _record(self, trainer):
        with open(f"{trainer.logger.log_dir}/metrics.csv") as f:
            self.seen.append((trainer.current_epoch + 1, [row["round"] for row in csv.DictReader(f)]))

    def on_train_epoch_end(self, trainer, pl_module):
        super().on_train_epoch_end(trainer, pl_module)
        if self._should_save_on_train_epoch_end(trainer):
            self._record(trainer)

    def on_validation_end(self, trainer, pl_module):
        super().on_validation_end(trainer, pl_module)
        if not self._should_save_on_train_epoch_end(trainer):
            self._record(trainer)


@pytest.mark.parametrize("on_train_epoch_end", [True, False])
def test_a_round_is_on_disk_before_its_checkpoint(on_train_epoch_end):
    """Lightning writes epoch-end logs after the epoch's checkpoint: a kill between the two used to
    resume after a round that no metrics.csv held (tests/test_kill.py saw it under load)."""
    watch = RowsOnDiskAtEachCheckpoint(save_on_train_epoch_end=on_train_epoch_end)
    digits_run(3, "ordered", callbacks=[watch], target_accuracy=0.3)
    assert watch.seen == [(1, ["1.0"]), (2, ["1.0", "2.0"]), (3, ["1.0", "2.0", "3.0"])]
    state = torch.load("ckpts/epoch=2.ckpt", weights_only=True)["federated"]  # the curve includes its own round
    assert [upload_d for upload_d, _ in state["curve"]["val"]] == [1.0, 2.0, 3.0]
    assert state["upload_d_at_target"] is not None


def test_checkpoint_loads_with_weights_only():
    every_round = ModelCheckpoint(dirpath="ckpts", filename="{epoch}", save_top_k=-1, every_n_epochs=1)
    module, _, _ = digits_run(2, "w", callbacks=[every_round])
    ckpt = torch.load("ckpts/epoch=1.ckpt", weights_only=True)
    assert ckpt["federated"]["comm"]["upload_d"] == 2.0
    assert len(ckpt["FederatedDataModule"]["client_indices"]) == 8
    (server, local) = ckpt["optimizer_states"]  # server momentum is ordinary optimizer state
    velocity = server["state"][0]["momentum_buffer"]
    assert velocity.shape == (module.flat.num_params,) and velocity.abs().sum() > 0
    assert server["param_groups"][0]["momentum"] == 0.5 and local["param_groups"][0]["lr"] == 0.1 * 0.998 ** 2


def test_upload_budget_stops_the_run():
    module, trainer, rows = digits_run(10, "budget", max_upload_d=2.5)
    assert trainer.current_epoch == 3 and module.loop.comm.upload_d == 3.0
    assert len(rows) == 3


def test_target_accuracy_logged_once():
    _, _, rows = digits_run(6, "target", target_accuracy=0.5)
    hits = [r for r in rows if r.get("comm/upload_d_at_target")]
    assert len(hits) == 1
    hit = hits[0]
    assert float(hit["val/acc"]) >= 0.5
    assert all(float(r["val/acc"]) < 0.5 for r in rows if float(r["round"]) < float(hit["round"]))
    assert float(hit["comm/upload_d_at_target"]) == float(hit["comm/upload_d"])


def test_divergence_names_the_round():
    with pytest.raises(DivergenceError, match=r"round 1: .*NaN/inf"):
        digits_run(3, "nan", algorithm="fedavg", lr=1e30)


def test_bf16_mixed_local_training_keeps_fp32_state():
    torch.manual_seed(0)
    module = fl_module(MLP(64, 10, hidden=[32]), algorithm="fedbcgd_plus", clients_per_round=4, batch_size=16,
                             lr=0.1, num_blocks=2, block_division="balanced")
    data = FederatedDataModule("digits", num_clients=8, val_fraction=0.0)
    trainer = make_trainer(3, precision="bf16-mixed")
    seen = []
    original = module.local_loss

    def recording_loss(net, x, y):
        loss = original(net, x, y)
        seen.append(module.net.head(torch.zeros(1, 32)).dtype)  # a matmul inside the autocast region
        return loss

    module.local_loss = recording_loss
    trainer.fit(module, data)
    assert seen and all(dtype == torch.bfloat16 for dtype in seen)
    assert module.flat.vector.dtype == torch.float32 and module.loop.global_vector.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in module.net.parameters())
    assert trainer.callback_metrics["val/acc"] > 0.2


def test_lightning_callbacks_work_per_round():
    from pytorch_lightning.callbacks import EarlyStopping, LearningRateMonitor

    stop = EarlyStopping(monitor="val/loss", mode="min", stopping_threshold=10.0)  # met at the first validation
    _, trainer, rows = digits_run(10, "callbacks", callbacks=[LearningRateMonitor(logging_interval="epoch"), stop],
                                  check_val_every_n_epoch=2)
    assert trainer.current_epoch == 2 and trainer.global_step == 2  # validated after round 2, then stopped
    lr_rows = [r for r in rows if r.get("lr-SGD")]
    assert [float(r["lr-SGD"]) for r in lr_rows] == pytest.approx([0.1, 0.1 * 0.998])
    assert [r["val/acc"] != "" for r in rows if r.get("round")] == [False, True]


def test_test_set_logged_after_the_last_round_and_on_request():
    _, _, rows = digits_run(4, "test_rows", test_every_n_rounds=3)
    assert [bool(r["test/acc"]) for r in rows] == [False, False, True, True]
    _, _, budget_rows = digits_run(10, "test_budget", max_upload_d=2.0)  # the budget ends the run at round 2
    assert [bool(r["test/acc"]) for r in budget_rows] == [False, True]
    assert 0.0 < float(budget_rows[-1]["test/acc"]) <= 1.0


@pytest.mark.parametrize("algorithm, hp", [("fedavgm", {}), ("fedbcgd", dict(num_blocks=2))])
def test_eval_every_d_evaluates_at_the_same_float_spacing(algorithm, hp):
    """Every algorithm is evaluated when comm/upload_d crosses a multiple of eval_every_d (and last)."""
    _, _, rows = digits_run(12, f"every_d_{algorithm}", algorithm=algorithm, eval_every_d=1.0, **hp)
    evaluated = [float(r["comm/upload_d"]) for r in rows if r["val/acc"]]
    uploads = [float(r["comm/upload_d"]) for r in rows]
    expected = [d for previous, d in zip([0.0] + uploads, uploads) if int(d + 1e-9) > int(previous + 1e-9)]
    expected += [] if expected[-1] == uploads[-1] else [uploads[-1]]
    assert evaluated == expected
    if algorithm == "fedbcgd":
        assert len(evaluated) == 7 < len(rows)  # ≈ 0.57 d per round with N = 2: about every second round
    else:
        assert len(evaluated) == len(rows) == 12


def test_eval_every_d_needs_validation_every_round():
    with pytest.raises(ConfigError, match="^model.eval_every_d: picks the rounds to evaluate itself: set "
                                          "trainer.check_val_every_n_epoch 1"):
        digits_run(2, "every_d_bad", eval_every_d=1.0, check_val_every_n_epoch=2)
