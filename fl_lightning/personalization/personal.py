"""``PersonalPart``: coordinates of the model that every client keeps for itself.

The personal coordinates (a head, normalisation layers, FedBCGD blocks: ``select(round)`` gives
them as slices of the flat vector, parameters and floating buffers) are

- taken out of every client's ``upload_ranges`` in ``configure_round``: never sent, so the upload
  accounting (comm/upload_*) counts only the rest, and never averaged — the server keeps x^r there;
- loaded from the client's row in the client-state store (table ``personal_part``; the initial
  model's values for a client that has none yet) in ``on_client_start``;
- written back to that row in ``on_client_reported``, committed at the round's end with the other
  client state: on disk, in checkpoints by slot, restored exactly on resume. A client whose upload
  never arrives keeps its previous personal part (as every client state in this library).

``personalize(evaluation, client_id, vector)`` puts client i's personal part into a copy of x^r:
the model pval/* evaluates for that client.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from fl_lightning.callbacks.base import FLCallback

Ranges = list[tuple[int, int]]


def merge(ranges: Ranges) -> Ranges:
    out: Ranges = []
    for start, stop in sorted(r for r in ranges if r[1] > r[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], stop))
        else:
            out.append((start, stop))
    return out


def subtract(ranges: Ranges, removed: Ranges) -> Ranges:
    """The slices of ``ranges`` outside ``removed``."""
    out: Ranges = []
    for start, stop in ranges:
        position = start
        for a, b in removed:
            if b <= position or a >= stop:
                continue
            if a > position:
                out.append((position, a))
            position = max(position, b)
        if position < stop:
            out.append((position, stop))
    return out


def module_ranges(segments, modules: list[str]) -> Ranges:
    """Every parameter and floating buffer of the named modules (and their submodules)."""
    def inside(module: str) -> bool:
        return any(module == m or module.startswith(m + ".") or m == "" for m in modules)
    return merge([(s.start, s.stop) for s in segments if inside(s.module)])


class PersonalPart(FLCallback):
    """Keeps the coordinates ``select(round)`` on each client (module docstring)."""

    keeps_client_state = True  # (fl_lightning.assembly.fit.HookTraits)

    TABLE = "personal_part"

    def __init__(self, select: Callable[[object], Ranges], label: str = "personal part"):
        self.select, self.label = select, label
        self.ranges: Optional[Ranges] = None
        self.size = 0
        self.table = None

    def configure_round(self, round):
        if self.ranges is None:
            self.ranges = merge(self.select(round))
            self.size = sum(b - a for a, b in self.ranges)
            print(f"fl-lightning: {self.label}: {self.size} floats of {round.numel} "
                  f"({100 * self.size / max(round.numel, 1):.1f} %) kept on each client, never uploaded")
        self.table = round.client_state.table(self.TABLE, self.size)
        for client in round.clients:
            client.upload_ranges = subtract(client.upload_ranges, self.ranges)
        if round.upload_choices is not None:
            round.upload_choices = [subtract(ranges, self.ranges) for ranges in round.upload_choices]

    def gather(self, vector: torch.Tensor) -> torch.Tensor:
        return torch.cat([vector[a:b] for a, b in self.ranges]) if self.ranges else vector[:0]

    def scatter(self, vector: torch.Tensor, row: torch.Tensor) -> None:
        offset = 0
        for a, b in self.ranges:
            vector[a:b].copy_(row[offset:offset + b - a])
            offset += b - a

    def on_client_start(self, client):
        if self.table.has(client.client_id):
            self.scatter(client.vector, self.table.read(client.client_id).to(client.vector.device))

    def on_client_reported(self, client):
        self.table.write(client.client_id, self.gather(client.vector))

    def personalize(self, evaluation, client_id: int, vector: torch.Tensor) -> None:
        table = evaluation.client_state.table(self.TABLE, self.size)
        if table.has(client_id):
            self.scatter(vector, table.read(client_id).to(vector.device))
