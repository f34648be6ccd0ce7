"""``centered_clip`` (Karimireddy, He and Jaggi 2021, "Learning from History for Byzantine Robust Optimization"):
starting from the previous round's aggregate v of the same coordinates (zeros at first), ``iterations`` times

    v ← v + Σ_i w_i (x_i − v) · min(1, τ / ‖x_i − v‖) / Σ_i w_i

Weighted by the clients' weights (all 1 unless model.weighted_aggregation). Stateful: v is kept per coordinate and
saved in the checkpoint."""
from __future__ import annotations

from typing import Optional

import torch

from fl_lightning.aggregation.base import AGGREGATORS, Aggregator, check_int
from fl_lightning.errors import ConfigError


@AGGREGATORS.register()
class CenteredClip(Aggregator):
    """Args:
        tau: the clipping radius τ around the centre.
        iterations: clipping iterations per round (the paper: 1 with momentum, more without).
        bucket, momentum: every rule's (fl_lightning.aggregation.base.Aggregator)."""

    name = "centered_clip"
    weighted = True
    stateful = True

    def __init__(self, tau: float = 1.0, iterations: int = 3, bucket: Optional[int] = None, momentum: float = 0.0):
        super().__init__(bucket, momentum)
        if not tau > 0:
            raise ConfigError("model.aggregator.tau", f"got {tau}; needs a radius > 0")
        self.tau = float(tau)
        self.iterations = check_int("iterations", iterations, 1)

    def own_options(self):
        return {"tau": self.tau, "iterations": self.iterations}

    def aggregate(self, x, weights, previous=None):
        v = torch.zeros_like(x[0]) if previous is None else previous.to(x.dtype).clone()
        w = weights.to(x.dtype) / weights.sum().to(x.dtype)
        for _ in range(self.iterations):
            diff = x - v
            norms = diff.norm(dim=1)
            scale = torch.clamp(self.tau / norms.clamp_min(torch.finfo(x.dtype).tiny), max=1.0)
            v = v + (w * scale) @ diff
        return v
