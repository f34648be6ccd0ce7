"""The server's aggregation rule as a part (docs/robustness.md): what Δ̄ is, given the uploads of one channel over
one group of coordinates that the same clients uploaded (the whole model with FedAvg; one block's K_j uploads, and
separately the shared block's S uploads, with FedBCGD: spec, "FedBCGD").

An ``Aggregator`` maps ``x`` [n, m] (n clients' decoded values of m coordinates) and ``weights`` [n] (each client's
Δ weight: 1, or its sample count with model.weighted_aggregation) to [m]. Registered by name in ``AGGREGATORS``
with ``@AGGREGATORS.register()``; ``--model.aggregator NAME`` picks it."""
from __future__ import annotations

from typing import Optional

import torch

from fl_lightning.errors import ConfigError
from fl_lightning.registry import Registry

AGGREGATORS = Registry("aggregator")


class Aggregator:
    """Base class. ``name``: its registry name; ``weighted``: whether it uses the clients' weights (the others
    treat every upload alike); ``stateful``: it is given its own previous output of the same coordinates
    (``previous``; zeros before the first round) and that output is kept in the checkpoint."""

    name = ""
    weighted = False
    stateful = False

    def aggregate(self, x: torch.Tensor, weights: torch.Tensor, previous: Optional[torch.Tensor] = None) -> torch.Tensor:
        raise NotImplementedError

    def min_clients(self) -> int:
        """The fewest uploads of one group it can serve."""
        return 1

    def check_group(self, n: int, where: str) -> None:
        """One ConfigError line if a group of ``n`` uploads (``where``: which block) is too small."""
        need = self.min_clients()
        if n < need:
            raise ConfigError("model.aggregator", f"{self.describe()} needs at least {need} uploads per group, but "
                              f"{where} has {n}; raise model.clients_per_round, use fewer blocks or lower its f")

    def options(self) -> dict:
        """Its constructor's options, as plain data (the run's hparams)."""
        return {}

    def describe(self) -> str:
        options = ", ".join(f"{k}={v}" for k, v in self.options().items())
        return f"{self.name}({options})" if options else self.name

    def spec(self) -> dict:
        return {"class_path": f"{type(self).__module__}.{type(self).__qualname__}", "init_args": self.options()}


def weighted_mean(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Σ_i w_i x_i / Σ_i w_i."""
    return (weights.to(x.dtype) @ x) / weights.sum().to(x.dtype)


def coordinate_median(x: torch.Tensor) -> torch.Tensor:
    """Coordinate-wise median; for even n the mean of the two middle values (as numpy's)."""
    ordered, n = x.sort(dim=0).values, x.shape[0]
    if n % 2:
        return ordered[n // 2]
    return (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def squared_distances(x: torch.Tensor) -> torch.Tensor:
    """[n, n] squared L2 distances between the rows (in float64: the selection is the same as the reference's)."""
    x = x.double()
    return torch.cdist(x, x).square() if x.shape[0] else x.new_zeros(0, 0)


def check_int(option: str, value, lowest: int) -> int:
    if isinstance(value, bool) or int(value) != value or value < lowest:
        raise ConfigError(f"model.aggregator.{option}", f"got {value!r}; needs an integer ≥ {lowest}")
    return int(value)
