"""Safe checkpoints on the Python API: weights-only reads, atomic writes, seed and partition checks."""
import os

import pytest
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from sklearn.datasets import load_digits
from torch.utils.data import TensorDataset

from fl_lightning import FederatedDataModule, FederatedModule
from fl_lightning.runs.checkpoint_io import SafeCheckpointIO
from fl_lightning.errors import ConfigError
from fl_lightning.models import MLP
from tests.conftest import fl_module, make_trainer
from tests.test_engine import digits_run


class RunsCode:
    """Unpickling this would create a file: the proof that code ran."""

    def __reduce__(self):
        return (open, ("pwned", "w"))


def module_and_data():
    torch.manual_seed(0)
    module = fl_module(MLP(64, 10, hidden=[32]), clients_per_round=4, batch_size=16)
    return module, FederatedDataModule("digits", num_clients=8, val_fraction=0.0)


def test_trainer_fit_refuses_a_checkpoint_that_runs_code():
    torch.save({"state_dict": {}, "payload": RunsCode()}, "evil.ckpt")
    module, data = module_and_data()
    with pytest.raises(ConfigError, match=r"^ckpt_path: 'evil.ckpt' carries pickled Python objects that could run "
                                          r"code \(.*\); refused"):
        make_trainer(2).fit(module, data, ckpt_path="evil.ckpt")
    assert not os.path.exists("pwned")
    with pytest.raises(ConfigError, match="ckpt_path: 'evil.ckpt' carries pickled"):
        FederatedModule.load_from_checkpoint("evil.ckpt", network=MLP(64, 10, hidden=[32]))
    assert not os.path.exists("pwned")


def test_weights_only_false_is_refused_on_every_path():
    every_round = ModelCheckpoint(dirpath="ckpts", filename="{epoch}", save_top_k=-1, every_n_epochs=1)
    digits_run(1, "w", callbacks=[every_round])
    module, data = module_and_data()
    with pytest.raises(ConfigError, match="^weights_only: fl-lightning loads checkpoints with weights_only=True only"):
        make_trainer(2).fit(module, data, ckpt_path="ckpts/epoch=0.ckpt", weights_only=False)
    with pytest.raises(ConfigError, match="^weights_only: "):
        FederatedModule.load_from_checkpoint("ckpts/epoch=0.ckpt", network=MLP(64, 10, hidden=[32]), weights_only=False)


def test_load_from_checkpoint_restores_the_global_model():
    every_round = ModelCheckpoint(dirpath="ckpts", filename="{epoch}", save_top_k=-1, every_n_epochs=1)
    trained, trainer, _ = digits_run(2, "w", callbacks=[every_round])
    assert type(trainer.strategy.checkpoint_io) is SafeCheckpointIO
    loaded = FederatedModule.load_from_checkpoint("ckpts/epoch=1.ckpt", network=MLP(64, 10, hidden=[32]))
    assert loaded.algorithm.server_momentum == 0.5 and type(loaded.algorithm).__name__ == "FedAvgM"
    for (name, a), b in zip(trained.net.state_dict().items(), loaded.net.state_dict().values()):
        assert torch.equal(a, b), name


def test_an_interrupted_write_leaves_the_previous_checkpoint_whole(monkeypatch):
    io = SafeCheckpointIO()
    io.save_checkpoint({"round": 1, "weights": torch.arange(4.0)}, "run/last.ckpt")

    def dies_halfway(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise KeyboardInterrupt  # what a kill looks like from inside

    with monkeypatch.context() as patch, pytest.raises(KeyboardInterrupt):
        patch.setattr(torch, "save", dies_halfway)
        io.save_checkpoint({"round": 2, "weights": torch.zeros(4)}, "run/last.ckpt")
    assert os.listdir("run") == ["last.ckpt"]  # no temporary file left behind
    restored = io.load_checkpoint("run/last.ckpt")
    assert restored["round"] == 1 and torch.equal(restored["weights"], torch.arange(4.0))


def digits_data(labels_changed: int = 0) -> FederatedDataModule:
    """Digits as the user's own TensorDataset; ``labels_changed`` emulates files edited on disk."""
    digits = load_digits()
    x, y = torch.tensor(digits.data, dtype=torch.float32), torch.tensor(digits.target)
    y[:labels_changed] = (y[:labels_changed] + 1) % 10
    return FederatedDataModule.from_datasets(TensorDataset(x[:1500], y[:1500]), TensorDataset(x[1500:], y[1500:]),
                                             num_clients=8, dirichlet_rho=0.5, val_fraction=0.0)


def test_resume_on_other_clients_data_stops_with_one_line():
    every_round = ModelCheckpoint(dirpath="ckpts", filename="{epoch}", save_top_k=-1, every_n_epochs=1)
    module, _ = module_and_data()
    make_trainer(1, callbacks=[every_round], enable_checkpointing=True).fit(module, digits_data())

    def resume(data):
        make_trainer(2).fit(module_and_data()[0], data, ckpt_path="ckpts/epoch=0.ckpt")

    other_rho = digits_data()
    other_rho.dirichlet_rho = 0.3
    with pytest.raises(ConfigError, match=r"^data.dirichlet_rho: is 0.3 now but 0.5 in the checkpoint"):
        resume(other_rho)
    with pytest.raises(ConfigError, match=r"^data: the clients' data differ from the checkpoint's \(fingerprint "
                                          r"[0-9a-f]{24} now, [0-9a-f]{24} in the checkpoint\)"):
        resume(digits_data(labels_changed=5))
    resume(digits_data())  # the same data: resumes
