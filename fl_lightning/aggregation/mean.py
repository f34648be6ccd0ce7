"""``mean``: Σ_i w_i Δ_i / Σ_i w_i (spec, "FedAvg"). The default needs none of this package: the server then sums
uploads as they arrive (fl_lightning.federation.messages.ReceivedSums); this class serves a run with an attack
and no defence, where the uploads are kept to be attacked."""
from __future__ import annotations

from fl_lightning.aggregation.base import AGGREGATORS, Aggregator, weighted_mean


@AGGREGATORS.register()
class Mean(Aggregator):
    name = "mean"
    weighted = True

    @property
    def streams(self):
        return not self.bucket and not self.momentum

    def aggregate(self, x, weights, previous=None):
        return weighted_mean(x, weights)
