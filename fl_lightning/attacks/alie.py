"""``alie`` (Baruch, Baruch and Goldberg 2019, "A Little Is Enough"): every malicious client uploads μ − z·σ, μ and
σ the per-coordinate mean and (population) standard deviation of the honest uploads of the same round and group.

z is fixed once per run, as in the paper and in Karimireddy et al. 2022's code: from n = S, the clients of a round,
and k = S·m/M, the attackers expected among them (m of the M clients malicious),

    s = ⌊n/2 + 1⌋ − k,   z = Φ⁻¹((n − s)/n)   (at least 0),

so FedAvg and FedBCGD face the same z under the same settings, whatever a block's share of attackers in a round.
``z`` sets it instead. Without ``z``, a run whose expected attackers reach ⌊n/2 + 1⌋ is refused (Φ⁻¹(1) is
infinite: a majority needs no little)."""
from __future__ import annotations

from statistics import NormalDist
from typing import Optional

from fl_lightning.attacks.base import ATTACKS, Attack, colluders_view
from fl_lightning.errors import ConfigError


def z_max(n: int, k: float) -> float:
    """Baruch et al.'s z for n uploads of which k (expected) are malicious; None where it is infinite."""
    s = n // 2 + 1 - k
    p = (n - s) / n
    return None if p >= 1 else max(0.0, NormalDist().inv_cdf(p)) if p > 0 else 0.0


@ATTACKS.register()
class ALIE(Attack):
    """Args:
        z: how many standard deviations below the honest mean (default: the paper's z from S and the expected
            attackers per round, fixed for the run)."""

    name = "alie"

    def __init__(self, fraction=None, clients=None, z: Optional[float] = None):
        super().__init__(fraction, clients)
        self.z = None if z is None else float(z)
        self.used_z = self.z  # the run's z, once prepared

    def own_options(self):
        return {"z": self.z}

    def _expected(self, num_clients: int, per_round: int) -> float:
        return per_round * self.count(num_clients) / num_clients

    def refuse(self, fit):
        refusal = super().refuse(fit)
        if refusal is None and self.z is None and z_max(fit.per_round, self._expected(fit.num_clients, fit.per_round)) is None:
            k = self._expected(fit.num_clients, fit.per_round)
            return ConfigError("model.attack", f"alie's z is infinite with {k:g} of S={fit.per_round} clients a round "
                               "malicious (a majority); set model.attack.z or lower the fraction")
        return refusal

    def prepare(self, num_clients, per_round):
        if self.z is None:
            self.used_z = z_max(per_round, self._expected(num_clients, per_round))

    def metrics(self):
        return {"attack/alie_z": float(self.used_z)} if self.used_z is not None else {}

    def forge(self, true, honest, generators):
        if self.used_z is None:
            raise ConfigError("model.attack", "alie's z is fixed before the first round (prepare); call "
                              "prepare(M, S) or give z")
        view = colluders_view(true, honest)
        forged = view.mean(dim=0) - self.used_z * view.std(dim=0, correction=0)
        return forged.expand_as(true).clone()
