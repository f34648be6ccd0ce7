"""Seeds derived from (run seed, round, client), so that any round can be replayed alone.

Nothing random in a round depends on RNG state left over from earlier rounds; this is
what makes a resumed run bit-identical to an uninterrupted one without saving RNG
state. The run seed is the one ``seed_everything`` set (``--seed_everything``).
"""
from __future__ import annotations

import os

import numpy as np


def run_seed() -> int:
    return int(os.environ.get("PL_GLOBAL_SEED", 0))


def derive_seed(*keys: int) -> int:
    """A 63-bit seed from the run seed and ``keys`` (e.g. round, client)."""
    state = np.random.SeedSequence([run_seed() & 0xFFFFFFFF, *keys]).generate_state(2, dtype=np.uint32)
    return int(state[0]) << 31 | int(state[1]) >> 1
