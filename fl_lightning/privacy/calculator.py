"""``fl-lightning privacy``: noise multiplier ↔ ε before any training (fl_lightning.privacy.accountant).

    fl-lightning privacy --rounds 100 --cohort 100 --population 10000 --epsilon 8      → the noise multiplier z
    fl-lightning privacy --rounds 100 --cohort 100 --population 10000 --noise-multiplier 1.0  → ε
"""
from __future__ import annotations

import argparse

from fl_lightning.errors import ConfigError
from fl_lightning.privacy import accountant
from fl_lightning.privacy.mechanism import MECHANISMS


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ConfigError("fl-lightning privacy", f"{message} (fl-lightning privacy --help)")


def main(args: list[str]) -> int:
    parser = _Parser(prog="fl-lightning privacy", description="client-level DP: noise multiplier ↔ ε "
                     "(dp-accounting), for R rounds of M of K clients at δ")
    parser.add_argument("--rounds", type=int, required=True, help="R, communication rounds")
    parser.add_argument("--cohort", type=int, required=True, help="M, clients sampled per round (model.clients_per_round)")
    parser.add_argument("--population", type=int, required=True, help="K, all clients (data.num_clients)")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--epsilon", type=float, help="target ε: answers the noise multiplier")
    target.add_argument("--noise-multiplier", type=float, help="z: answers ε")
    parser.add_argument("--delta", type=float, default=None, help="δ (default min(1e-5, 1/K^1.1); must be < 1/K)")
    parser.add_argument("--sampling", default="fixed", choices=accountant.SAMPLINGS)
    parser.add_argument("--accountant", default="rdp", choices=accountant.ACCOUNTANTS)
    parser.add_argument("--mechanism", default="gaussian", choices=list(MECHANISMS))
    a = parser.parse_args(args)
    if a.rounds < 1:
        raise ConfigError("--rounds", f"must be ≥ 1, got {a.rounds}")
    delta = accountant.default_delta(a.population) if a.delta is None else a.delta
    accountant.check(a.cohort, a.population, a.sampling, a.accountant, delta)
    relation = "replace-one" if a.sampling == "fixed" else "add/remove-one"
    where = (f"R={a.rounds} rounds of M={a.cohort} of K={a.population} ({a.sampling}: {relation}, sensitivity "
             f"{accountant.SENSITIVITY[a.sampling]:g}C; {a.accountant}) at δ={delta:.3g}")
    if a.epsilon is not None:
        z = accountant.noise_multiplier_for(a.epsilon, a.rounds, a.cohort, a.population, delta, a.sampling,
                                            a.accountant, a.mechanism)
        reached = accountant.epsilon(z, a.rounds, a.cohort, a.population, delta, a.sampling, a.accountant,
                                     a.mechanism)
        print(f"noise_multiplier {z:.4f} gives ε = {reached:.4f} ≤ {a.epsilon:g} after {where}")
    else:
        if not a.noise_multiplier > 0:
            raise ConfigError("--noise-multiplier", f"must be > 0, got {a.noise_multiplier}")
        eps = accountant.epsilon(a.noise_multiplier, a.rounds, a.cohort, a.population, delta, a.sampling,
                                 a.accountant, a.mechanism)
        print(f"ε = {eps:.4f} with noise_multiplier {a.noise_multiplier:g} after {where}")
    note = accountant.DROPPED_ORDERS.note()
    if note:
        print(note)
    return 0
