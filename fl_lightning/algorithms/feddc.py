"""FedDC (Gao et al., CVPR 2022; spec, "FedDC"): local drift h_i and gradient correction; the rules,
and the choices taken from the public code, are in callbacks.DriftCorrection."""
from __future__ import annotations

from fl_lightning.algorithms.base import Algorithm, non_negative, positive, register
from fl_lightning.callbacks import DriftCorrection


@register("feddc")
class FedDC(Algorithm):
    """FedDC: local drift h_i and gradient correction.

    Args:
        alpha: α ≥ 0, the weight of the drift penalty (FedDC: 0.01).
        scale_alpha_by_size: α_i = α·mean(n)/n_i for clients of unequal size, as the public code does.
        server_lr: η_g, the server step.
    """

    summary = "FedDC: local drift h_i and gradient correction (alpha)"

    def __init__(self, alpha: float = 0.01, scale_alpha_by_size: bool = False, server_lr: float = 1.0):
        self.alpha = non_negative(self, "alpha", alpha)
        self.scale_alpha_by_size = scale_alpha_by_size
        self.server_lr = positive(self, "server_lr", server_lr)

    def callbacks(self):
        return [DriftCorrection(self.alpha, self.scale_alpha_by_size)]
