"""``gaussian``: upload noise N(0, σ²) per coordinate instead of Δ (Blanchard et al. 2017's Gaussian Byzantine
worker); the draws are seeded by (run seed, round, client)."""
from __future__ import annotations

import torch

from fl_lightning.attacks.base import ATTACKS, Attack
from fl_lightning.errors import ConfigError


@ATTACKS.register()
class Gaussian(Attack):
    """Args:
        std: σ."""

    name = "gaussian"

    def __init__(self, fraction=None, clients=None, std: float = 1.0):
        super().__init__(fraction, clients)
        if not std >= 0:
            raise ConfigError("model.attack.std", f"got {std}; needs a standard deviation ≥ 0")
        self.std = float(std)

    def own_options(self):
        return {"std": self.std}

    def forge(self, true, honest, generators):
        rows = [torch.randn(true.shape[1], generator=g, dtype=true.dtype) for g in generators]
        return torch.stack(rows).to(true.device) * self.std
