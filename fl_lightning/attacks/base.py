"""Malicious clients as a part (docs/robustness.md): which clients lie, fixed for the run by its seed, and what
they upload instead of their Δ. ``--model.attack NAME`` picks one registered in ``ATTACKS``
(``@ATTACKS.register()``), with ``--model.attack.fraction`` (of all M clients) or ``--model.attack.clients``
(their ids) and the attack's own options.

An upload attack replaces, per channel-``delta`` group of coordinates that the same clients uploaded (one FedBCGD
block, the shared block), the malicious rows of ``x`` [n, m]: ``forge(true, honest, generators)`` gets the
malicious clients' own true values [k, m] and the honest clients' values of the same round and group [h, m]
(what colluders could see) and returns [k, m]. Bytes are counted from what each client really sent, as for an
honest client: a forged upload has the same shape. A data attack (``label_flip``) changes the clients' data
instead and forges nothing."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

from fl_lightning.errors import ConfigError
from fl_lightning.registry import Registry

ATTACKS = Registry("attack")
MALICIOUS_STREAM = 0xBAD  # derive_seed(MALICIOUS_STREAM): which clients are malicious
NOISE_STREAM = 0xBADD  # derive_seed(NOISE_STREAM, round, client, group's first coordinate): a forged upload's draws


class Attack:
    """Base class. Args:
        fraction: the fraction of all M clients that are malicious (rounded to the nearest count).
        clients: the malicious clients' ids instead (then leave fraction unset)."""

    name = ""
    forges_uploads = True  # False: a data attack (the clients train on something else)

    def __init__(self, fraction: Optional[float] = None, clients: Optional[Sequence[int]] = None):
        if fraction is not None and clients is not None:
            raise ConfigError("model.attack.clients", "give model.attack.fraction or model.attack.clients, not both")
        if fraction is not None and not 0.0 < fraction <= 1.0:
            raise ConfigError("model.attack.fraction", f"got {fraction}; needs a fraction in (0, 1]" +
                              ("; 0 is no attack: drop --model.attack" if fraction == 0 else ""))
        if clients is not None and not len(clients):
            raise ConfigError("model.attack.clients", "is empty: no client is malicious, so no attack; drop "
                              "--model.attack")
        self.fraction = 0.1 if fraction is None and clients is None else None if fraction is None else float(fraction)
        self.clients = None if clients is None else sorted({int(c) for c in clients})

    def count(self, num_clients: int) -> int:
        """How many of the M clients are malicious."""
        return len(self.clients) if self.clients is not None else int(round(self.fraction * num_clients))

    def refuse(self, fit) -> Optional[ConfigError]:
        """What this attack cannot mean in ``fit`` (fl_lightning.assembly.fit.Fit), as one line; None if it can."""
        if self.clients is not None:
            wrong = [c for c in self.clients if not 0 <= c < fit.num_clients]
            if wrong:
                return ConfigError("model.attack.clients", f"ids {wrong} are not clients 0..{fit.num_clients - 1}; "
                                   "name clients of the population")
        elif self.count(fit.num_clients) == 0:
            return ConfigError("model.attack.fraction", f"{self.fraction} of {fit.num_clients} clients rounds to no "
                               "malicious client, so no attack; raise it to at least "
                               f"{0.5 / fit.num_clients:.3g} or drop --model.attack")
        return None

    def prepare(self, num_clients: int, per_round: int) -> None:
        """Once per run, before the first round: constants the attack fixes from the population (ALIE's z)."""

    def malicious(self, num_clients: int, seed: int) -> list[int]:
        """The malicious clients' ids, sorted: ``clients``, or round(fraction · M) drawn by ``seed``."""
        if self.clients is not None:
            return list(self.clients)
        count = self.count(num_clients)
        return sorted(int(c) for c in np.random.default_rng(seed).choice(num_clients, size=count, replace=False))

    def metrics(self) -> dict[str, float]:
        """What it adds to every round's row (ALIE: the z it uses)."""
        return {}

    def forge(self, true: torch.Tensor, honest: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
        return true

    def own_options(self) -> dict:
        """The attack's own options (beside fraction and clients), as plain data."""
        return {}

    def options(self) -> dict:
        chosen = {"clients": self.clients} if self.clients is not None else {"fraction": self.fraction}
        return {**chosen, **self.own_options()}


def colluders_view(true: torch.Tensor, honest: torch.Tensor) -> torch.Tensor:
    """The updates colluders compute their statistics over: the honest ones of the group, or, where every uploader
    of the group is malicious, their own true updates (their forged uploads are then computed from those)."""
    return honest if honest.shape[0] else true
