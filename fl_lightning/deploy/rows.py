"""A node's client rows (docs/deployment.md, "The protocol"): what the client-state store holds of the node's one
client — c_i, h_i, a codec's residuals, personal rows — between its jobs, in one form for both trainers of a job:
``NodeSession`` (flower-local's worker: a file in its run folder) and ``fit_reply`` (a user's ClientApp:
``context.state``, and a ``state-dir`` file). An upload's rows wait until the server says it aggregated that upload
(the next job's ``aggregated_round``), so a reply lost on the way leaves the client's state as it was, as a dropped
client's in a fit. Each job trains with a store rebuilt from the committed rows, as the fit's store holds them.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from typing import Iterator, Optional

import torch

from fl_lightning.errors import ConfigError
from fl_lightning.federation.client_state import ClientStateStore
from fl_lightning.runs.files import save_atomically


class NodeRows:
    """``state``: {run_id, round (the last trained), message (its message, where the trainer knows it), rows
    (committed: table → tensor), pending ({round, rows} of the last upload, or None)}; a saved state of another run
    starts empty. ``path``: the file it is kept in (None: the caller keeps ``state``, e.g. in ``context.state``)."""

    def __init__(self, saved: Optional[dict], run_id: str, path: Optional[str] = None):
        fresh = saved is None or saved["run_id"] != run_id
        self.state = {"run_id": run_id, "round": -1, "message": None, "rows": {}, "pending": None} if fresh else saved
        self.path = path

    @classmethod
    def load(cls, path: Optional[str], run_id: str) -> "NodeRows":
        saved = torch.load(path, weights_only=True) if path is not None and os.path.exists(path) else None
        return cls(saved, run_id, path)

    def save(self) -> None:
        if self.path is not None:
            save_atomically(self.state, self.path)

    def refuse_replay(self, field: str, job_round: int, message: Optional[str] = None) -> None:
        """A job of an earlier round than this node trained (its server started again from an earlier point: its rows
        would be later than its x^r), or the same message again, in one line."""
        trained = self.state["round"]
        if job_round < trained or (job_round == trained and message is not None and self.state["message"] == message):
            raise ConfigError(field, f"round {job_round + 1} of run {self.state['run_id'][:8]} reached a node that "
                              f"trained round {trained + 1} already: answer each train message once, and resume a "
                              "server only from its newest checkpoint (or start the run afresh)")

    def committed(self, aggregated_round: int) -> dict:
        """The committed rows once the last upload's are settled: kept if the server aggregated it, else dropped."""
        pending = self.state["pending"]
        if pending is not None and pending["round"] == aggregated_round:
            self.state["rows"].update(pending["rows"])
        self.state["pending"] = None
        return self.state["rows"]

    def trained(self, round_idx: int, rows: dict, message: Optional[str] = None) -> None:
        """The rows this round's upload wrote, pending until the server's word."""
        self.state["round"], self.state["message"] = round_idx, message
        self.state["pending"] = {"round": round_idx, "rows": rows} if rows else None


@contextmanager
def client_store(num_clients: int, client_id: int, round_idx: int, rows: dict) -> Iterator[ClientStateStore]:
    """A client-state store in a temporary folder holding ``rows`` of ``client_id`` as written before ``round_idx``;
    closed and removed after. (Its round begins once the hooks' ``configure_round`` made their tables.)"""
    directory = tempfile.mkdtemp(prefix="fl_lightning_node_")
    store = ClientStateStore(num_clients, directory)
    try:
        for name, values in rows.items():
            table = store.table(name, values.numel())
            table.begin_round(round_idx - 1, [client_id])
            table.write(client_id, values)
            table.end_round([client_id])
        yield store
    finally:
        store.close()
        shutil.rmtree(directory, ignore_errors=True)


def written_rows(store: ClientStateStore, client_id: int) -> dict:
    """The rows ``client_id`` wrote this round, read back (table → tensor)."""
    written = {name: [client_id] for name, table in store.tables.items() if client_id in table.written}
    store.end_round(written)
    return {name: store.tables[name].read(client_id) for name in written}
