"""Client-level ε with Google's dp-accounting (>= 0.6): one DpEvent per round, composed over rounds.

The event of one round is the Gaussian mechanism with noise multiplier z (std z·C on a sum whose
sensitivity is C), amplified by how the cohort is drawn:

* ``fixed`` (what the loop does): M of the K clients without replacement. dp-accounting's
  ``SampledWithoutReplacementDpEvent`` is supported by its RDP accountant only, and only under the
  replace-one neighbouring relation (Wang, Balle & Kasiviswanathan 2019) — the relation a fixed
  cohort size needs, since add/remove-one would change M.
* ``poisson``: each client independently with q = M/K (``PoissonSampledDpEvent``); RDP or PLD,
  add/remove-one. The loop samples that way with ``--model.privacy.sampling poisson`` (whole-model
  uploads), and the calculator answers for it (``fl-lightning privacy --sampling poisson``).

ε is reported at δ, by default δ = 1/K^1.1 (below 1/K, as the usual "δ ≪ 1/population" asks).
"""
from __future__ import annotations

import math
from typing import Optional

import dp_accounting
from dp_accounting import rdp, pld

from fl_lightning.errors import ConfigError

SAMPLINGS = ("fixed", "poisson")
ACCOUNTANTS = ("rdp", "pld")
MAX_NOISE_MULTIPLIER = 1e4


def default_delta(population: int) -> float:
    return 1.0 / population ** 1.1


def round_event(noise_multiplier: float, cohort: int, population: int, sampling: str = "fixed"
                ) -> dp_accounting.DpEvent:
    """The DpEvent of one round."""
    gaussian = dp_accounting.GaussianDpEvent(noise_multiplier)
    if sampling == "fixed":
        if cohort >= population:
            return gaussian
        return dp_accounting.SampledWithoutReplacementDpEvent(population, cohort, gaussian)
    return dp_accounting.PoissonSampledDpEvent(cohort / population, gaussian)


def make_accountant(sampling: str = "fixed", accountant: str = "rdp"):
    if accountant == "pld":
        if sampling == "fixed":
            raise ConfigError("privacy.accountant", "pld does not support a fixed cohort drawn without replacement "
                              "in dp-accounting; use rdp, or sampling poisson")
        return pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    relation = (dp_accounting.NeighboringRelation.REPLACE_ONE if sampling == "fixed"
                else dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    return rdp.RdpAccountant(neighboring_relation=relation)


def check(cohort: int, population: int, sampling: str, accountant: str, delta: Optional[float] = None) -> None:
    if sampling not in SAMPLINGS:
        raise ConfigError("privacy.sampling", f"unknown {sampling!r}; choose one of {', '.join(SAMPLINGS)}")
    if accountant not in ACCOUNTANTS:
        raise ConfigError("privacy.accountant", f"unknown {accountant!r}; choose one of {', '.join(ACCOUNTANTS)}")
    if not 1 <= cohort <= population:
        raise ConfigError("privacy.cohort", f"needs 1 ≤ M ≤ K, got M={cohort}, K={population}")
    if delta is not None and not 0.0 < delta < 1.0:
        raise ConfigError("privacy.delta", f"must be in (0, 1), got {delta}")


def epsilon(noise_multiplier: float, rounds: int, cohort: int, population: int, delta: Optional[float] = None,
            sampling: str = "fixed", accountant: str = "rdp") -> float:
    """ε after ``rounds`` rounds of M = ``cohort`` of K = ``population`` clients at δ."""
    delta = default_delta(population) if delta is None else delta
    check(cohort, population, sampling, accountant, delta)
    if rounds == 0:
        return 0.0
    if not noise_multiplier > 0:
        return math.inf
    acc = make_accountant(sampling, accountant)
    acc.compose(round_event(noise_multiplier, cohort, population, sampling), rounds)
    return float(acc.get_epsilon(delta))


def noise_multiplier_for(target_epsilon: float, rounds: int, cohort: int, population: int,
                         delta: Optional[float] = None, sampling: str = "fixed", accountant: str = "rdp",
                         tolerance: float = 1e-3) -> float:
    """The smallest z (to a relative ``tolerance``) with ε(z) ≤ ``target_epsilon``: bisection on log z."""
    if not target_epsilon > 0:
        raise ConfigError("privacy.target_epsilon", f"must be > 0, got {target_epsilon}")
    if rounds < 1:
        raise ConfigError("privacy.rounds", f"must be ≥ 1 to calibrate noise, got {rounds}")

    def eps(z):
        return epsilon(z, rounds, cohort, population, delta, sampling, accountant)

    high = 1.0
    while eps(high) > target_epsilon:
        high *= 2
        if high > MAX_NOISE_MULTIPLIER:
            raise ConfigError("privacy.target_epsilon", f"ε = {target_epsilon:g} after {rounds} rounds is not "
                              f"reachable with noise multiplier ≤ {MAX_NOISE_MULTIPLIER:g}; raise the target or "
                              "lower the rounds")
    low = high / 2
    while eps(low) <= target_epsilon and low > 1e-3:
        high, low = low, low / 2
    while high / low > 1 + tolerance:
        middle = math.sqrt(low * high)
        low, high = (low, middle) if eps(middle) <= target_epsilon else (middle, high)
    return high
