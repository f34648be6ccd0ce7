"""FedProx's proximal term (Li et al. 2020): the client minimises f_i(y) + (μ/2)‖y − x^r‖².

client_step   g ← ∇f_i(y; ζ) + μ (y − x^r)
Upload and server as FedAvg.
"""
from __future__ import annotations

import torch

from fl_lightning.callbacks.base import FLCallback
from fl_lightning.errors import ConfigError


class Proximal(FLCallback):
    """FedProx: the proximal term (μ/2)‖y − x^r‖² in every local step.

    Args:
        mu: μ ≥ 0, the weight of the proximal term (FedProx searches {0.001, 0.01, 0.1, 1}).
    """

    def __init__(self, mu: float = 0.01):
        if mu < 0:
            raise ConfigError("Proximal(mu=...)", f"must be ≥ 0, got {mu}")
        self.mu = mu

    def on_client_start(self, client):
        client.scratch[self] = torch.empty_like(client.params)  # y − x, reused: no allocation in the local step

    def on_local_gradient(self, client):
        difference = torch.sub(client.params, client.global_params, out=client.scratch[self])
        client.grad.add_(difference, alpha=self.mu)
