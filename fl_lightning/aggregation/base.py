"""The server's aggregation rule as a part (docs/robustness.md): what Δ̄ is, given the uploads of one channel over
one group of coordinates that the same clients uploaded (the whole model with FedAvg; one block's K_j uploads, and
separately the shared block's S uploads, with FedBCGD: spec, "FedBCGD").

An ``Aggregator`` maps ``x`` [n, m] (n clients' decoded values of m coordinates) and ``weights`` [n] (each client's
Δ weight: 1, or its sample count with model.weighted_aggregation) to [m]: ``aggregate`` is the one method a rule
implements. Registered by name in ``AGGREGATORS`` with ``@AGGREGATORS.register()``; ``--model.aggregator NAME``
picks it. Every rule also takes two options the server applies around it (fl_lightning.aggregation.server):
``bucket`` s (Karimireddy, He and Jaggi 2022: the uploads shuffled into ⌈n/s⌉ buckets, the rule run on the bucket
means) and ``momentum`` β (Karimireddy, He and Jaggi 2021: each client uploads m_i ← β m_i + (1 − β) Δ_i)."""
from __future__ import annotations

import math
from typing import Optional

import torch

from fl_lightning.errors import ConfigError
from fl_lightning.registry import Registry

AGGREGATORS = Registry("aggregator")


class Aggregator:
    """Base class. ``name``: its registry name; ``weighted``: whether it uses the clients' weights (the others
    treat every upload alike); ``stateful``: it is given its own previous output of the same coordinates
    (``previous``; zeros before the first round) and that output is kept in the checkpoint.

    Args (every rule's; a rule of your own that does not call ``super().__init__`` keeps the defaults):
        bucket: s, bucket the uploads s at a time before the rule (None: no bucketing).
        momentum: β of each client's momentum over its own uploads (0: none)."""

    name = ""
    weighted = False
    stateful = False
    bucket: Optional[int] = None
    momentum = 0.0

    def __init__(self, bucket: Optional[int] = None, momentum: float = 0.0):
        self.bucket = None if bucket is None else check_int("bucket", bucket, 2)  # 1 would only reorder
        if not 0.0 <= momentum < 1.0:
            raise ConfigError("model.aggregator.momentum", f"got {momentum}; needs 0 ≤ β < 1 (0: no client momentum)")
        self.momentum = float(momentum)

    def aggregate(self, x: torch.Tensor, weights: torch.Tensor, previous: Optional[torch.Tensor] = None) -> torch.Tensor:
        raise NotImplementedError

    @property
    def streams(self) -> bool:
        """True when it is the weighted mean with nothing around it: the server's streamed sums, bit for bit."""
        return False

    def min_clients(self) -> int:
        """The fewest inputs (uploads, or bucket means) of one group it can serve."""
        return 1

    def inputs(self, n: int) -> int:
        """How many inputs the rule gets from ``n`` uploads: ⌈n/s⌉ bucket means, or n."""
        return math.ceil(n / self.bucket) if self.bucket else n

    def serves(self, n: int) -> bool:
        return self.inputs(n) >= self.min_clients()

    def group_refusal(self, n: int, where: str) -> Optional[ConfigError]:
        """One ConfigError line if a group of ``n`` uploads (``where``: which block) is too small, else None."""
        if self.serves(n):
            return None
        need, got = self.min_clients(), self.inputs(n)
        unit = f"inputs (bucket means of {self.bucket})" if self.bucket else "uploads"
        return ConfigError("model.aggregator", f"{self.describe()} needs at least {need} {unit} per group, but "
                           f"{where} has {got}; raise model.clients_per_round, use fewer blocks or lower its f")

    def own_options(self) -> dict:
        """The rule's own options (beside bucket and momentum), as plain data."""
        return {}

    def options(self) -> dict:
        """Its constructor's options, as plain data (the run's hparams); bucket and momentum where set."""
        around = {"bucket": self.bucket} if self.bucket else {}
        return {**self.own_options(), **around, **({"momentum": self.momentum} if self.momentum else {})}

    def describe(self) -> str:
        options = ", ".join(f"{k}={v}" for k, v in self.options().items())
        return f"{self.name}({options})" if options else self.name


def weighted_mean(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Σ_i w_i x_i / Σ_i w_i."""
    return (weights.to(x.dtype) @ x) / weights.sum().to(x.dtype)


def bucket_means(x: torch.Tensor, weights: torch.Tensor, s: int, order: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows taken in ``order`` (a permutation), s at a time: each bucket's weighted mean [⌈n/s⌉, m] and its
    summed weight (Karimireddy et al. 2022, Algorithm 1)."""
    chunks = [order[i:i + s] for i in range(0, len(order), s)]
    means = torch.stack([weighted_mean(x[c], weights[c]) for c in chunks])
    return means, torch.stack([weights[c].sum() for c in chunks])


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
