"""``krum`` and ``multi_krum`` (Blanchard et al. 2017). Each upload's score is the sum of its squared distances to
its n − f − 2 nearest other uploads; Krum returns the upload of lowest score, Multi-Krum the mean of the m uploads of
lowest score, weighted by the clients' weights (as Flower's aggregate_krum). Needs n ≥ 2f + 3 uploads per group."""
from __future__ import annotations

from typing import Optional

import torch

from fl_lightning.aggregation.base import AGGREGATORS, Aggregator, check_int, squared_distances, weighted_mean


def krum_scores(x: torch.Tensor, f: int) -> torch.Tensor:
    """[n] scores: Σ of each row's n − f − 2 smallest squared distances to the other rows (at least one)."""
    distances = squared_distances(x)
    closest = max(1, x.shape[0] - f - 2)
    return distances.sort(dim=1).values[:, 1:closest + 1].sum(dim=1)  # column 0: the row itself (distance 0)


@AGGREGATORS.register()
class Krum(Aggregator):
    """Args:
        f: the number of Byzantine uploads per group it is built to tolerate.
        bucket, momentum: every rule's (fl_lightning.aggregation.base.Aggregator)."""

    name = "krum"

    def __init__(self, f: int = 1, bucket: Optional[int] = None, momentum: float = 0.0):
        super().__init__(bucket, momentum)
        self.f = check_int("f", f, 0)

    def own_options(self):
        return {"f": self.f}

    def min_clients(self):
        return 2 * self.f + 3

    def aggregate(self, x, weights, previous=None):
        return x[int(torch.argmin(krum_scores(x, self.f)))].clone()


@AGGREGATORS.register()
class MultiKrum(Krum):
    """Args:
        f: Byzantine uploads tolerated per group.
        m: how many uploads of lowest score are averaged (default n − f).
        bucket, momentum: every rule's (fl_lightning.aggregation.base.Aggregator)."""

    name = "multi_krum"
    weighted = True

    def __init__(self, f: int = 1, m: int | None = None, bucket: Optional[int] = None, momentum: float = 0.0):
        super().__init__(f, bucket, momentum)
        self.m = None if m is None else check_int("m", m, 1)

    def own_options(self):
        return {"f": self.f, "m": self.m}

    def min_clients(self):
        return max(2 * self.f + 3, self.m or 1)

    def aggregate(self, x, weights, previous=None):
        keep = self.m if self.m is not None else x.shape[0] - self.f
        chosen = torch.argsort(krum_scores(x, self.f), stable=True)[:keep]
        return weighted_mean(x[chosen], weights[chosen])
