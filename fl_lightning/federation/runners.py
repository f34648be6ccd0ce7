"""Which ClientRunner trains a fit's clients (fl_lightning.federation.seams): ``model.client_runner NAME`` from
``RUNNERS`` — serial (``model.parallel_clients`` K > 1: K at a time, as threads), threads (``ClientPool``) or batched
(B = ``model.cohort_size`` clients as one batched model: ``BatchedRunner``), or a runner of your own registered with
``@RUNNERS.register("name")``; docs/scale_out.md."""
from __future__ import annotations

from typing import Callable, Optional

from pytorch_lightning.utilities import rank_zero_warn

from fl_lightning.federation import batched, parallel  # noqa: F401  (they register "batched" and "threads")
from fl_lightning.federation.local_training import LocalTrainer
from fl_lightning.federation.seams import RUNNERS, ClientRunner, SerialRunner


def runner_for(parallel_clients: int = 1, client_runner: str = "serial",
               cohort_size: Optional[int] = None) -> Callable[[LocalTrainer], ClientRunner]:
    """The runner's constructor from the loop's LocalTrainer. A callback that declares ``thread_safe = False``
    keeps the clients one at a time, with a line that says so."""
    runner = RUNNERS["threads" if client_runner == "serial" and parallel_clients > 1 else client_runner]

    def build(trainer: LocalTrainer) -> ClientRunner:
        unsafe = [type(cb).__name__ for cb in trainer.callbacks if not cb.thread_safe]
        if unsafe and runner is not SerialRunner:
            chosen = f"model.client_runner {client_runner}" if client_runner != "serial" else \
                f"model.parallel_clients {parallel_clients}"
            rank_zero_warn(f"{', '.join(unsafe)} declares thread_safe = False: clients train one at a time "
                           f"({chosen} ignored)")
            return SerialRunner(trainer)
        return runner.from_options(trainer, parallel_clients, cohort_size)

    return build
