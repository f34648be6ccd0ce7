"""``SimulatedTimeBudget``: stop a fit once the simulated clock passes a budget, so that every arm of a
comparison (synchronous rounds, FedBuff's server steps, any algorithm) gets the same simulated time.

    fl-lightning fit ... --model.system slow_uplink --trainer.max_epochs 100000 \\
        --trainer.callbacks+=fl_lightning.systems.budget.SimulatedTimeBudget \\
        --trainer.callbacks.seconds=20000

The round (or server step) that reaches ``seconds`` is the last; compare arms at the budget with the last
evaluation at or before it (docs/systems/summarise_budget.py).
"""
from __future__ import annotations

import pytorch_lightning as pl

from fl_lightning.errors import ConfigError


class SimulatedTimeBudget(pl.Callback):
    """Sets ``trainer.should_stop`` at the end of the first round whose time/sim_s is ≥ ``seconds``."""

    def __init__(self, seconds: float):
        if not seconds > 0:
            raise ConfigError("SimulatedTimeBudget(seconds=...)", f"must be > 0, got {seconds}")
        self.seconds = float(seconds)

    def on_train_epoch_end(self, trainer, pl_module):
        loop = getattr(pl_module, "loop", None)
        metrics = loop.metrics() if loop is not None else {}  # the round's parts: a simulated schedule's clock
        if "time/sim_s" not in metrics:
            raise ConfigError("SimulatedTimeBudget", "needs a simulated system: give model.system")
        if metrics["time/sim_s"] >= self.seconds:
            trainer.should_stop = True
