"""Kill-and-resume equals an uninterrupted run bit for bit, with dropout, BatchNorm and augmentation:
every random draw of a round comes from its own (seed, round, client, purpose) stream."""
import csv

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

from fl_lightning import FederatedDataModule
from fl_lightning.callbacks.base import FLCallback
from tests.conftest import fl_module, make_trainer


class SmallConvNet(nn.Module):
    """Conv + BatchNorm + Dropout: every source of randomness and of running state a resume must replay."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.3), nn.Linear(4 * 4 * 4, 10))

    def forward(self, x):
        return self.head(self.features(x))


def digit_images():
    """scikit-learn's digits as uint8 1×8×8 images: augmented (crop + flip) per minibatch on the device."""
    digits = load_digits()
    x = torch.tensor(digits.images * 15.9375, dtype=torch.uint8).unsqueeze(1)
    y = torch.tensor(digits.target)
    return TensorDataset(x[:1500], y[:1500]), TensorDataset(x[1500:], y[1500:])


CONFIGS = {
    "fedavgm": dict(algorithm="fedavgm"),
    "fedbcgd": dict(algorithm="fedbcgd", num_blocks=2),
    "fedbcgd_plus-option2-svrg": dict(algorithm="fedbcgd_plus", num_blocks=2, control_variate="option2",
                                      variance_reduction=True),
    "fedbcgd_plus-option1-svrg": dict(algorithm="fedbcgd_plus", num_blocks=2, control_variate="option1",
                                      variance_reduction=True),
    "scaffold": dict(algorithm="scaffold"),
    "topk-error-feedback": dict(algorithm="topk", compression_k=0.2),
    "fedbcgd_plus_qsgd": dict(algorithm="fedbcgd_plus_qsgd", num_blocks=2, qsgd_levels=3, qsgd_bucket_size=16),
    "scaffold-randk": dict(algorithm="scaffold", compression="randk", compression_k=0.3),
    "signsgd-error-feedback": dict(algorithm="signsgd"),  # residuals e_i in the client-state store
    "powersgd-warm-start": dict(algorithm="powersgd"),  # each client's Q and e_i kept across rounds
    "fedbcgd_eden": dict(algorithm="fedbcgd_eden", num_blocks=2),  # rotations drawn from the client's stream
}


def conv_run(rounds, name, ckpt_path=None, callbacks=(), **hparams):
    torch.manual_seed(0)
    module = fl_module(SmallConvNet(), clients_per_round=4, batch_size=16, lr=0.05, **hparams)
    train, test = digit_images()
    data = FederatedDataModule.from_datasets(train, test, num_clients=8, dirichlet_rho=0.5, val_fraction=0.0)
    logger = CSVLogger("runs", name=name)
    checkpointing = any(isinstance(cb, ModelCheckpoint) for cb in callbacks)
    trainer = make_trainer(rounds, logger=logger, callbacks=list(callbacks), enable_checkpointing=checkpointing)
    trainer.fit(module, data, ckpt_path=ckpt_path)
    with open(f"{logger.log_dir}/metrics.csv") as f:  # every value as written, the rounds' wall time aside
        return module, [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(f)]


@pytest.mark.parametrize("config", CONFIGS)
def test_kill_and_resume_is_bit_identical_with_dropout_batchnorm_augmentation(config):
    every_round = ModelCheckpoint(dirpath=f"ckpts_{config}", filename="{epoch}", save_top_k=-1, every_n_epochs=1)
    full_module, full = conv_run(4, "full", callbacks=[every_round], **CONFIGS[config])
    torch.manual_seed(1234)  # global RNG state at resume differs from the uninterrupted run's: it must not matter
    torch.rand(7)
    resumed_module, resumed = conv_run(4, "resumed", ckpt_path=f"ckpts_{config}/epoch=1.ckpt", **CONFIGS[config])
    assert [r["round"] for r in resumed] == ["3.0", "4.0"]
    assert resumed == full[2:]  # every logged value, as written (wall time aside)
    assert torch.equal(resumed_module.flat.vector, full_module.flat.vector)  # parameters and BN statistics


class FirstStepGradient(FLCallback):
    """Records the gradient the optimizer stepped with (after SVRG's correction) at each client's
    first local step, where y = x^r."""

    def __init__(self):
        self.first = {}

    def on_local_step_end(self, client):
        if client.task.position not in self.first:
            self.first[client.task.position] = (client.grad.clone(), client.full_gradient().clone())


def test_svrg_sees_the_same_dropout_mask_and_augmentation_at_both_points():
    """At the first local step y = x^r, so ∇f(y; ζ) − ∇f(x^r; ζ) + ∇f(x^r) is exactly ∇f(x^r) — only
    if both minibatch gradients used the same crop, flip and dropout mask."""
    recorder = FirstStepGradient()
    torch.manual_seed(0)
    module = fl_module(SmallConvNet(), algorithm="fedbcgd_plus", num_blocks=2, clients_per_round=4,
                             batch_size=16, lr=0.05, weight_decay=0.0, variance_reduction=True)
    train, test = digit_images()
    data = FederatedDataModule.from_datasets(train, test, num_clients=8, dirichlet_rho=0.5, val_fraction=0.0)
    make_trainer(1, callbacks=[recorder]).fit(module, data)  # round 1: all control variates are 0
    assert len(recorder.first) == 4
    for corrected, full_gradient in recorder.first.values():
        assert full_gradient.abs().sum() > 0
        assert torch.equal(corrected, full_gradient)


class GlobalRngWatch(pl.Callback):
    def on_train_epoch_start(self, trainer, pl_module):
        self.before = torch.get_rng_state()

    def on_train_epoch_end(self, trainer, pl_module):
        self.after = torch.get_rng_state()


def test_a_round_leaves_the_global_rng_untouched():
    watch = GlobalRngWatch()
    torch.manual_seed(0)
    module = fl_module(SmallConvNet(), algorithm="fedbcgd_plus", num_blocks=2, clients_per_round=4,
                             batch_size=16, lr=0.05, control_variate="option1")
    train, test = digit_images()
    data = FederatedDataModule.from_datasets(train, test, num_clients=8, val_fraction=0.0)
    make_trainer(1, callbacks=[watch]).fit(module, data)
    assert torch.equal(watch.before, watch.after)
