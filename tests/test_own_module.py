"""A user's own LightningModule, as written for centralised training, federated: its self.log
calls, validation_step, hyper-parameters and configure_optimizers all reach the run."""
import csv
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
import yaml
from pytorch_lightning.loggers import CSVLogger
from torch import nn

from fl_lightning import FederatedDataModule, FederatedModule
from fl_lightning.callbacks import Proximal
from fl_lightning.errors import FLUserError
from tests.conftest import make_trainer


class LoggingClassifier(pl.LightningModule):
    def __init__(self, hidden: int = 24, lr: float = 0.02):
        super().__init__()
        self.save_hyperparameters()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.Tanh(), nn.Linear(hidden, 10))

    def forward(self, x):
        return self.body(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("mine/loss", loss)
        self.log_dict({"mine/batch": float(len(y))})
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("mine/val_error", (self(x).argmax(1) != y).float().mean())

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr, betas=(0.8, 0.9))


def fit(rounds=3, **hparams):
    torch.manual_seed(0)
    module = FederatedModule(LoggingClassifier(), algorithm="fedavg", clients_per_round=3, batch_size=16, **hparams)
    logger = CSVLogger("runs", name="own")
    trainer = make_trainer(rounds, logger=logger)
    trainer.fit(module, FederatedDataModule("digits", num_clients=6))
    with open(f"{logger.log_dir}/metrics.csv") as f:
        rows = list(csv.DictReader(f))
    with open(f"{logger.log_dir}/hparams.yaml") as f:
        return module, rows, yaml.safe_load(f)


def test_own_logs_validation_and_hparams_reach_the_run():
    with pytest.warns(UserWarning, match=r"LoggingClassifier.configure_optimizers\(\) is not used"):
        module, rows, hparams = fit()
    assert [r["round"] for r in rows] == ["1.0", "2.0", "3.0"]  # once per round
    for row in rows:
        # the loss training_step logs and returns is train/loss (the mean over the round's local steps): logged once
        assert "mine/loss" not in row and float(row["train/loss"]) > 0
        assert 1.0 <= float(row["mine/batch"]) <= 16.0
        # the network's validation_step is the evaluation: no val/acc of fl-lightning's own
        assert "val/acc" not in row and "val/loss" not in row
    # its error, the mean over the evaluation set's samples, on the global model
    split = module.trainer.datamodule.split
    x, y = (split.val_x, split.val_y) if split.val_x is not None else (split.test_x, split.test_y)
    with torch.no_grad():
        error = (module.net(x).argmax(1) != y).float().mean().item()
    assert float(rows[-1]["mine/val_error"]) == pytest.approx(error, abs=1e-6)
    assert hparams["network/hidden"] == 24 and hparams["algorithm"]["class_path"] == "fl_lightning.algorithms.fedavg.FedAvg"
    assert isinstance(module.loop.optimizer, torch.optim.SGD)
    # after the run the module's own self.log is its own again
    assert "log" not in vars(module.net) and "log_dict" not in vars(module.net)


def test_own_configure_optimizers_as_local_optimizer():
    module, rows, hparams = fit(rounds=2, local_optimizer="network", lr_decay=0.5)
    # hparams record what trained the clients: Adam at the network's lr, not model.lr / weight_decay
    assert hparams["network_optimizer"] == "torch.optim.adam.Adam" and hparams["lr"] == 0.02
    assert hparams["weight_decay"] == 0 and hparams["client_momentum"] == 0.0
    optimizer = module.loop.optimizer
    assert type(optimizer) is torch.optim.Adam and optimizer.param_groups[0]["betas"] == (0.8, 0.9)
    (params,) = optimizer.param_groups[0]["params"]
    assert params.shape == (module.flat.num_params,)  # the flat parameters (rebound after fit)
    assert [float(r["lr"]) for r in rows] == [0.02, 0.01]  # the network's lr, decayed per round


def test_local_optimizer_network_needs_a_lightning_module():
    with pytest.raises(FLUserError, match="model.local_optimizer"):
        FederatedModule(nn.Linear(64, 10), local_optimizer="network")


def test_fl_callback_on_a_plain_trainer_says_so():
    trainer = pl.Trainer(max_epochs=1, callbacks=[Proximal(0.1)], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 64), torch.zeros(8).long()))
    with pytest.raises(FLUserError, match=r"^Proximal acts only inside federated rounds.*LoggingClassifier"):
        trainer.fit(LoggingClassifier(), data)


PLAIN_SCRIPT = """
import pytorch_lightning as pl, torch
from fl_lightning.callbacks import Proximal
from tests.test_own_module import LoggingClassifier
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 64), torch.zeros(8).long()))
pl.Trainer(max_epochs=1, callbacks=[Proximal(0.1)], logger=False, enable_checkpointing=False,
           enable_progress_bar=False, enable_model_summary=False).fit(LoggingClassifier(), data)
"""


def test_fl_callback_on_a_plain_trainer_in_a_script_is_one_line_and_exit_code_2():
    """docs/callbacks_outside_fl_lightning.md: a script that does not catch the refusal gets one line, no traceback."""
    import subprocess
    import sys
    from pathlib import Path
    done = subprocess.run([sys.executable, "-c", PLAIN_SCRIPT], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], env={"OMP_NUM_THREADS": "1", "PATH": ""})
    errors = [line for line in done.stderr.splitlines() if "Traceback" in line or line.startswith("fl-lightning")]
    assert done.returncode == 2 and errors == [
        "fl-lightning: error: Proximal acts only inside federated rounds, but the Trainer fits a LoggingClassifier; "
        "fit fl_lightning.FederatedModule(network=your_model) instead"], done.stderr


def test_own_evaluation_is_plotted_and_a_dataloaders_batch_size_is_named_once(capsys):
    """The picture plots what the network's validation_step logs (not an empty val/acc), titled with the data set
    the Subset draws from; the DataLoader's batch size (64) gives way to model.batch_size (16) with one line."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    full = torch.utils.data.TensorDataset(torch.tensor(digits.data / 16, dtype=torch.float32), torch.tensor(digits.target))
    train = torch.utils.data.DataLoader(torch.utils.data.Subset(full, range(1500)), batch_size=64)
    data = FederatedDataModule.from_datasets(train, torch.utils.data.Subset(full, range(1500, 1797)), num_clients=6)
    torch.manual_seed(0)
    module = FederatedModule(LoggingClassifier(), algorithm="fedavg", clients_per_round=3, batch_size=16)
    logger = CSVLogger("runs", name="own")
    with pytest.warns(UserWarning, match=r"configure_optimizers\(\) is not used"):
        make_trainer(2, logger=logger).fit(module, data)
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if "batch" in line] == [
        "fl-lightning: clients train on minibatches of model.batch_size 16, not your DataLoader's batch_size 64; set "
        "--model.batch_size 64 (model.batch_size) to keep yours"]
    assert data.dataset == "TensorDataset" and module.rounds.plotted == "mine/val_error"
    with open(f"{logger.log_dir}/metrics.csv") as f:
        errors = [float(r["mine/val_error"]) for r in csv.DictReader(f)]
    assert [value for _, value in module.rounds.curve["val"]] == pytest.approx(errors) and len(errors) == 2
    assert (Path(logger.log_dir) / "accuracy_vs_upload_d.png").stat().st_size > 0
