"""``trimmed_mean``: per coordinate, drop the ⌊β·n⌋ largest and ⌊β·n⌋ smallest values and average the rest
(Yin et al. 2018), unweighted (as Flower's FedTrimmedAvg and scipy's trim_mean)."""
from __future__ import annotations

from typing import Optional

from fl_lightning.aggregation.base import AGGREGATORS, Aggregator
from fl_lightning.errors import ConfigError


@AGGREGATORS.register()
class TrimmedMean(Aggregator):
    """Args:
        beta: the fraction cut on each side, in [0, 0.5).
        bucket, momentum: every rule's (fl_lightning.aggregation.base.Aggregator)."""

    name = "trimmed_mean"

    def __init__(self, beta: float = 0.1, bucket: Optional[int] = None, momentum: float = 0.0):
        super().__init__(bucket, momentum)
        if not 0.0 <= beta < 0.5:
            raise ConfigError("model.aggregator.beta", f"got {beta}; needs 0 ≤ beta < 0.5 (the fraction cut per side)")
        self.beta = float(beta)

    def own_options(self):
        return {"beta": self.beta}

    def aggregate(self, x, weights, previous=None):
        n = x.shape[0]
        cut = int(self.beta * n)
        return x.sort(dim=0).values[cut:n - cut].mean(dim=0)
