"""``bulyan`` (El Mhamdi et al. 2018): θ = n − 2f uploads chosen by Krum one at a time (each chosen one removed from
the rest), then per coordinate the mean of the β = θ − 2f chosen values closest to their median. Unweighted (as
Flower's aggregate_bulyan with Krum). Needs n ≥ 4f + 3 uploads per group."""
from __future__ import annotations

from typing import Optional

import torch

from fl_lightning.aggregation.base import AGGREGATORS, Aggregator, check_int, coordinate_median
from fl_lightning.aggregation.krum import krum_scores


@AGGREGATORS.register()
class Bulyan(Aggregator):
    """Args:
        f: Byzantine uploads tolerated per group.
        bucket, momentum: every rule's (fl_lightning.aggregation.base.Aggregator)."""

    name = "bulyan"

    def __init__(self, f: int = 1, bucket: Optional[int] = None, momentum: float = 0.0):
        super().__init__(bucket, momentum)
        self.f = check_int("f", f, 0)

    def own_options(self):
        return {"f": self.f}

    def min_clients(self):
        return 4 * self.f + 3

    def aggregate(self, x, weights, previous=None):
        n, f = x.shape[0], self.f
        theta = n - 2 * f
        rest, chosen = list(range(n)), []
        for _ in range(theta):
            best = rest[int(torch.argmin(krum_scores(x[rest], f)))]
            chosen.append(best)
            rest.remove(best)
        selected = x[chosen]
        median = coordinate_median(selected)
        closest = (selected - median).abs().argsort(dim=0, stable=True)[:theta - 2 * f]
        return selected.gather(0, closest).mean(dim=0)
