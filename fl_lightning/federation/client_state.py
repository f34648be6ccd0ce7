"""Per-client state vectors on disk: c_i, h_i, e_i for M clients (docs/scale_out.md, "Client state on disk").

SCAFFOLD / FedBCGD+ keep a control variate c_i per client, FedDC a drift h_i, error feedback a
residual e_i. In RAM that is M·d floats (ViT-Base, M = 100: 34 GB), and as much again in every
checkpoint. A ``ClientStateStore`` keeps them as fp32 rows of files in ``<run dir>/client_state/``,
read and written with pread/pwrite: only the rows of the clients in flight are in memory.

Rows are never overwritten in place. A round's rows go to free slots (``begin_round`` stages one per
sampled client, from the plan alone, so every rank stages the same), the rank that trains a client
writes its row, and ``end_round`` commits the rows of the clients that reported. A checkpoint holds
each client's slot (M integers per table), not the rows; the slots of the last two checkpoints are
never reused, so resuming from them is exact. Each slot also records which (round, client) wrote
it: a checkpoint whose rows were overwritten since, or a rank that cannot see another rank's rows
(run directory not on a shared filesystem), stops with one line instead of reading wrong values.
"""
from __future__ import annotations

import os
import threading
from collections import deque
from typing import Optional

import numpy as np
import torch

from fl_lightning.errors import FLUserError

KEPT_CHECKPOINTS = 2  # slots referenced by this many most recent checkpoints are not reused


def _tag(round_idx: int, client_id: int) -> int:
    """Which row a slot holds: the same (round, client) always writes the same values (runs are deterministic)."""
    return (round_idx + 1) << 32 | client_id


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    while len(data):
        written = os.pwrite(fd, data, offset)
        data, offset = data[written:], offset + written


def _pread_into(fd: int, out: memoryview, offset: int) -> int:
    done = 0
    while done < len(out):
        got = os.preadv(fd, [out[done:]], offset + done)
        if got == 0:
            break
        done += got
    return done


class ClientTable:
    """One kind of per-client vector (e.g. c_i), ``size`` floats per client."""

    def __init__(self, name: str, size: int, num_clients: int, directory: str):
        self.name, self.size = name, size
        self.slot_of = np.full(num_clients, -1, dtype=np.int64)  # committed row of each client (-1: none, zeros)
        self.tag_of = np.zeros(num_clients, dtype=np.int64)
        self.num_slots = 0
        self.staged: dict[int, tuple[int, int]] = {}  # client → (slot, tag) for this round's rows
        self.written: set[int] = set()  # clients whose staged row this rank wrote
        self.protected: deque[frozenset] = deque(maxlen=KEPT_CHECKPOINTS)
        self.directory = directory
        self._fds: Optional[tuple[int, int]] = None
        self._opening = threading.Lock()  # clients trained in parallel read rows at once

    # -- files: <name>.f32 (rows), <name>.tags (int64 per slot) -----------------------------
    def _files(self) -> tuple[int, int]:
        with self._opening:
            if self._fds is None:
                os.makedirs(self.directory, exist_ok=True)
                base = os.path.join(self.directory, self.name)
                self._fds = tuple(os.open(base + ext, os.O_RDWR | os.O_CREAT, 0o644) for ext in (".f32", ".tags"))
            return self._fds

    def close(self) -> None:
        if self._fds is not None:
            for fd in self._fds:
                os.close(fd)
            self._fds = None

    def sync(self) -> None:
        if self._fds is not None:
            for fd in self._fds:
                os.fsync(fd)

    def _slot_tags(self) -> np.ndarray:
        tags = np.zeros(self.num_slots, dtype=np.int64)
        _pread_into(self._files()[1], memoryview(tags).cast("B"), 0)
        return tags

    # -- rows -------------------------------------------------------------------------
    def read(self, client_id: int) -> torch.Tensor:
        """The client's committed vector (CPU, fp32); zeros if it has none yet."""
        row = torch.zeros(self.size, dtype=torch.float32)
        slot = int(self.slot_of[client_id])
        if slot < 0:
            return row
        data, tags = self._files()
        nbytes = self.size * 4
        stored_tag = np.zeros(1, dtype=np.int64)
        complete = _pread_into(data, memoryview(row.numpy()).cast("B"), slot * nbytes) == nbytes
        _pread_into(tags, memoryview(stored_tag).cast("B"), slot * 8)
        if not complete or int(stored_tag[0]) != int(self.tag_of[client_id]):
            raise FLUserError(f"client state {self.name}: client {client_id}'s row in {self.directory} is not the "
                              "one this run committed; with several nodes, put the run directory (logger save_dir "
                              "or trainer.default_root_dir) on a filesystem every node shares")
        return row

    def has(self, client_id: int) -> bool:
        """Whether the client has a committed row (else ``read`` gives zeros)."""
        return bool(self.slot_of[client_id] >= 0)

    def write(self, client_id: int, values: torch.Tensor) -> None:
        """Stores the client's new vector (committed at the round's end if the client reported)."""
        if client_id not in self.staged:
            raise RuntimeError(f"client state {self.name}: client {client_id} is not in this round's plan")
        values = values.detach().to("cpu", torch.float32).contiguous().reshape(-1)
        if values.numel() != self.size:
            raise ValueError(f"client state {self.name}: expected {self.size} values, got {values.numel()}")
        slot, tag = self.staged[client_id]
        data, tags = self._files()
        _pwrite_all(data, memoryview(values.numpy()).cast("B"), slot * self.size * 4)
        _pwrite_all(tags, memoryview(np.array([tag], dtype=np.int64)).cast("B"), slot * 8)
        self.written.add(client_id)

    def clients(self) -> list[int]:
        """Clients with a committed vector."""
        return np.flatnonzero(self.slot_of >= 0).tolist()

    # -- round protocol -------------------------------------------------------------------
    def begin_round(self, round_idx: int, client_ids: list[int]) -> None:
        in_use = set(self.slot_of[self.slot_of >= 0].tolist()).union(*self.protected)
        free = (slot for slot in range(self.num_slots + len(client_ids)) if slot not in in_use)
        self.staged = {cid: (next(free), _tag(round_idx, cid)) for cid in client_ids}
        self.num_slots = max([self.num_slots] + [slot + 1 for slot, _ in self.staged.values()])
        self.written = set()

    def end_round(self, committed: list[int]) -> None:
        for client_id in committed:
            self.slot_of[client_id], self.tag_of[client_id] = self.staged[client_id]
        self.staged, self.written = {}, set()

    def state_dict(self) -> dict:
        self.sync()
        self.protected.append(frozenset(self.slot_of[self.slot_of >= 0].tolist()))
        return {"size": self.size, "num_slots": self.num_slots, "slot_of": torch.from_numpy(self.slot_of.copy()),
                "tag_of": torch.from_numpy(self.tag_of.copy())}

    def load_state_dict(self, state: dict) -> None:
        self.close()
        self.slot_of, self.tag_of = state["slot_of"].numpy().copy(), state["tag_of"].numpy().copy()
        self.num_slots = int(state["num_slots"])
        committed = self.slot_of >= 0
        changed = int((self._slot_tags()[self.slot_of[committed]] != self.tag_of[committed]).sum())
        if changed:
            raise FLUserError(f"checkpoint: client state {self.name} in {self.directory} was overwritten since this "
                              f"checkpoint ({changed} clients' rows changed); resume from the newest checkpoint "
                              "(ckpt_path last)")
        self.protected.clear()
        self.protected.append(frozenset(self.slot_of[committed].tolist()))


