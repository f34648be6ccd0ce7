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


class BlockUploadMask(FLCallback):
    """FedBCGD: each sampled client uploads one block and the shared block.

    Args:
        freeze_other_blocks: the "FedBCGD_freezing" ablation — a client trains only its block
            and the shared block; everything else stays at x^r.
    """

    def __init__(self, freeze_other_blocks: bool = False):
        self.freeze_other_blocks = freeze_other_blocks
        self.block_of: dict[int, int] = {}  # this round: client id → the block j it uploads
        self._frozen: dict[int, list[tuple[int, int]]] = {}  # client id → the slices it keeps at x^r

    def configure_round(self, round):
        blocks = round.blocks
        if blocks is None:
            raise ConfigError("BlockUploadMask", "needs a block division: run it with a block algorithm "
                              "(fedbcgd, fedbcgd_plus, ...) or pass blocks to the loop")
        n, s = blocks.num_blocks, len(round.clients)
        if s < n:
            raise ConfigError("clients_per_round", f"S={s} < N={n} blocks: every block needs a client; "
                              f"raise S or lower num_blocks")
        order = np.random.default_rng(derive_seed(round.round, Purpose.BLOCK_ORDER)).permutation(s)
        self.block_of, self._frozen = {}, {}
        for position, index in enumerate(order):
            client = round.clients[index]
            self.block_of[client.client_id] = position % n
            client.upload_ranges = blocks.upload_ranges(position % n)
            if self.freeze_other_blocks:
                self._frozen[client.client_id] = _complement(client.upload_ranges, round.numel)

    def on_local_step_end(self, client):
        if self.freeze_other_blocks:
            vector, global_vector = client.vector, client.global_vector
            for start, stop in self._frozen[client.client_id]:
                vector[start:stop].copy_(global_vector[start:stop])
