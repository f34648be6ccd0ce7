"""Each client's held-out share of its own data.

With ``data.personal_fraction`` f, client i's samples (its partition indices) are shuffled with a
generator seeded by the run seed and split: h_i = max(1, round(f·n_i)) samples are held out (none
for a client with a single sample), the rest train. Held-out and training samples are disjoint and
the split is a function of the partition and the seed, so a resumed run re-makes it exactly.
"""
from __future__ import annotations

import numpy as np
import torch

from fl_lightning.errors import ConfigError
from fl_lightning.federation.seeding import run_seed


def check_fraction(fraction) -> None:
    if fraction is not None and not 0.0 < fraction < 1.0:
        raise ConfigError("data.personal_fraction", f"must be in (0, 1) (e.g. 0.2), got {fraction}; leave it unset "
                          "for no per-client evaluation")


def hold_out_per_client(client_indices: list[torch.Tensor], fraction: float
                        ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(training indices, held-out indices) of every client, each sorted."""
    rng = np.random.default_rng([run_seed(), 0x9E75])
    train, held = [], []
    for idx in client_indices:
        n = len(idx)
        count = 0 if n < 2 else min(n - 1, max(1, int(round(fraction * n))))
        order = torch.as_tensor(rng.permutation(n), dtype=torch.long)
        held.append(idx[order[:count]].sort().values)
        train.append(idx[order[count:]].sort().values)
    return train, held
