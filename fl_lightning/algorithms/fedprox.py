"""FedProx (Li et al. 2020; spec, "FedProx"): the client minimises f_i(y) + (μ/2)‖y − x^r‖².

client_step   g ← ∇f_i(y; ζ) + μ (y − x^r)        (callbacks.Proximal)
Upload and server as FedAvg.
"""
from __future__ import annotations

from fl_lightning.algorithms.base import Algorithm, non_negative, positive, register
from fl_lightning.callbacks import Proximal


@register("fedprox")
class FedProx(Algorithm):
    """FedProx: FedAvg with a proximal term in every local step.

    Args:
        mu: μ ≥ 0, the weight of the proximal term (FedProx searches {0.001, 0.01, 0.1, 1}).
        server_lr: η_g, the server step on the mean update.
    """

    summary = "FedAvg with the proximal term (μ/2)‖y − x‖² (mu)"

    def __init__(self, mu: float = 0.01, server_lr: float = 1.0):
        self.mu = non_negative(self, "mu", mu)
        self.server_lr = positive(self, "server_lr", server_lr)

    def callbacks(self):
        return [Proximal(self.mu)]
