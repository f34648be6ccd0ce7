"""A node's client rows between its jobs (fl_lightning/deploy/rows.py), the one ledger of flower-local's nodes and of
``fit_reply``: an upload's rows wait for the server's word, a lost upload's are dropped, a replayed or earlier round
is refused, and a job's store holds the committed rows as the fit's store would."""
import pytest
import torch

from fl_lightning.deploy.rows import NodeRows, client_store, written_rows
from fl_lightning.errors import ConfigError


def test_an_uploads_rows_are_committed_only_on_the_servers_word(tmp_path):
    rows = NodeRows(None, "run-a", str(tmp_path / "rows.pt"))
    assert rows.committed(-1) == {}
    rows.trained(0, {"c": torch.tensor([1.0, 2.0])})
    assert rows.committed(-1) == {}  # the server did not aggregate round 0's upload: dropped
    rows.trained(1, {"c": torch.tensor([3.0, 4.0])})
    rows.save()
    again = NodeRows.load(str(tmp_path / "rows.pt"), "run-a")  # a node that restarted
    assert torch.equal(again.committed(1)["c"], torch.tensor([3.0, 4.0])) and again.state["pending"] is None
    assert NodeRows.load(str(tmp_path / "rows.pt"), "run-b").committed(1) == {}  # another run starts empty


def test_a_replayed_or_earlier_round_is_refused_in_one_line():
    rows = NodeRows(None, "0123456789ab")
    rows.trained(3, {}, message="m3")
    rows.refuse_replay("partition-id", 3)  # the same round sent again (a resumed server): trained again
    rows.refuse_replay("fit_reply", 3, "m3b")
    line = ("partition-id: round 2 of run 01234567 reached a node that trained round 4 already: answer each train "
            "message once, and resume a server only from its newest checkpoint (or start the run afresh)")
    with pytest.raises(ConfigError) as raised:
        rows.refuse_replay("partition-id", 1)
    assert str(raised.value) == line
    with pytest.raises(ConfigError, match=r"^fit_reply: round 4 of run 01234567 reached a node that trained round 4"):
        rows.refuse_replay("fit_reply", 3, "m3")  # the same message twice


def test_a_jobs_store_holds_the_committed_rows_and_gives_back_those_written():
    with client_store(4, 2, 5, {"c": torch.tensor([1.0, -1.0, 0.5])}) as store:
        table = store.tables["c"]
        assert torch.equal(table.read(2), torch.tensor([1.0, -1.0, 0.5])) and not table.has(1)
        store.begin_round(5, [2])
        table.write(2, torch.tensor([2.0, 0.0, 0.25]))
        written = written_rows(store, 2)
    assert list(written) == ["c"] and torch.equal(written["c"], torch.tensor([2.0, 0.0, 0.25]))
