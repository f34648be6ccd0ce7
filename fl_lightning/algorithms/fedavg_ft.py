"""FedAvg + local fine-tuning: the personalised-FL baseline every method must beat.

Training is FedAvg's (nothing personal is kept, every client uploads Δ). A client's personalised
model is x^r fine-tuned on its own training data: ``finetune_epochs`` epochs of plain minibatch
SGD (no momentum, no weight decay) with ``finetune_lr`` (default: the round's local lr), batch size
model.batch_size, batch order seeded by (round, client) — done by the per-client evaluation (pval/*,
fl_lightning.personalization.evaluation), so a client that never trained is evaluated the same way.
"""
from __future__ import annotations

from typing import Optional

from fl_lightning.algorithms.base import Algorithm, positive, register
from fl_lightning.callbacks.base import FLCallback
from fl_lightning.errors import ConfigError


class FineTune(FLCallback):
    """pval/*: fine-tune x^r on the client's training data before evaluating it."""

    def __init__(self, epochs: int, lr: Optional[float]):
        self.epochs, self.lr = epochs, lr

    def personalize(self, evaluation, client_id: int, vector) -> None:
        evaluation.fine_tune(vector, client_id, self.epochs, self.lr)


@register("fedavg_ft")
class FedAvgFT(Algorithm):
    """FedAvg + local fine-tuning: FedAvg's rounds; each client's model is x^r fine-tuned on its data.

    Args:
        finetune_epochs: local epochs of SGD from x^r on the client's own training data (≥ 1).
        finetune_lr: the fine-tuning lr; default: the round's local lr.
        server_lr: η_g, the server step on the mean update.
    """

    summary = "FedAvg + local fine-tuning of x^r before per-client evaluation (finetune_epochs)"

    def __init__(self, finetune_epochs: int = 1, finetune_lr: Optional[float] = None, server_lr: float = 1.0):
        if finetune_epochs < 1:
            raise ConfigError("FedAvgFT(finetune_epochs=...)", f"must be ≥ 1, got {finetune_epochs}")
        self.finetune_epochs = finetune_epochs
        self.finetune_lr = None if finetune_lr is None else positive(self, "finetune_lr", finetune_lr)
        self.server_lr = positive(self, "server_lr", server_lr)

    def callbacks(self):
        return [FineTune(self.finetune_epochs, self.finetune_lr)]
