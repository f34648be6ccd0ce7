"""Centralised SGD, the paper's reference row ("Centralised SGD" in Tables 2-5).

Each round is one pass of minibatch SGD over the union of all clients' data, with the same
model, batch size, lr schedule and weight decay as the federated runs. Nothing crosses a
network, so nothing is counted (comm/upload_d stays 0); the round's result becomes the
global model through the same server step (pseudo-gradient x^r − y, SGD with lr 1).
"""
from __future__ import annotations

from fl_lightning.callbacks.base import FLCallback
from fl_lightning.federation.contexts import ClientTask
from fl_lightning.federation.seeding import Purpose, derive_seed


class PooledTraining(FLCallback):
    pools_clients_data = True  # no federated client holds the pooled data (fl_lightning.assembly.fit.HookTraits)

    def configure_round(self, round):
        """Replaces the sampled clients with one pooled task: all data, one epoch, nothing sent."""
        round.clients[:] = [ClientTask(-1, 0, derive_seed(round.round, Purpose.POOLED), round.total_samples,
                                       [(0, round.numel)], local_epochs=1, pooled=True)]
