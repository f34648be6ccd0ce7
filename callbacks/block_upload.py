"""FedBCGD's block assignment and masked upload (spec, "FedBCGD"; paper Sec. 3.1, Fig. 2).

Each round the S sampled clients are shuffled (seeded by round) and client i of the
shuffle is responsible for block j = i mod N: it trains the whole model but uploads only
Δ_(j) and Δ_s. The server's per-coordinate mean then averages block j over the K_j
clients that sent it and the shared block over all S — exactly the spec's Δ̄_(j), Δ̄_s.
"""
from __future__ import annotations

import numpy as np

from fl_lightning.callbacks.base import FLCallback
from fl_lightning.errors import ConfigError
from fl_lightning.federation.seeding import Purpose, derive_seed


def _complement(ranges, total):
    """The slices of [0, total) not covered by ``ranges``."""
    gaps, position = [], 0
    for start, stop in sorted(ranges):
        if start > position:
            gaps.append((position, start))
        position = max(position, stop)
    return gaps + ([(position, total)] if position < total else [])


def assign_blocks(round, choices: list[int]) -> dict[int, int]:
    """Client id → its block of ``choices``. A fixed cohort: client p of the round's seeded shuffle gets
    choices[p mod N] (each block ⌊S/N⌋ or ⌈S/N⌉ clients). Poisson sampling (round.poisson_rate): every client
    draws its block uniformly from the round's block stream, independently of who else joined (one client
    joining or not moves no other client's block: what add/remove-one accounting needs), and
    round.upload_choices records the equally likely uploads, so privacy divides by expected counts."""
    n, s = len(choices), len(round.clients)
    if not choices:
        raise ConfigError("clients_per_round", "no block to upload: declare fewer blocks personal")
    rng = np.random.default_rng(derive_seed(round.round, Purpose.BLOCK_ORDER))
    if round.poisson_rate is not None:
        draws = rng.integers(0, n, size=round.num_clients)
        round.upload_choices = [round.blocks.upload_ranges(j) for j in choices]
        return {client.client_id: choices[draws[client.client_id]] for client in round.clients}
    if s < n:
        raise ConfigError("clients_per_round", f"S={s} < N={n} blocks: every block needs a client; "
                          "raise S, lower num_blocks or declare fewer blocks personal")
    order = rng.permutation(s)
    return {round.clients[index].client_id: choices[position % n] for position, index in enumerate(order)}


class BlockUploadMask(FLCallback):
    """FedBCGD: each sampled client uploads one block and the shared block.

    Args:
        freeze_other_blocks: the "FedBCGD_freezing" ablation — a client trains only its block
            and the shared block; everything else stays at x^r.
    """

    uploads_one_block = True  # (fl_lightning.assembly.fit.HookTraits)

    @property
    def changes_local_training(self) -> bool:
        return self.freeze_other_blocks

    def __init__(self, freeze_other_blocks: bool = False):
        self.freeze_other_blocks = freeze_other_blocks
        self.block_of: dict[int, int] = {}  # this round: client id → the block j it uploads
        self._frozen: dict[int, list[tuple[int, int]]] = {}  # client id → the slices it keeps at x^r

    def configure_round(self, round):
        blocks = round.blocks
        if blocks is None:
            raise ConfigError("BlockUploadMask", "needs a block division: run it with a block algorithm "
                              "(fedbcgd, fedbcgd_plus, ...) or pass blocks to the loop")
        self.block_of, self._frozen = assign_blocks(round, list(range(blocks.num_blocks))), {}
        for client in round.clients:
            client.upload_ranges = blocks.upload_ranges(self.block_of[client.client_id])
            if self.freeze_other_blocks:
                self._frozen[client.client_id] = _complement(client.upload_ranges, round.numel)

    def on_local_step_end(self, client):
        if self.freeze_other_blocks:
            vector, global_vector = client.vector, client.global_vector
            for start, stop in self._frozen[client.client_id]:
                vector[start:stop].copy_(global_vector[start:stop])