def refuse_inline_client_state(callback_state: dict, key: str) -> None:
    """Checkpoints written before the client-state store kept client vectors inside the .ckpt: refused."""
    if callback_state.get(key):
        raise FLUserError(f"checkpoint: it keeps client vectors inline ({key}), as checkpoints written before the "
                          "client-state store did; resume it with the fl-lightning version that wrote it")


class ClientStateStore:
    """The run's per-client tables, all in one directory. Algorithms declare a table with
    ``table(name, size)`` (in ``configure_round``) and ``read`` / ``write`` rows of it."""

    def __init__(self, num_clients: int, directory: str):
        self.num_clients = num_clients
        self.directory = directory
        self.tables: dict[str, ClientTable] = {}

    def table(self, name: str, size: int) -> ClientTable:
        table = self.tables.get(name)
        if table is None:
            table = self.tables[name] = ClientTable(name, size, self.num_clients, self.directory)
        elif table.size != size:
            raise ValueError(f"client state {name}: declared with {size} values, holds {table.size}")
        return table

    def start_fresh(self) -> None:
        """A new run: rows a previous run left in the directory are removed (call on one rank, then barrier)."""
        for name in os.listdir(self.directory) if os.path.isdir(self.directory) else []:
            if name.endswith((".f32", ".tags")):
                os.remove(os.path.join(self.directory, name))

    def begin_round(self, round_idx: int, client_ids: list[int]) -> None:
        for table in self.tables.values():
            table.begin_round(round_idx, [cid for cid in client_ids if cid >= 0])

    def written(self) -> dict[str, set[int]]:
        """Per table: the clients whose rows this rank wrote this round."""
        return {name: table.written for name, table in self.tables.items()}

    def end_round(self, committed: dict[str, list[int]]) -> None:
        for name, table in self.tables.items():
            table.end_round(committed.get(name, []))

    def close(self) -> None:
        for table in self.tables.values():
            table.close()

    def state_dict(self) -> dict:
        return {"directory": os.path.abspath(self.directory), "num_clients": self.num_clients,
                "tables": {name: table.state_dict() for name, table in self.tables.items()}}

    def load_state_dict(self, state: dict, fallback_directory: Optional[str] = None) -> None:
        """Restores the slot tables and reads on in the checkpoint's directory (or ``fallback_directory``,
        where a moved run directory's client_state/ now is)."""
        directory = state["directory"]
        if not os.path.isdir(directory) and fallback_directory and os.path.isdir(fallback_directory):
            directory = fallback_directory
        holds_rows = any(bool((table["slot_of"] >= 0).any()) for table in state["tables"].values())
        if holds_rows and not os.path.isdir(directory):
            raise FLUserError(f"checkpoint: its client state directory {state['directory']} is missing; it holds "
                              "the clients' control variates / residuals and must stay beside the checkpoint's run")
        self.close()
        self.directory, self.tables = directory, {}
        for name, table_state in state["tables"].items():
            self.table(name, int(table_state["size"])).load_state_dict(table_state)


def open_store(trainer, num_clients: int, saved: Optional[dict], directory: str) -> ClientStateStore:
    """The fit's store in ``directory`` (the same on every rank): a new run's starts empty; a resumed run's
    (``saved``: the checkpoint's ``state_dict()``) reads on where its checkpoint's rows are."""
    store = ClientStateStore(num_clients, directory)
    if saved is not None:
        beside_checkpoint = None
        if trainer.ckpt_path:  # <run dir>/checkpoints/x.ckpt → <run dir>/client_state, if the run moved
            beside_checkpoint = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(trainer.ckpt_path))),
                                             "client_state")
        store.load_state_dict(saved, beside_checkpoint)
    elif trainer.is_global_zero:
        store.start_fresh()
    trainer.strategy.barrier("client_state")
    return store
