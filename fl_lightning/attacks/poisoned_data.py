"""A data attack's side of the fit (``label_flip``; docs/robustness.md): the malicious clients' labels flipped when
training starts and restored when the fit ends — a part of the fit's data, added by the connector beside the robust
server (fl_lightning.assembly.connector.data_parts, which a Flower node asks too), which draws the malicious
clients and names them (``malicious``)."""
from __future__ import annotations

import pytorch_lightning as pl


class PoisonedData(pl.Callback):
    """Args:
        server: the fit's robust server (fl_lightning.aggregation.RobustServer): its ``attack`` relabels, its
            ``malicious`` clients (drawn from the run seed at set-up) are relabelled."""

    def __init__(self, server):
        self.server = server
        self.flipped = None  # (the clients' data, its labels before the flip)

    def on_train_start(self, trainer, pl_module) -> None:
        self.poison(trainer.datamodule, pl_module.hparams.clients_per_round)

    def poison(self, data, per_round: int) -> None:
        """The malicious clients' labels in ``data`` flipped, once; the malicious clients drawn first where no fit
        set the server up (a Flower node's copy of the data, under the run seed, as the fit draws them)."""
        if self.flipped is not None:
            return
        if not self.server.num_clients:  # no fit set the server up (RobustServer.setup): a node's copy of the data
            self.server.start(data.num_clients, self.server.per_round or per_round)
        data.fingerprint()  # the data's identity (checkpoints, resume) is the data as given, unflipped
        clients = data.clients
        original = clients.y.clone()
        classes = int(getattr(data, "num_classes", 0) or int(original.max()) + 1)
        for cid in sorted(self.server.malicious):
            a, b = clients.offsets[cid], clients.offsets[cid + 1]
            clients.y[a:b] = self.server.attack.flipped(original[a:b], classes)
        self.flipped = (clients, original)

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if self.flipped is not None:
            clients, original = self.flipped
            clients.y.copy_(original)
            self.flipped = None
