"""``norm_bound`` (Sun et al. 2019, "Can you really backdoor federated learning?"): each upload's L2 norm over the
group's coordinates capped at M, then the weighted mean: Σ_i w_i x_i min(1, M / ‖x_i‖) / Σ_i w_i."""
from __future__ import annotations

from typing import Optional

import torch

from fl_lightning.aggregation.base import AGGREGATORS, Aggregator, weighted_mean
from fl_lightning.errors import ConfigError


@AGGREGATORS.register()
class NormBound(Aggregator):
    """Args:
        max_norm: M, the largest L2 norm an upload keeps (per group: FedBCGD's block and shared block apart).
        bucket, momentum: every rule's (fl_lightning.aggregation.base.Aggregator)."""

    name = "norm_bound"
    weighted = True

    def __init__(self, max_norm: float = 1.0, bucket: Optional[int] = None, momentum: float = 0.0):
        super().__init__(bucket, momentum)
        if not max_norm > 0:
            raise ConfigError("model.aggregator.max_norm", f"got {max_norm}; needs a norm > 0")
        self.max_norm = float(max_norm)

    def own_options(self):
        return {"max_norm": self.max_norm}

    def aggregate(self, x, weights, previous=None):
        norms = x.norm(dim=1, keepdim=True)
        scale = torch.clamp(self.max_norm / norms.clamp_min(torch.finfo(x.dtype).tiny), max=1.0)
        return weighted_mean(x * scale, weights)
