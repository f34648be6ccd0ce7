"""Malicious clients (docs/robustness.md): ``--model.attack NAME``, one file per attack, each registered in
``ATTACKS``."""
from fl_lightning.attacks.base import ATTACKS, Attack
from fl_lightning.attacks.sign_flip import SignFlip
from fl_lightning.attacks.gaussian import Gaussian
from fl_lightning.attacks.scale import Scale
from fl_lightning.attacks.alie import ALIE
from fl_lightning.attacks.ipm import IPM
from fl_lightning.attacks.label_flip import LabelFlip

__all__ = ["ATTACKS", "Attack", "SignFlip", "Gaussian", "Scale", "ALIE", "IPM", "LabelFlip"]
