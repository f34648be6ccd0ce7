"""``sign_flip``: upload −λ·Δ instead of Δ (Damaskinos et al. 2018; Allen-Zhu et al. 2021)."""
from __future__ import annotations

from fl_lightning.attacks.base import ATTACKS, Attack


@ATTACKS.register()
class SignFlip(Attack):
    """Args:
        factor: λ (default 1: the honest update reversed)."""

    name = "sign_flip"

    def __init__(self, fraction=None, clients=None, factor: float = 1.0):
        super().__init__(fraction, clients)
        self.factor = float(factor)

    def own_options(self):
        return {"factor": self.factor}

    def forge(self, true, honest, generators):
        return true * -self.factor
