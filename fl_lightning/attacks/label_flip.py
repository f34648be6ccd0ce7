"""``label_flip`` (a data attack; Tolpegin et al. 2020): the malicious clients train honestly on relabelled data,
y → C − 1 − y (``reverse``) or y → (y + 1) mod C (``shift``), C the number of classes. Their uploads are their
true updates."""
from __future__ import annotations

import torch

from fl_lightning.attacks.base import ATTACKS, Attack
from fl_lightning.errors import ConfigError


@ATTACKS.register()
class LabelFlip(Attack):
    """Args:
        mapping: ``reverse`` (y → C − 1 − y) or ``shift`` (y → y + 1 mod C)."""

    name = "label_flip"
    forges_uploads = False

    def __init__(self, fraction=None, clients=None, mapping: str = "reverse"):
        super().__init__(fraction, clients)
        if mapping not in ("reverse", "shift"):
            raise ConfigError("model.attack.mapping", f"got {mapping!r}; choose reverse or shift")
        self.mapping = mapping

    def refuse(self, fit):
        if fit.label_counts is None:
            return ConfigError("model.attack", "label_flip relabels classes, but this task's targets are not class "
                               "labels (no integer labels, no class count); choose an upload attack such as sign_flip")
        return super().refuse(fit)

    def own_options(self):
        return {"mapping": self.mapping}

    def flipped(self, y: torch.Tensor, num_classes: int) -> torch.Tensor:
        return (num_classes - 1 - y) if self.mapping == "reverse" else (y + 1) % num_classes
