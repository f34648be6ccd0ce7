"""Where a run's files go: one directory per logger (fl_lightning.run_identity names it)."""
from __future__ import annotations

import os

import pytorch_lightning as pl


def run_dirs(trainer: pl.Trainer) -> list[str]:
    """Where each logger keeps this run's files (CSV: version_N/, W&B: the run's files/, synced with it)."""
    dirs = []
    for logger in trainer.loggers:
        run_dir = logger.experiment.dir if isinstance(logger, pl.loggers.WandbLogger) else logger.log_dir
        if run_dir:
            os.makedirs(run_dir, exist_ok=True)
            dirs.append(run_dir)
    return dirs
