"""Run folders that a stopped fit leaves behind (docs/command_line.md, "Where runs go").

A fit holds an exclusive lock on ``<run folder>/.fit.lock`` (``fcntl.flock``) from the moment it makes its folder
until it ends; the kernel drops the lock of a killed process. A folder whose lock no one holds, of the same run id,
with no logged round (metrics.csv absent or a header only), no checkpoint and no other file than a fit writes at
its start is a leftover: a fit killed (SIGKILL, a crash, Ctrl-C) before its first round was logged. The next fit
of the run removes it before it picks its version_N, so it takes that number again rather than the next one; a
fit running beside it (its lock held) is never touched, and the two become version_0 and version_1, which
``report`` joins with a one-line note (runs/reading.py, ``merge_note``). Ctrl-C removes its own folder at once.
"""
from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

import pytorch_lightning as pl

from fl_lightning.runs.files import FOLDER_LOGGERS, is_logger, run_folder
from fl_lightning.runs.identity import read_run_id

LOCK = ".fit.lock"
START_FILES = {"config.yaml", "partition.csv", "hparams.yaml", "metrics.csv", LOCK}  # what a fit writes before round 1


def _folder_loggers(trainer: pl.Trainer) -> list:
    return [logger for logger in trainer.loggers if any(is_logger(logger, name) for name in FOLDER_LOGGERS)]


def _free(lock: Path) -> bool:
    """No process holds ``lock`` (its fit ended or was killed)."""
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops a lock taken here


def _logged(folder: Path) -> bool:
    metrics = folder / "metrics.csv"
    if not metrics.is_file():
        return False
    with open(metrics) as f:
        return sum(1 for _ in f) > 1


def is_leftover(folder: Path, identity: str) -> bool:
    """``folder`` is a fit of run ``identity`` that stopped before its first round was logged (module docstring)."""
    if not (folder / LOCK).is_file() or read_run_id(folder / "config.yaml") != identity or _logged(folder):
        return False
    for entry in folder.iterdir():
        if entry.name == "checkpoints" and entry.is_dir() and not any(entry.iterdir()):
            continue
        if entry.name not in START_FILES or not entry.is_file():
            return False
    return _free(folder / LOCK)  # last: the cheap checks first


def drop_leftovers(trainer: pl.Trainer, identity: str) -> list[str]:
    """Before a fit picks its version_N: removes the leftovers of run ``identity`` beside it (loggers whose version the
    command or a resumed checkpoint gave are left alone); returns the folders removed."""
    removed = []
    if not trainer.is_global_zero:
        return removed
    for logger in _folder_loggers(trainer):
        root = Path(logger.root_dir)
        if logger._version is not None or not root.is_dir():
            continue
        for folder in sorted(root.glob("version_*")):
            if folder.is_dir() and is_leftover(folder, identity):
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(str(folder))
    return removed


class DropsEmptyRunFolder(pl.Callback):
    """Holds each run folder's ``.fit.lock`` while the fit runs (taking the next version_N if another fit holds the one
    chosen, e.g. two fits started at once), releases it at the end; a fit stopped by Ctrl-C before it logged a round
    or wrote a checkpoint leaves no run folder behind: the next fit of the run takes that version_N again."""

    def __init__(self) -> None:
        self._locks: list[tuple[int, Path]] = []

    def setup(self, trainer: pl.Trainer, pl_module, stage: str) -> None:
        if stage != "fit" or not trainer.is_global_zero:
            return
        for logger in _folder_loggers(trainer):
            chosen = logger._version is None  # Lightning picks the next free number
            for _ in range(100):
                folder = Path(run_folder(logger))
                folder.mkdir(parents=True, exist_ok=True)
                fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    os.close(fd)
                    if chosen and isinstance(logger.version, int):  # another fit took this number a moment ago
                        logger._version = logger.version + 1
                        continue
                    break
                self._locks.append((fd, folder / LOCK))
                break

    def _release(self, keep_lock_file: bool = False) -> None:
        """Drops the locks; their files go too, unless the fit crashed (then the next fit can tell a leftover)."""
        for fd, lock in self._locks:
            if not keep_lock_file:
                lock.unlink(missing_ok=True)
            os.close(fd)
        self._locks = []

    def teardown(self, trainer: pl.Trainer, pl_module, stage: str) -> None:
        self._release()

    def on_exception(self, trainer: pl.Trainer, pl_module, exception: BaseException) -> None:
        if isinstance(exception, KeyboardInterrupt) and trainer.is_global_zero:
            for logger in trainer.loggers:
                folder = Path(run_folder(logger))
                if folder.is_dir() and not _logged(folder) and not any((folder / "checkpoints").glob("*")):
                    shutil.rmtree(folder, ignore_errors=True)
        self._release(keep_lock_file=not isinstance(exception, KeyboardInterrupt))
