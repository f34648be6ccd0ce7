"""``ipm`` (Xie, Koyejo and Gupta 2020, inner-product manipulation): every malicious client uploads −ε · the mean
of the honest uploads of the same round and group."""
from __future__ import annotations

from fl_lightning.attacks.base import ATTACKS, Attack, colluders_view


@ATTACKS.register()
class IPM(Attack):
    """Args:
        epsilon: ε (small, 0.1–0.5: the mean's inner product with the truth turns negative only for a large share
            of attackers; large, e.g. 100: one attacker is enough against the mean)."""

    name = "ipm"

    def __init__(self, fraction=None, clients=None, epsilon: float = 0.5):
        super().__init__(fraction, clients)
        self.epsilon = float(epsilon)

    def own_options(self):
        return {"epsilon": self.epsilon}

    def forge(self, true, honest, generators):
        forged = colluders_view(true, honest).mean(dim=0) * -self.epsilon
        return forged.expand_as(true).clone()
