"""Any task, either Lightning namespace: a LightningModule's own validation_step is the evaluation."""
import csv

import lightning.pytorch as L
import pytest
import pytorch_lightning as pl
import torch

from fl_lightning import FederatedDataModule, FederatedModule
from fl_lightning.errors import FLUserError
from fl_lightning.runs import report
from tests.conftest import make_trainer
from tests.lightning_fixtures import digit_images, make_autoencoder, make_classifier, make_regressor, regression_data


def fit(network, rounds=4, logger_ns=pl, callbacks=(), data=None, **hparams):
    torch.manual_seed(0)
    module = FederatedModule(network, algorithm="fedavg", clients_per_round=4, batch_size=25, **hparams)
    logger = logger_ns.loggers.CSVLogger("runs", name="any_task")
    trainer = make_trainer(rounds, logger=logger, callbacks=list(callbacks))
    train, test = data or digit_images()
    trainer.fit(module, FederatedDataModule.from_datasets(train, test, num_clients=8, partition="iid"))
    with open(f"{logger.log_dir}/metrics.csv") as f:
        return module, trainer, [row for row in csv.DictReader(f) if row.get("round")]


def test_autoencoder_reconstruction_loss_falls_and_reaches_a_target():
    torch.manual_seed(0)
    net = make_autoencoder(pl)()
    with pytest.raises(RuntimeError):  # forward on the raw image batch cannot work: the loop must never call it
        net(torch.zeros(2, 1, 8, 8))
    module, trainer, rows = fit(net, rounds=6, local_optimizer="network", lr_decay=1.0,
                                target_metric="val_loss", target_mode="min", target=0.075)
    losses = [float(r["val_loss"]) for r in rows]
    print("val_loss per round:", [round(v, 4) for v in losses])
    assert losses[-1] < 0.75 * losses[0] and all(b < a for a, b in zip(losses, losses[1:]))
    assert "val/acc" not in rows[0] and "test_loss" in rows[-1] and "test/acc" not in rows[-1]
    assert float(rows[-1]["train/loss"]) > 0 and "train_loss" not in rows[-1]  # the loss it logs and returns: once
    # the reconstruction error reached 0.075 at a logged upload, and only once
    reached = [r for r in rows if r.get("comm/upload_d_at_target")]
    assert len(reached) == 1 and float(reached[0]["val_loss"]) <= 0.075 < float(rows[2]["val_loss"])
    # report: the same metric as the target, from the run's metrics.csv
    assert report.main(["runs/any_task", "--metric", "val_loss", "--mode", "min", "--target", "0.075",
                        "--out", "rep", "--window", "1"]) == 0
    (summary,) = list(csv.DictReader(open("rep.csv")))
    assert float(summary["final_val_loss"]) == pytest.approx(losses[-1]) == float(summary["best_val_loss"])
    assert float(summary["d_to_target_first"]) == float(reached[0]["comm/upload_d_at_target"])
    with pytest.raises(FLUserError, match=r"^report --mode: say whether val_loss"):
        report.main(["runs/any_task", "--metric", "val_loss", "--target", "0.075"])


def test_lightning_pytorch_classifier_with_its_own_adam_and_logs():
    module, trainer, rows = fit(make_classifier(L)(), rounds=4, local_optimizer="network", lr_decay=1.0,
                                logger_ns=L)
    assert type(module.loop.optimizer) is torch.optim.Adam and module.loop.optimizer.param_groups[0]["lr"] == 1e-2
    accs = [float(r["valid_acc"]) for r in rows]
    print("valid_acc per round:", [round(a, 4) for a in accs])
    assert accs[-1] > 0.8 and "val/acc" not in rows[-1] and "train_loss" not in rows[-1] and "train/loss" in rows[-1]
    # valid_acc is the mean over the evaluation set's samples (Lightning's on_epoch), recomputed here
    split = trainer.datamodule.split
    x, y = (split.val_x, split.val_y) if split.val_x is not None else (split.test_x, split.test_y)
    with torch.no_grad():
        assert accs[-1] == pytest.approx((module.net(x).argmax(1) == y).float().mean().item(), abs=1e-6)


def test_the_same_module_in_both_namespaces_gives_the_same_numbers():
    class Count(L.Callback):  # a lightning.pytorch callback on fl-lightning's Trainer runs too
        rounds = 0

        def on_train_epoch_end(self, trainer, pl_module):
            Count.rounds += 1

    rows = {}
    for ns in (pl, L):
        _, _, rows[ns.__name__] = fit(make_classifier(ns)(), rounds=2, local_optimizer="network",
                                      callbacks=[Count()])
    keys = ("valid_acc", "valid_loss", "train/loss")
    assert [[r[k] for k in keys] for r in rows["pytorch_lightning"]] == \
        [[r[k] for k in keys] for r in rows["lightning.pytorch"]]
    assert Count.rounds == 4


def test_lightning_pytorch_module_is_not_treated_as_a_plain_module():
    # local_optimizer network needs a LightningModule: one from lightning.pytorch is one
    module = FederatedModule(make_classifier(L)(), local_optimizer="network")
    assert module.hparams.network_optimizer == "torch.optim.adam.Adam"


@pytest.mark.parametrize("options, field", [
    (dict(target_metric="val_loss"), "model.target"),
    (dict(target=0.1), "model.target_metric"),
    (dict(target_metric="val_loss", target_mode="lowest", target=0.1), "model.target_mode"),
    (dict(target_metric="val_loss", target=0.1, target_accuracy=0.5), "model.target"),
])
def test_bad_target_options_are_one_line(options, field):
    with pytest.raises(FLUserError, match=f"^{field}: "):
        FederatedModule(make_autoencoder(pl)(), **options)


