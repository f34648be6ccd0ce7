"""Centralised SGD on the pooled data, the paper's reference row (callbacks.PooledTraining)."""
from __future__ import annotations

from fl_lightning.algorithms.base import Algorithm, register
from fl_lightning.callbacks import PooledTraining
from fl_lightning.errors import ConfigError


@register("centralized")
class Centralized(Algorithm):
    """Centralised SGD: one pass over all clients' data per round; nothing is uploaded."""

    summary = "Centralised SGD on the pooled data, one pass per round (reference row)"
    upload = "0"
    compressible = False

    def __init__(self):
        pass

    def callbacks(self):
        return [PooledTraining()]

    def check_with(self, weighted_aggregation, compression):
        super().check_with(weighted_aggregation, compression)
        if weighted_aggregation:
            raise ConfigError("model.weighted_aggregation", "centralized SGD takes the pooled model as it is: "
                              "leave weighted_aggregation off")
