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
from fl_lightning.seeding import Purpose, derive_seed


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

    def configure_round(self, loop, plan):
        blocks = loop.blocks
        if blocks is None:
            raise ConfigError("model.num_blocks", "BlockUploadMask needs a block division: set model.num_blocks "
                              "or model.block_division")
        n, s = blocks.num_blocks, len(plan.clients)
        if s < n:
            raise ConfigError("model.clients_per_round", f"S={s} < N={n} blocks: every block needs a client; "
                              f"raise S or lower model.num_blocks")
        order = np.random.default_rng(derive_seed(plan.round, Purpose.BLOCK_ORDER)).permutation(s)
        for position, index in enumerate(order):
            client = plan.clients[index]
            client.info["block"] = position % n
            client.upload_ranges = blocks.upload_ranges(position % n)
            if self.freeze_other_blocks:
                client.info["frozen_ranges"] = _complement(client.upload_ranges, loop.flat.numel)

    def on_local_step_end(self, loop, client):
        if self.freeze_other_blocks:
            vector, global_vector = loop.flat.vector, loop.global_vector
            for start, stop in client.info["frozen_ranges"]:
                vector[start:stop].copy_(global_vector[start:stop])
