"""Which ClientRunner trains a fit's clients (fl_lightning.federation.seams): ``model.client_runner`` serial,
threads (``model.parallel_clients`` K at a time: ``ClientPool``) or batched (B = ``model.cohort_size`` clients as one
batched model: ``BatchedRunner``); docs/scale_out.md."""
from __future__ import annotations

from typing import Callable, Optional

import torch
from pytorch_lightning.utilities import rank_zero_warn

from fl_lightning.federation.batched import BatchedRunner
from fl_lightning.federation.local_training import LocalTrainer
from fl_lightning.federation.parallel import ClientPool
from fl_lightning.federation.seams import ClientRunner, SerialRunner


def runner_for(parallel_clients: int = 1, client_runner: str = "serial",
               cohort_size: Optional[int] = None) -> Callable[[LocalTrainer], ClientRunner]:
    """The runner's constructor from the loop's LocalTrainer. A callback that declares ``thread_safe = False``
    keeps the clients one at a time, with a line that says so."""

    def build(trainer: LocalTrainer) -> ClientRunner:
        unsafe = [type(cb).__name__ for cb in trainer.callbacks if not cb.thread_safe]
        if unsafe and (client_runner == "batched" or parallel_clients > 1):
            chosen = "model.client_runner batched" if client_runner == "batched" else \
                f"model.parallel_clients {parallel_clients}"
            rank_zero_warn(f"{', '.join(unsafe)} declares thread_safe = False: clients train one at a time "
                           f"({chosen} ignored)")
        elif client_runner == "batched":
            return BatchedRunner(trainer, cohort_size)
        elif parallel_clients > 1:
            return ClientPool(trainer, parallel_clients, torch.get_num_threads())
        return SerialRunner(trainer)

    return build
