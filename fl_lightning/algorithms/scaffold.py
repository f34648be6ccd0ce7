"""SCAFFOLD (Karimireddy et al. 2020; spec, "SCAFFOLD"): control variates c_i, c correct every
local step, g ← g − c_i + c, and each client uploads Δ and Δc (2d floats). The rules, and the
authors' variant, are in callbacks.ControlVariates."""
from __future__ import annotations

from typing import Optional

from fl_lightning.algorithms.base import Algorithm, choice, positive, register
from fl_lightning.callbacks import ControlVariates
from fl_lightning.errors import ConfigError

AUTHORS_GRAD_CLIP = 10.0  # the authors' code clips every local gradient to norm 10


@register("scaffold")
class SCAFFOLD(Algorithm):
    """SCAFFOLD: control variates c_i, c.

    Args:
        control_variate: the c_i refresh, ``option2`` (c_i − c + (x^r − y)/(Tη)) or ``option1`` (∇f_i(x^r) + wd·x^r).
        rule: ``spec`` or ``authors`` (their code: c an EMA, correction after the step, gradient clip 10).
        server_lr: η_g, the server step on the mean update.
    """

    summary = "SCAFFOLD: control variates c_i, c (option II)"
    upload = "2d"

    def __init__(self, control_variate: str = "option2", rule: str = "spec", server_lr: float = 1.0):
        self.control_variate = choice(self, "control_variate", control_variate, ControlVariates.CHOICES["option"])
        self.rule = choice(self, "rule", rule, ControlVariates.CHOICES["rule"])
        if rule == "authors" and control_variate != "option2":
            raise authors_refresh(self)
        self.server_lr = positive(self, "server_lr", server_lr)

    def callbacks(self):
        return [ControlVariates(self.control_variate, "all", "mean", block_coefficients=False, rule=self.rule)]

    def default_grad_clip(self) -> Optional[float]:
        return AUTHORS_GRAD_CLIP if self.rule == "authors" else None


def authors_refresh(owner: Algorithm) -> ConfigError:
    return ConfigError(f"{type(owner).__name__}(control_variate=...)", "the authors' rule has its own refresh "
                       "(option II without η); leave control_variate at option2")
