"""A resumed run goes on in the run folder of its checkpoint (docs/command_line.md, "Resuming and run identity").

``--ckpt_path`` (or ``last``) naming ``<save_dir>/<name>/version_N/checkpoints/*.ckpt`` of the command's own
CSV or TensorBoard logger: the resumed fit logs to ``version_N`` again, not to a new ``version_N+1``.
Lightning's CSV writer empties a folder's metrics.csv when it opens it, so the rows of the rounds the
checkpoint holds are read before and written back first; the rows of later rounds (those a killed fit
logged after its last checkpoint, which the resumed fit logs again) are dropped, in metrics.csv and in the
per-round files (timeline.csv, pval_clients.csv, flower.csv, clients.csv).
"""
from __future__ import annotations

import csv
import os
import shutil
import warnings
from pathlib import Path
from typing import Iterator, Optional

from fl_lightning.runs.files import FOLDER_LOGGERS, is_logger
ROUND_FILES = ("timeline.csv", "pval_clients.csv", "flower.csv", "clients.csv")  # a "round" column, 1-based


def logger_roots(trainer_config) -> Iterator[tuple[str, dict, Path]]:
    """(class name, init_args, ``<save_dir>/<name>``) of each logger the command configures (WandbLogger: its project)."""
    loggers = trainer_config.get("logger")
    for logger in loggers if isinstance(loggers, list) else [loggers]:
        init_args = getattr(logger, "init_args", None)
        if init_args is None:
            continue
        kind = str(getattr(logger, "class_path", "")).rsplit(".", 1)[-1]
        name = init_args.get("project" if kind == "WandbLogger" else "name") or "lightning_logs"
        yield kind, init_args, Path(init_args.get("save_dir") or ".") / str(name)


def continue_in_checkpoint_folder(trainer_config, ckpt_path: Optional[str]) -> Optional[Path]:
    """Points the command's CSV/TensorBoard logger at the checkpoint's version folder (unless the command gives a
    version) and returns that folder; None where the checkpoint lies elsewhere. Nothing is written here."""
    if not ckpt_path or "://" in str(ckpt_path):
        return None
    folder = Path(ckpt_path).resolve().parent
    if folder.name != "checkpoints" or not folder.parent.name.startswith("version_"):
        return None
    folder = folder.parent
    for kind, init_args, root in logger_roots(trainer_config):
        if kind not in FOLDER_LOGGERS:
            continue
        if init_args.get("version") is None and root.resolve() == folder.parent and folder.name[8:].isdigit():
            init_args["version"] = int(folder.name[8:])
            return folder
    return None


def go_on_in(trainer, folder: Optional[Path], rounds_done: int) -> None:
    """Once every check passed: the folder's per-round files trimmed to ``rounds_done`` and metrics.csv's rows of
    those rounds written back first, in the CSV logger's reopened file."""
    if folder is None:
        return
    for name in ROUND_FILES:
        trim(folder / name, rounds_done)
    metrics, kept = folder / "metrics.csv", folder / "metrics.csv.kept"
    if not kept.exists() and metrics.exists():  # a copy until the rows are back: a kill in between loses none
        shutil.copyfile(metrics, f"{kept}.tmp")
        os.replace(f"{kept}.tmp", kept)
    write_back(trainer, read_rows(kept, rounds_done))
    kept.unlink(missing_ok=True)


def _number(text: str):
    return int(text) if text.lstrip("-").isdigit() else float(text)


def read_rows(path: Path, rounds_done: int) -> list[dict]:
    """metrics.csv's rows up to round ``rounds_done``, as numbers (empty cells left out)."""
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        rows = [{k: _number(v) for k, v in row.items() if v not in ("", None)} for row in csv.DictReader(f)]
    return [row for row in rows if row.get("round", 0) <= rounds_done]


def trim(path: Path, rounds_done: int) -> None:
    """Drops the rows of rounds after ``rounds_done`` from a per-round CSV file (rewritten whole, atomically)."""
    if not path.is_file():
        return
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        rows = list(reader)
    if header is None or "round" not in header:
        return
    column = header.index("round")
    kept = [row for row in rows if float(row[column]) <= rounds_done]
    if len(kept) == len(rows):
        return
    with open(f"{path}.tmp", "w", newline="") as f:
        csv.writer(f).writerows([header, *kept])
    os.replace(f"{path}.tmp", path)


def write_back(trainer, rows: list[dict]) -> None:
    """metrics.csv's kept rows, first, in the CSV logger's (reopened) file."""
    if not rows:
        return
    for logger in trainer.loggers:
        if is_logger(logger, "CSVLogger"):
            with warnings.catch_warnings():  # "Previous log files ... will be deleted": the rows come back now
                warnings.filterwarnings("ignore", message=r".*exists and is not empty.*")
                experiment = logger.experiment
            for row in rows:
                experiment.log_metrics({k: v for k, v in row.items() if k != "step"}, step=row.get("step"))
            experiment.save()
