"""FedBCGD and FedBCGD+ (spec, "FedBCGD", "FedBCGD+"; paper Sec. 3).

FedBCGD: the model is divided into N blocks plus a shared block (fl_lightning.federation.blocks); each
round the S sampled clients are assigned blocks (client i of a seeded shuffle owns block
i mod N), train the whole model, and upload only Δ_(j) and Δ_s (≈ d/N floats). The server
averages each block over the clients that sent it and steps it with block momentum
(v_(j) ← λ v_(j) + Δ̄_(j): SGD with momentum λ, elementwise).

FedBCGD+ adds block-restricted control variates (Eq. 5) and SVRG variance reduction (Eq. 4).
"""
from __future__ import annotations

from typing import Optional, Union

import torch

from fl_lightning.algorithms.base import Algorithm, choice, fraction, positive, register
from fl_lightning.algorithms.scaffold import AUTHORS_GRAD_CLIP, authors_refresh
from fl_lightning.callbacks import BlockUploadMask, ControlVariates, VarianceReduction
from fl_lightning.errors import ConfigError

AUTHORS_MOMENTUM = 0.45  # the authors' code's block momentum


@register("fedbcgd")
class FedBCGD(Algorithm):
    """FedBCGD: train all, upload one block + the shared block; block momentum.

    Args:
        num_blocks: N, parameter blocks; default: the paper's division for the model, else 5.
        block_division: ``auto`` (the paper's if the model has one, else balanced), ``balanced``, or
            ``{blocks: [[module patterns]], shared: [patterns]}`` (fl_lightning.federation.blocks).
        shared_block: keep a shared block uploaded by every client (ablation: false).
        server_lr: η_g, the server step.
        server_momentum: λ, block momentum in [0, 1) (paper: 0.8).
    """

    summary = "FedBCGD: train all, upload one block + shared; block momentum"
    upload = "|x_j| + |x_s| ≈ d/N"
    uses_blocks = True
    freeze_other_blocks = False

    def __init__(self, num_blocks: Optional[int] = None, block_division: Union[str, dict] = "auto",
                 shared_block: bool = True, server_lr: float = 1.0, server_momentum: float = 0.8):
        if num_blocks is not None and num_blocks < 1:
            raise ConfigError(f"{type(self).__name__}(num_blocks=...)", f"must be ≥ 1, got {num_blocks}")
        self.num_blocks, self.block_division, self.shared_block = num_blocks, block_division, shared_block
        self.server_lr = positive(self, "server_lr", server_lr)
        self.server_momentum = fraction(self, "server_momentum", server_momentum)

    def callbacks(self):
        return [BlockUploadMask(freeze_other_blocks=self.freeze_other_blocks)]

    def momentum(self) -> float:
        return self.server_momentum

    def server_optimizer(self, params):
        return torch.optim.SGD(params, lr=self.server_lr, momentum=self.momentum())


@register("fedbcgd_freezing")
class FedBCGDFreezing(FedBCGD):
    """FedBCGD ablation: a client trains only its own block and the shared block (options as FedBCGD)."""

    summary = "FedBCGD ablation: train only the own block + shared"
    upload = "≈ d/N"
    freeze_other_blocks = True


@register("fedbcgd_plus")
class FedBCGDPlus(FedBCGD):
    """FedBCGD+: FedBCGD with block control variates (Eq. 5) and SVRG (Eq. 4); the block options and
    server_lr as FedBCGD.

    Args:
        server_momentum: λ, block momentum in [0, 1) (default 0.8; 0.45 with rule authors).
        control_variate: the c_i refresh, ``option2`` (default) or ``option1``.
        keep: what a client stores of its refreshed c_i: ``uploaded`` slices (default; ``all`` with rule authors).
        shared_coefficient: Eq. 5's step on the shared block's c: ``mean`` (1/M) or ``paper`` (1/(MN)).
        rule: ``spec`` or ``authors`` (their code: EMA of c, correction after the step, clip 10, λ 0.45).
        variance_reduction: the SVRG term (default: on; off with rule authors).
    """

    summary = "FedBCGD+: FedBCGD with block control variates and SVRG"
    upload = "≈ 2d/N"

    def __init__(self, num_blocks: Optional[int] = None, block_division: Union[str, dict] = "auto",
                 shared_block: bool = True, server_lr: float = 1.0, server_momentum: Optional[float] = None,
                 control_variate: str = "option2", keep: Optional[str] = None, shared_coefficient: str = "mean",
                 rule: str = "spec", variance_reduction: Optional[bool] = None):
        self.rule = choice(self, "rule", rule, ControlVariates.CHOICES["rule"])
        authors = rule == "authors"
        self.control_variate = choice(self, "control_variate", control_variate, ControlVariates.CHOICES["option"])
        if authors and control_variate != "option2":
            raise authors_refresh(self)
        self.keep = None if keep is None else choice(self, "keep", keep, ControlVariates.CHOICES["keep"])
        self.shared_coefficient = choice(self, "shared_coefficient", shared_coefficient,
                                         ControlVariates.CHOICES["shared_coefficient"])
        self.variance_reduction = variance_reduction
        super().__init__(num_blocks, block_division, shared_block, server_lr, 0.0)
        self.server_momentum = None if server_momentum is None else fraction(self, "server_momentum", server_momentum)

    def momentum(self) -> float:
        if self.server_momentum is None:
            return AUTHORS_MOMENTUM if self.rule == "authors" else 0.8
        return self.server_momentum

    def callbacks(self):
        authors = self.rule == "authors"
        keep = self.keep or ("all" if authors else "uploaded")
        reduce_variance = (not authors) if self.variance_reduction is None else self.variance_reduction
        controls = ControlVariates(self.control_variate, keep, self.shared_coefficient, block_coefficients=True,
                                   rule=self.rule)
        return super().callbacks() + [controls] + ([VarianceReduction()] if reduce_variance else [])

    def default_grad_clip(self) -> Optional[float]:
        return AUTHORS_GRAD_CLIP if self.rule == "authors" else None
