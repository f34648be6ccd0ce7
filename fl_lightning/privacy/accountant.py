"""Client-level ε with Google's dp-accounting (>= 0.6): one DpEvent per round, composed over rounds.

The user's noise multiplier z always means the same thing: the noise std on every released sum is z·C,
C the clip. dp-accounting's noise multiplier is the std divided by the sensitivity under the chosen
neighbouring relation, so the event is a Gaussian of multiplier z / SENSITIVITY[sampling]:

* add/remove-one (``poisson``): one client adds or removes its upload, ‖u‖ ≤ C: sensitivity C, z as is.
* replace-one (``fixed``): one client's u becomes u′, ‖u − u′‖ ≤ 2C: sensitivity 2C, the event at z/2.

The noise is not doubled: z keeps its documented meaning (std z·C), and ε is the one of the noise actually
released. How the cohort is drawn amplifies it:

* ``fixed`` (what the loop does): M of the K clients without replacement. dp-accounting's
  ``SampledWithoutReplacementDpEvent`` is supported by its RDP accountant only, and only under the
  replace-one neighbouring relation (Wang, Balle & Kasiviswanathan 2019) — the relation a fixed
  cohort size needs, since add/remove-one would change M.
* ``poisson``: each client independently with q = M/K (``PoissonSampledDpEvent``); RDP or PLD,
  add/remove-one. The loop samples that way with ``--model.privacy.sampling poisson`` (whole-model
  uploads), and the calculator answers for it (``fl-lightning privacy --sampling poisson``).

ε is reported at δ, by default δ = min(1e-5, 1/K^1.1); a δ ≥ 1/K is refused (a "guarantee" that may fail
for one client in K protects nobody).

ACCOUNTING is the version of this bookkeeping, stored in every DP checkpoint: version 2 accounts
replace-one at sensitivity 2C; checkpoints without it (version 1 accounted C) are refused at resume.
"""
from __future__ import annotations

import functools
import logging
import math
from typing import Optional

import dp_accounting
from dp_accounting import rdp, pld

from fl_lightning.errors import ConfigError
from fl_lightning.privacy.mechanism import MECHANISMS

class DroppedOrders(logging.Filter):
    """dp-accounting logs (absl) each RDP order whose log-moment series did not converge — about 120 lines for one
    calibration — and leaves that order out: ε is the minimum over the other orders, still an upper bound. Kept off
    the terminal and counted; ``note()`` is the one line a command prints when any was dropped."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if "failed to converge" in record.getMessage():
            self.count += 1
            return False
        return True

    def note(self) -> Optional[str]:
        """The line to print (None when no order was dropped since the last note)."""
        count, self.count = self.count, 0
        return None if not count else (f"fl-lightning: dp-accounting left out {count} RDP order(s) whose series did "
                                       "not converge; ε is the minimum over the other orders (still an upper bound)")


DROPPED_ORDERS = DroppedOrders()
logging.getLogger("absl").addFilter(DROPPED_ORDERS)

SAMPLINGS = ("fixed", "poisson")
ACCOUNTANTS = ("rdp", "pld")
MAX_NOISE_MULTIPLIER = 1e4
ACCOUNTING = 2
# the L2 sensitivity of a released sum, in units of the clip C, under each sampling's neighbouring relation
SENSITIVITY = {"fixed": 2.0, "poisson": 1.0}


def default_delta(population: int) -> float:
    """min(1e-5, 1/K^1.1): well below 1/K for every population."""
    return min(1e-5, 1.0 / population ** 1.1)


def round_event(event_multiplier: float, cohort: int, population: int, sampling: str = "fixed",
                mechanism: str = "gaussian") -> dp_accounting.DpEvent:
    """The DpEvent of one round, its mechanism's release at multiplier z / SENSITIVITY[sampling]
    (``event_multiplier``): noise std z·C on a sum of sensitivity SENSITIVITY[sampling]·C."""
    release = MECHANISMS[mechanism]().dp_event(event_multiplier)
    if sampling == "fixed":
        if cohort >= population:
            return release
        return dp_accounting.SampledWithoutReplacementDpEvent(population, cohort, release)
    return dp_accounting.PoissonSampledDpEvent(cohort / population, release)


def make_accountant(sampling: str = "fixed", accountant: str = "rdp", cohort: int = 0, population: int = 1):
    """pld: Poisson sampling, or a fixed cohort of everyone (a plain Gaussian, its sensitivity already in the
    event's multiplier, so the relation's own sensitivity is 1: ADD_OR_REMOVE_ONE)."""
    if accountant == "pld":
        if sampling == "fixed" and cohort < population:
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
    if accountant == "pld" and sampling == "fixed" and cohort < population:
        raise ConfigError("privacy.accountant", f"pld accounts a fixed cohort only when it is everyone (M = K), got "
                          f"M={cohort} of K={population}: dp-accounting's PLD has no sampling without replacement; use "
                          "accountant rdp, sampling poisson, or M = K")
    if delta is not None and not 0.0 < delta < 1.0 / population:
        raise ConfigError("privacy.delta", f"must be in (0, 1/K) = (0, {1 / population:.3g}) for K={population} "
                          f"clients, got {delta:g}: δ ≥ 1/K allows one client's data to leak; leave it unset "
                          f"for min(1e-5, 1/K^1.1)")


def epsilon(noise_multiplier: float, rounds: int, cohort: int, population: int, delta: Optional[float] = None,
            sampling: str = "fixed", accountant: str = "rdp", mechanism: str = "gaussian") -> float:
    """ε after ``rounds`` rounds of M = ``cohort`` of K = ``population`` clients at δ."""
    delta = default_delta(population) if delta is None else delta
    check(cohort, population, sampling, accountant, delta)
    if rounds == 0:
        return 0.0
    if not noise_multiplier > 0:
        return math.inf
    one = one_round(noise_multiplier / SENSITIVITY[sampling], cohort, population, sampling, accountant, mechanism)
    if accountant == "pld":
        return float(one._pld.self_compose(rounds).get_epsilon_for_delta(delta))
    return float(rdp.rdp_privacy_accountant.compute_epsilon(one._orders, rounds * one._rdp, delta)[0])


@functools.lru_cache(maxsize=64)
def one_round(event_multiplier: float, cohort: int, population: int, sampling: str, accountant: str,
              mechanism: str = "gaussian"):
    """The accountant after one round's event, kept: composing R rounds is then R × its RDP curve (or its PLD
    self-composed R times), exactly what composing the event R times gives (tested), without recomputing the
    event's curve every round — which cost several times a quickstart round."""
    acc = make_accountant(sampling, accountant, cohort, population)
    acc.compose(round_event(event_multiplier, cohort, population, sampling, mechanism))
    return acc


@functools.lru_cache(maxsize=32)  # the pre-fit check and the fit calibrate the same z
def noise_multiplier_for(target_epsilon: float, rounds: int, cohort: int, population: int,
                         delta: Optional[float] = None, sampling: str = "fixed", accountant: str = "rdp",
                         mechanism: str = "gaussian", tolerance: float = 1e-3) -> float:
    """The smallest z (to a relative ``tolerance``) with ε(z) ≤ ``target_epsilon``: bisection on log z."""
    if not target_epsilon > 0:
        raise ConfigError("privacy.target_epsilon", f"must be > 0, got {target_epsilon}")
    if rounds < 1:
        raise ConfigError("privacy.rounds", f"must be ≥ 1 to calibrate noise, got {rounds}")

    def eps(z):
        return epsilon(z, rounds, cohort, population, delta, sampling, accountant, mechanism)

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