def test_target_accuracy_with_a_network_that_evaluates_itself_is_one_line():
    with pytest.raises(FLUserError, match=r"^model.target_accuracy: val/acc is not logged \(the network's own "
                       r"validation_step is the evaluation\): give --model.target_metric NAME .* one of .*val_loss"):
        fit(make_autoencoder(pl)(), rounds=1, target_accuracy=0.5)


def test_float_labels_are_regression_targets_and_a_self_evaluating_module_learns_them():
    train, test = regression_data()
    module, trainer, rows = fit(make_regressor(L)(), rounds=3, lr=0.2, lr_decay=1.0, data=(train, test))
    mse = [float(r["val_mse"]) for r in rows]
    print("val_mse per round:", [round(v, 4) for v in mse])
    assert trainer.datamodule.split.train_y.dtype == torch.float32 and trainer.datamodule.num_classes == 0
    assert mse[-1] < 0.2 * mse[0] and all(b < a for a, b in zip(mse, mse[1:])) and "val/acc" not in rows[0]
    # whole-number floats are class indices still
    whole = torch.utils.data.TensorDataset(torch.randn(40, 5), (torch.arange(40) % 3).float())
    data = FederatedDataModule.from_datasets(whole, whole, num_clients=2)
    assert data.split.train_y.dtype == torch.long and data.num_classes == 3


def test_regression_targets_with_a_plain_module_or_a_class_partition_are_one_line():
    train, test = regression_data()
    plain = FederatedModule(torch.nn.Linear(5, 1), clients_per_round=2)
    with pytest.raises(FLUserError, match=r"^model.network: the labels are regression targets .*validation_step"):
        plain.check_compatible(FederatedDataModule.from_datasets(train, test, num_clients=4, partition="iid"))
    own = FederatedModule(make_regressor(pl)(), clients_per_round=2)
    with pytest.raises(FLUserError, match=r"^data.partition: dirichlet splits by class, and the labels are regression"):
        own.check_compatible(FederatedDataModule.from_datasets(train, test, num_clients=4))


def test_a_plain_module_with_the_wrong_forward_is_told_what_was_called_and_the_way_out():
    net = torch.nn.Sequential(torch.nn.Linear(64, 10))  # cannot take 1×8×8 images
    module = FederatedModule(net, clients_per_round=2)
    train, test = digit_images()
    with pytest.raises(FLUserError, match=r"^model.network: fl-lightning calls Sequential.forward\(x\) on the batch's "
                       r"first element \(x: TensorDataset inputs of shape \(1, 8, 8\)\).*validation_step logs its own"):
        module.check_compatible(FederatedDataModule.from_datasets(train, test, num_clients=4))


def test_a_lightning_pytorch_datamodule_is_accepted_as_data():
    class Digits(L.LightningDataModule):
        def setup(self, stage):
            self.train, self.val = digit_images()

        def train_dataloader(self):
            return torch.utils.data.DataLoader(self.train, batch_size=32, shuffle=True)

        def val_dataloader(self):
            return torch.utils.data.DataLoader(self.val, batch_size=64)

    data = FederatedDataModule.from_datamodule(Digits(), num_clients=5, partition="iid")
    data.setup("fit")
    train, test = digit_images()
    assert torch.equal(data.split.test_y, test.tensors[1]) and data.num_clients == 5 and data.num_classes == 10
    assert len(data.split.train_y) + (0 if data.split.val_y is None else len(data.split.val_y)) == len(train)
    with pytest.raises(FLUserError, match=r"^datamodule: list is not a LightningDataModule"):
        FederatedDataModule.from_datamodule([])
    # the data module itself, not wrapped, given to fit: one line saying how to wrap it
    module = FederatedModule(make_classifier(L)(), clients_per_round=2)
    with pytest.raises(FLUserError, match=r"^datamodule: FederatedModule trains on a FederatedDataModule, got none "
                       r".*FederatedDataModule.from_datamodule\(yours, num_clients=M\)"):
        make_trainer(1).fit(module, Digits())  # positional: pytorch_lightning takes it for dataloaders
    with pytest.raises(FLUserError, match=r"^datamodule: FederatedModule trains on a FederatedDataModule, got "
                       r"(tests\.)?test_any_task\.PlainDigits: wrap"):
        make_trainer(1).fit(module, datamodule=PlainDigits())


class PlainDigits(pl.LightningDataModule):
    def train_dataloader(self):
        return torch.utils.data.DataLoader(digit_images()[0], batch_size=32)


def test_a_lightning_pytorch_trainer_fitting_federated_module_is_one_line_and_exit_2(tmp_path):
    import subprocess
    import sys

    script = ("import lightning.pytorch as L\nfrom fl_lightning import FederatedDataModule, FederatedModule\n"
              "from fl_lightning.models import MLP\n"
              "trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)\n"
              "trainer.fit(FederatedModule(MLP(64, 10), clients_per_round=4), FederatedDataModule('digits', num_clients=8))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    ours = [line for line in done.stderr.splitlines() if line.startswith("fl-lightning:")]
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert ours == ["fl-lightning: trainer: FederatedModule is a pytorch_lightning.LightningModule and the Trainer "
                    "fitting it is lightning.pytorch.Trainer; fit it with pytorch_lightning.Trainer (import "
                    "pytorch_lightning as pl; pl.Trainer(...)) — your network, data module, callbacks and loggers may "
                    "come from either package (docs/lightning_namespaces.md)"]
    # any other error still gets its traceback
    other = subprocess.run([sys.executable, "-c", "import fl_lightning.module\nraise TypeError('other')"],
                           capture_output=True, text=True, timeout=60)
    assert other.returncode == 1 and "Traceback" in other.stderr and "TypeError: other" in other.stderr
