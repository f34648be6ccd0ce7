"""``scale``: upload λ·Δ (model replacement, Bagdasaryan et al. 2020: λ ≈ S boosts one update to replace the
average)."""
from __future__ import annotations

from fl_lightning.attacks.base import ATTACKS, Attack


@ATTACKS.register()
class Scale(Attack):
    """Args:
        factor: λ."""

    name = "scale"

    def __init__(self, fraction=None, clients=None, factor: float = 10.0):
        super().__init__(fraction, clients)
        self.factor = float(factor)

    def own_options(self):
        return {"factor": self.factor}

    def forge(self, true, honest, generators):
        return true * self.factor
