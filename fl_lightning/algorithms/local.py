"""Local training: every client trains only on its own data (the first baseline of FL-bench and PFLlib).

Each client keeps its whole model — every parameter and floating buffer — in its row of the
client-state store (fl_lightning.personalization.personal.PersonalPart; x^0 until it first trains):
loaded before its local epochs, stored after. Nothing is uploaded (0 floats), so nothing is averaged
and x^r stays x^0. After R rounds in which client i took part, its model is R × model.local_epochs
epochs of local SGD from x^0 on its own data; pval/* evaluates it on the client's held-out share.
Traffic is what is sent: x^0 once, when a client first trains; later rounds download nothing
(comm/download_bytes). Local needs data.personal_fraction (only pval/* measures it: val/acc is
x^0's) and refuses model.privacy (it releases nothing, so there is no ε to report).
"""
from __future__ import annotations

from fl_lightning.algorithms.base import Algorithm, register
from fl_lightning.errors import ConfigError
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
        return [OwnModel(whole_model, "local: the whole model")]

    def check_fit(self, module, datamodule) -> None:
        if getattr(module, "privacy", None) is not None:
            raise ConfigError("model.privacy", "local releases nothing (each client keeps its model, 0 floats "
                              "uploaded), so there is no ε to report; leave model.privacy unset for local")
        if getattr(datamodule, "personal_fraction", None) is None:
            raise ConfigError("data.personal_fraction", "local trains a model on each client that only pval/* "
                              "measures (val/acc is the unchanged x^0's): set --data.personal_fraction 0.2")


class OwnModel(PersonalPart):
    """The whole model kept on each client: x^r is downloaded only by a client that has no model yet (x^0)."""

    def on_client_start(self, client):
        if self.table.has(client.client_id):  # it trains on from its own model: nothing is sent to it
            client.download.parts = [part for part in client.download.parts if part.channel != "model"]
        super().on_client_start(client)
