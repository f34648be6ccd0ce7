"""Where a run's files go (fl_lightning.runs.identity names the run).

A logger's run folder is where Lightning puts its checkpoints: ``<save_dir>/<name>/<version>`` —
``version_N`` for the CSV/TensorBoard loggers, the W&B run id (``<save_dir>/<project>/<id>``) for
W&B. config.yaml, partition.csv, the curve and checkpoints/ lie there for every logger; W&B's own
files directory gets copies of the small files too, so that ``wandb sync`` uploads them.
"""
from __future__ import annotations

import csv
import os
from typing import Optional

import pytorch_lightning as pl


def run_folder(logger) -> str:
    """``<save_dir>/<name>/<version>``, as Lightning's ModelCheckpoint names a checkpoint's folder."""
    version = logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
    return os.path.join(logger.save_dir or ".", str(logger.name), version)


def run_dirs(trainer: pl.Trainer) -> list[str]:
    """Where this run's small files go: each logger's run folder, and W&B's files directory."""
    dirs = []
    for logger in trainer.loggers:
        for run_dir in (run_folder(logger), logger.experiment.dir if isinstance(logger, pl.loggers.WandbLogger) else None):
            if run_dir and run_dir not in dirs:
                os.makedirs(run_dir, exist_ok=True)
                dirs.append(run_dir)
    return dirs


def wandb_id(trainer: pl.Trainer) -> Optional[str]:
    """The W&B run this fit logs to (kept in checkpoints: a resumed fit continues that run)."""
    return next((logger.version for logger in trainer.loggers if isinstance(logger, pl.loggers.WandbLogger)), None)


WANDB_ROUND_METRICS = ("round", "lr", "train/*", "val/*", "test/*", "time/*", "sys/*", "privacy/*",
                       "comm/upload_bytes", "comm/download_bytes", "comm/upload_d_at_target", "comm/clients_*")


def write_start_files(trainer: pl.Trainer, datamodule, network_hparams: dict) -> None:
    """At the start of a fit (rank 0): the network's own hparams to every logger, comm/upload_d as W&B's
    x-axis of every round metric, and partition.csv (the per-client class histogram) in every run folder."""
    for logger in trainer.loggers:
        if network_hparams:
            logger.log_hyperparams({f"network/{key}": value for key, value in network_hparams.items()})
        if isinstance(logger, pl.loggers.WandbLogger):
            experiment = logger.experiment
            experiment.define_metric("comm/upload_d")
            for key in WANDB_ROUND_METRICS:
                experiment.define_metric(key, step_metric="comm/upload_d")
    for run_dir in run_dirs(trainer):
        datamodule.save_partition(os.path.join(run_dir, "partition.csv"))



def append_rows(run_dirs: list[str], name: str, columns: tuple, rows: list[dict]) -> None:
    """Appends rows to each run folder's CSV file ``name`` (the header when the file is new)."""
    for run_dir in run_dirs:
        path = os.path.join(run_dir, name)
        new = not os.path.exists(path)
        with open(path, "a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            if new:
                writer.writeheader()
            writer.writerows(rows)
