"""``median``: the coordinate-wise median of the uploads (Yin et al. 2018), unweighted (as Flower's FedMedian)."""
from __future__ import annotations

from fl_lightning.aggregation.base import AGGREGATORS, Aggregator, coordinate_median


@AGGREGATORS.register()
class Median(Aggregator):
    name = "median"

    def aggregate(self, x, weights, previous=None):
        return coordinate_median(x)
