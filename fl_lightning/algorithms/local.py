"""Local training: every client trains only on its own data (the first baseline of FL-bench and PFLlib).

Each client keeps its whole model — every parameter and floating buffer — in its row of the
client-state store (fl_lightning.personalization.personal.PersonalPart; x^0 until it first trains):
loaded before its local epochs, stored after. Nothing is uploaded (0 floats), so nothing is averaged
and x^r stays x^0. After R rounds in which client i took part, its model is R × model.local_epochs
epochs of local SGD from x^0 on its own data; pval/* evaluates it on the client's held-out share.
"""
from __future__ import annotations

from fl_lightning.algorithms.base import Algorithm, register
from fl_lightning.personalization.personal import PersonalPart


def whole_model(round):
    """Every coordinate of the flat model (parameters and floating buffers)."""
    return [(0, round.numel)]


@register("local")
class Local(Algorithm):
    """Local training: each client trains its own model on its own data; nothing is uploaded or averaged."""

    summary = "Local: each client trains its own model on its own data only; nothing uploaded (0 floats)"
    upload = "0"
    compressible = False

    def __init__(self):
        pass

    def callbacks(self):
        return [PersonalPart(whole_model, "local: the whole model")]
