"""The client-state store: per-client rows on disk, committed per round, checkpointed as
slot tables, never overwritten while a recent checkpoint needs them."""
import os

import pytest
import torch

from fl_lightning import FederatedDataModule
from fl_lightning.federation.client_state import ClientStateStore
from fl_lightning.errors import FLUserError
from fl_lightning.models import MLP
from tests.conftest import fl_module, make_trainer


def row(value: float, size: int = 5) -> torch.Tensor:
    return torch.arange(size, dtype=torch.float32) + value


def round_of(store, round_idx, written: dict[int, float], sampled=None):
    """One round: every sampled client is staged, the ``written`` ones report and are committed."""
    table = store.table("control", 5)
    store.begin_round(round_idx, sorted(sampled or written))
    for client, value in written.items():
        table.write(client, row(value))
    store.end_round({name: sorted(w) for name, w in store.written().items()})
    return table


def test_rows_round_trip_exactly_and_unreported_clients_keep_theirs(tmp_path):
    store = ClientStateStore(num_clients=4, directory=str(tmp_path / "state"))
    table = round_of(store, 0, {0: 0.5, 2: 1.25})
    assert torch.equal(table.read(0), row(0.5)) and torch.equal(table.read(2), row(1.25))
    assert torch.equal(table.read(1), torch.zeros(5))  # never written: zeros
    round_of(store, 1, {2: 7.0}, sampled=[0, 2])  # client 0 sampled but lost: keeps round 0's row
    assert torch.equal(table.read(0), row(0.5)) and torch.equal(table.read(2), row(7.0))
    assert table.clients() == [0, 2]
    assert os.path.getsize(tmp_path / "state" / "control.f32") <= table.num_slots * 5 * 4


def test_a_checkpoint_restores_its_rows_after_later_rounds_and_an_old_one_is_refused(tmp_path):
    store = ClientStateStore(num_clients=3, directory=str(tmp_path / "state"))
    round_of(store, 0, {0: 1.0, 1: 2.0, 2: 3.0})
    first = store.state_dict()  # a checkpoint after round 1
    for r in range(1, 4):  # three more rounds of new rows for every client, one checkpoint after each
        round_of(store, r, {0: 10.0 * r, 1: 20.0 * r, 2: 30.0 * r})
        latest = store.state_dict()
    restored = ClientStateStore(num_clients=3, directory=str(tmp_path / "elsewhere"))
    restored.load_state_dict(latest)
    assert [restored.tables["control"].read(i)[0].item() for i in range(3)] == [30.0, 60.0, 90.0]
    with pytest.raises(FLUserError, match=r"^checkpoint: client state control in .* was overwritten since this "
                                          r"checkpoint \(3 clients' rows changed\); resume from the newest"):
        ClientStateStore(num_clients=3, directory=str(tmp_path)).load_state_dict(first)


def test_the_two_newest_checkpoints_rows_are_not_reused(tmp_path):
    store = ClientStateStore(num_clients=2, directory=str(tmp_path / "state"))
    round_of(store, 0, {0: 1.0, 1: 2.0})
    previous = store.state_dict()
    round_of(store, 1, {0: 3.0, 1: 4.0})
    store.state_dict()
    for r in range(2, 4):  # rounds after the newest checkpoint, not checkpointed (a run killed later)
        round_of(store, r, {0: 5.0 * r, 1: 6.0 * r})
    restored = ClientStateStore(num_clients=2, directory=str(tmp_path / "state"))
    restored.load_state_dict(previous)
    assert [restored.tables["control"].read(i)[0].item() for i in range(2)] == [1.0, 2.0]


def test_a_missing_state_directory_is_refused_in_one_line(tmp_path):
    store = ClientStateStore(num_clients=2, directory=str(tmp_path / "state"))
    round_of(store, 0, {0: 1.0})
    state = store.state_dict()
    store.close()
    for name in os.listdir(tmp_path / "state"):
        os.remove(tmp_path / "state" / name)
    os.rmdir(tmp_path / "state")
    with pytest.raises(FLUserError, match=r"^checkpoint: its client state directory .*state is missing"):
        ClientStateStore(num_clients=2, directory=str(tmp_path / "other")).load_state_dict(state)


def test_scaffold_checkpoint_holds_slots_not_rows(tmp_path):
    """M = 40 clients × d control variates stay in client_state/; the .ckpt holds 2 × M integers for them."""
    net = MLP(in_features=64, num_classes=10, hidden=[64])
    d = sum(p.numel() for p in net.parameters())
    module = fl_module(net, algorithm="scaffold", clients_per_round=20, batch_size=10)
    trainer = make_trainer(3, default_root_dir=str(tmp_path))
    trainer.fit(module, FederatedDataModule(dataset="digits", num_clients=40))
    trainer.save_checkpoint(tmp_path / "run.ckpt")
    table = module.client_state.tables["control_variate"]
    assert len(table.clients()) > 20 and table.size == d
    checkpoint = torch.load(tmp_path / "run.ckpt", weights_only=True)
    assert os.path.getsize(tmp_path / "run.ckpt") < 10 * d * 4  # x, c and server state: a few d, not M·d
    assert torch.equal(checkpoint["federated"]["client_state"]["tables"]["control_variate"]["slot_of"],
                       torch.from_numpy(table.slot_of))
    assert os.path.getsize(tmp_path / "client_state" / "control_variate.f32") >= len(table.clients()) * d * 4
