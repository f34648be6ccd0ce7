"""Where a run's files go (fl_lightning.runs.identity names the run).

A logger's run folder is where Lightning puts its checkpoints: ``<save_dir>/<name>/<version>`` —
``version_N`` for the CSV/TensorBoard loggers, the W&B run id (``<save_dir>/<project>/<id>``) for
W&B. config.yaml, partition.csv, the curve and checkpoints/ lie there for every logger; W&B's own
files directory gets copies of the small files too, so that ``wandb sync`` uploads them. A fit without
a CSVLogger still keeps metrics.csv (the CSVLogger's columns) in its first logger's run folder, so that
``fl-lightning report`` reads a W&B or TensorBoard run too.
"""
from __future__ import annotations

import csv
import os
import sys
from typing import Optional

import pytorch_lightning as pl


FOLDER_LOGGERS = ("CSVLogger", "TensorBoardLogger")  # Lightning's loggers that log to <save_dir>/<name>/<version>


def is_logger(logger, name: str) -> bool:
    """``logger`` is Lightning's logger class ``name`` (CSVLogger, TensorBoardLogger) of either namespace,
    ``pytorch_lightning`` or ``lightning.pytorch`` (a namespace not imported holds no logger of the run)."""
    for module in ("pytorch_lightning.loggers", "lightning.pytorch.loggers"):
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None and isinstance(logger, cls):
            return True
    return False


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



def define_round_keys(loggers, row: dict) -> None:
    """Each key of the round's row, by its exact name, plotted against comm/upload_d in W&B's UI before it is
    first logged: Lightning's catch-all ``define_metric("*", step_metric="trainer/global_step")`` would otherwise
    win over the globs of WANDB_ROUND_METRICS (an exact name is honoured before any glob)."""
    for logger in loggers:
        if not isinstance(logger, pl.loggers.WandbLogger):
            continue
        defined = logger.__dict__.setdefault("_fl_defined_keys", {"comm/upload_d", "epoch", "trainer/global_step"})
        for key in sorted(set(row) - defined):
            logger.experiment.define_metric(key, step_metric="comm/upload_d")
            defined.add(key)


def keep_metrics_csv(trainer: pl.Trainer, row: dict, epoch: int) -> None:
    """The round's row in ``metrics.csv`` of the first logger's run folder when no CSVLogger writes one (W&B,
    TensorBoard): the CSVLogger's columns (sorted, ``epoch`` and ``step``), its header widened when a key is new;
    rows of this round or later (a killed fit's, logged again after a resume) are replaced."""
    loggers = trainer.loggers
    if not loggers or any(isinstance(logger, pl.loggers.CSVLogger) for logger in loggers):
        return
    folder = run_folder(loggers[0])
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "metrics.csv")
    new = {**{key: float(value) for key, value in row.items()}, "epoch": epoch, "step": epoch}
    rows, columns = [], []
    if os.path.exists(path):
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            columns, rows = list(reader.fieldnames or []), list(reader)
    earlier = [r for r in rows if r.get("round") in ("", None) or float(r["round"]) < float(new["round"])]
    if set(new) <= set(columns) and len(earlier) == len(rows):
        with open(path, "a", newline="") as f:
            csv.DictWriter(f, fieldnames=columns).writerow(new)
        return
    columns = sorted(set(columns) | set(new))
    with open(f"{path}.tmp", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows([*earlier, new])
    os.replace(f"{path}.tmp", path)


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


def save_atomically(state, path: str) -> None:
    """``torch.save(state, path)`` through a temporary file: a process killed while saving leaves the previous file
    (a server's or a node's state between rounds)."""
    import torch

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)
