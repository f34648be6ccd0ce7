"""Clients trained K at a time in one process (fl_lightning.federation.parallel): the numbers of K = 1, bit for
bit, at the same intra-op threads per client."""
import json
import warnings

import pytest
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger
from torch import nn

from fl_lightning import FederatedDataModule
from fl_lightning.algorithms import FedAvg
from fl_lightning.callbacks.base import FLCallback
from fl_lightning.errors import ConfigError
from fl_lightning.federation.flat import FlatModel
from fl_lightning.models import MLP
from fl_lightning.assembly.fit import Fit, network_traits
from fl_lightning.federation.parallel import ClientPool, global_rng_draw, split_threads
from fl_lightning.assembly.toy import ToyFederation
from preset_golden import GOLDEN, PRESETS, run_metrics
from tests.conftest import fl_module, make_trainer
from tests.test_engine import read_rows
from tests.test_preset_golden import FIXED, new_args

CASES = json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("preset", sorted(set(PRESETS) - FIXED))
def test_every_preset_with_two_clients_at_a_time_gives_the_sequential_numbers(preset):
    """Two threads, one per client: every logged value and the final weights of the recorded one-thread
    sequential runs (tests/data/preset_golden.json)."""
    got = run_metrics([*new_args(CASES[preset]["args"]), "--model.parallel_clients", "2"], threads=2)
    assert got["rows"] == CASES[preset]["rows"]
    assert got["weights_sha256"] == CASES[preset]["weights_sha256"]


def digits_fit(name, parallel_clients, rounds, ckpt_path=None, checkpoint=False, algorithm="scaffold"):
    torch.manual_seed(0)  # the same initial weights
    module = fl_module(MLP(64, 10, hidden=[32]), algorithm=algorithm, clients_per_round=5, batch_size=16,
                       client_dropout=0.3, parallel_clients=parallel_clients)
    data = FederatedDataModule("digits", num_clients=10, dirichlet_rho=0.5, val_fraction=0.0)
    callbacks = [ModelCheckpoint(dirpath=f"ckpts_{name}", filename="{epoch}", save_top_k=-1)] if checkpoint else []
    trainer = make_trainer(rounds, logger=CSVLogger("runs", name=name), callbacks=callbacks,
                           enable_checkpointing=checkpoint)
    trainer.fit(module, data, ckpt_path=ckpt_path)
    return module, read_rows(trainer.logger.log_dir)


def test_the_run_is_the_same_run_whatever_k(capsys):
    """K changes no number, so it is not part of the run's identity: K = 2 resumes K = 1's checkpoint."""
    from fl_lightning.cli import main
    from tests.test_cli import QUICKSTART

    base = ["fit", "--config", QUICKSTART, "--trainer.enable_progress_bar", "false"]
    assert main([*base, "--trainer.max_epochs", "2"]) == 0
    assert main([*base, "--trainer.max_epochs", "3", "--model.parallel_clients", "2", "--ckpt_path", "last"]) == 0
    out = capsys.readouterr().out
    assert "fl-lightning: resuming from runs/quickstart/fedavgm,seed=0/version_0/checkpoints/" in out
    assert "3 rounds" in out.splitlines()[-1] and "fedavgm,seed=0/version_0" in out.splitlines()[-1]


def test_resume_and_client_dropout_with_two_clients_at_a_time():
    torch.set_num_threads(1)
    sequential, rows = digits_fit("k1", 1, 4)
    assert any(float(row["comm/clients_dropped"]) > 0 for row in rows)
    torch.set_num_threads(2)
    digits_fit("k2", 2, 4, checkpoint=True)
    parallel, resumed = digits_fit("k2_resumed", 2, 4, ckpt_path="ckpts_k2/epoch=1.ckpt")
    assert resumed == rows[2:]  # c_i in the client-state store, committed in plan order
    assert torch.equal(parallel.flat.vector, sequential.flat.vector)


def batch_norm_federation(tmp_path, parallel_clients, callbacks=()):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    g = torch.Generator().manual_seed(1)
    clients = [(torch.randn(6, 3, generator=g), torch.randint(0, 2, (6,), generator=g)) for _ in range(4)]
    return ToyFederation(net, FedAvg(), clients, str(tmp_path / f"k{parallel_clients}"), lr=0.1,
                         batch_size=2, parallel_clients=parallel_clients, extra_callbacks=callbacks), net


def test_integer_buffers_count_every_client_and_the_threads_are_split(tmp_path):
    """BatchNorm's num_batches_tracked (not federated) counts the batches of all 4 clients × 2 rounds,
    whichever working model trained them."""
    torch.set_num_threads(1)
    one, one_net = batch_norm_federation(tmp_path, 1)
    torch.set_num_threads(2)
    two, two_net = batch_norm_federation(tmp_path, 2)
    assert two.loop.runner.threads_each == 1 and len(two.loop.runner.trainers) == 2
    for round_idx in range(2):
        torch.set_num_threads(1)
        one.run_round(round_idx)
        torch.set_num_threads(2)
        two.run_round(round_idx)
        assert torch.get_num_threads() == 2  # the main thread keeps its count
    assert torch.equal(one.global_vector, two.global_vector)
    assert one_net[1].num_batches_tracked.item() == two_net[1].num_batches_tracked.item() == 4 * 3 * 2
    assert (split_threads(2, 16), split_threads(4, 2), split_threads(3, 8)) == (8, 1, 2)


def test_a_callback_that_is_not_thread_safe_trains_clients_one_at_a_time(tmp_path):
    class Counter(FLCallback):
        thread_safe = False

    with pytest.warns(UserWarning, match="Counter declares thread_safe = False: clients train one at a time"):
        fed, _ = batch_norm_federation(tmp_path, 2, callbacks=[Counter()])
    assert fed.loop.runner.threads_each is None


class DropoutMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Dropout(0.5))
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.features(x))


def test_a_network_that_draws_from_the_global_generator_is_refused_by_name():
    data = FederatedDataModule("digits", num_clients=4)
    data.setup("fit")
    loss = type(fl_module(MLP(64, 10, hidden=[8]))).local_loss
    fit = Fit(4, 2, parallel_clients=2, network=network_traits(FlatModel(DropoutMLP()), loss, data.clients, 8))
    assert str(ClientPool.refuse(fit)).startswith("model.parallel_clients: the network's Dropout at 'features.3' draws "
                                                  "from torch's global random generator")
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.BatchNorm1d(8), nn.Linear(8, 10)).eval()
    flat = FlatModel(net)
    before, rng = flat.vector.clone(), torch.get_rng_state()
    assert global_rng_draw(flat, loss, data.clients, batch_size=8) is None  # and changes nothing
    assert torch.equal(flat.vector, before) and net[2].num_batches_tracked.item() == 0 and not net.training
    assert torch.equal(torch.get_rng_state(), rng)


def test_the_fit_refuses_it_before_training_in_one_line():
    module = fl_module(DropoutMLP(), parallel_clients=2, clients_per_round=2)
    with warnings.catch_warnings(), pytest.raises(ConfigError, match="Dropout at 'features.3'"):
        make_trainer(1).fit(module, FederatedDataModule("digits", num_clients=4))
