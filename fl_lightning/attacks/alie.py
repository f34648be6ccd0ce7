"""``alie`` (Baruch, Baruch and Goldberg 2019, "A Little Is Enough"): every malicious client uploads
μ − z·σ, μ and σ the per-coordinate mean and (population) standard deviation of the honest uploads of the same
round and group. Default z: the paper's z_max for n uploads of which k are malicious,
s = ⌊n/2 + 1⌋ − k, z = Φ⁻¹((n − s)/n)."""
from __future__ import annotations

from statistics import NormalDist
from typing import Optional

from fl_lightning.attacks.base import ATTACKS, Attack, colluders_view


def z_max(n: int, k: int) -> float:
    """Baruch et al.'s z for n uploads, k malicious (at least 0)."""
    s = n // 2 + 1 - k
    p = (n - s) / n
    return max(0.0, NormalDist().inv_cdf(min(max(p, 1e-6), 1 - 1e-6)))


@ATTACKS.register()
class ALIE(Attack):
    """Args:
        z: how many standard deviations below the honest mean (default: the paper's z_max per group)."""

    name = "alie"

    def __init__(self, fraction=None, clients=None, z: Optional[float] = None):
        super().__init__(fraction, clients)
        self.z = None if z is None else float(z)

    def own_options(self):
        return {"z": self.z}

    def forge(self, true, honest, generators):
        view = colluders_view(true, honest)
        k, n = true.shape[0], true.shape[0] + honest.shape[0]
        z = self.z if self.z is not None else z_max(n, k)
        forged = view.mean(dim=0) - z * view.std(dim=0, correction=0)
        return forged.expand_as(true).clone()
