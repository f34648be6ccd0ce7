"""FedAvg and its server-optimizer variants (spec, "FedAvg", "FedAvgM", "FedAdam"; Reddi et al. 2020).

Every client trains E local epochs from x^r and uploads Δ_i = y_i − x^r (d floats); the server
steps x^r with an optimizer on the pseudo-gradient −Δ̄ (fl_lightning.federation.server_optimizers):
SGD(η_g) gives x + η_g Δ̄, SGD with momentum λ FedAvgM, Adam/Yogi FedAdam/FedYogi.
"""
from __future__ import annotations

import torch

from fl_lightning.algorithms.base import Algorithm, fraction, positive, register
from fl_lightning.federation.server_optimizers import FedAdam as FedAdamStep, FedYogi as FedYogiStep


@register("fedavg")
class FedAvg(Algorithm):
    """FedAvg: mean of the clients' updates.

    Args:
        server_lr: η_g, the server step on the mean update.
    """

    summary = "FedAvg: mean of the clients' updates"

    def __init__(self, server_lr: float = 1.0):
        self.server_lr = positive(self, "server_lr", server_lr)


@register("fedavgm")
class FedAvgM(Algorithm):
    """FedAvgM: FedAvg with server momentum.

    Args:
        server_lr: η_g, the server step.
        server_momentum: λ, server momentum in [0, 1) (v ← λ v + Δ̄; x ← x + η_g v).
    """

    summary = "FedAvg with server momentum λ (server_momentum)"

    def __init__(self, server_lr: float = 1.0, server_momentum: float = 0.8):
        self.server_lr = positive(self, "server_lr", server_lr)
        self.server_momentum = fraction(self, "server_momentum", server_momentum)

    def server_optimizer(self, params):
        return torch.optim.SGD(params, lr=self.server_lr, momentum=self.server_momentum)


@register("fedadam")
class FedAdam(Algorithm):
    """FedAdam: an Adam server step without bias correction (Reddi et al. 2020, Algorithm 2).

    Args:
        server_lr: η, the server step.
        betas: (β1, β2), the moment decays, each in [0, 1).
        tau: τ > 0, the adaptivity constant (v starts at τ²).
    """

    summary = "FedAvg with an Adam server step (Reddi et al. 2020)"
    step = FedAdamStep

    def __init__(self, server_lr: float = 0.01, betas: tuple[float, float] = (0.9, 0.99), tau: float = 1e-3):
        self.server_lr = positive(self, "server_lr", server_lr)
        self.betas = tuple(fraction(self, "betas", beta) for beta in betas)
        self.tau = positive(self, "tau", tau)

    def server_optimizer(self, params):
        return self.step(params, lr=self.server_lr, betas=self.betas, tau=self.tau)


@register("fedyogi")
class FedYogi(FedAdam):
    """FedYogi: as FedAdam (the same options), with Yogi's second moment v ← v − (1−β2) g² sign(v − g²)."""

    summary = "FedAvg with a Yogi server step (Reddi et al. 2020)"
    step = FedYogiStep
