"""Runs kept as small text (``fl-lightning sweep --keep DIR``): every finished run's metrics.csv and
config.yaml, without checkpoints, in ``DIR/<grid values>/version_N/`` — what a report needs, small
enough to commit, so that a set of runs outlives the machine it ran on and can be completed later."""
from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Optional

import yaml

from fl_lightning.errors import ConfigError
from fl_lightning.runs.reading import version_id, version_number
from fl_lightning.runs.identity import run_id, value_at

KEPT_FILES = ("metrics.csv", "config.yaml")
MARKER = ".kept"  # written last: a directory without it holds no finished run
# The settings a run may change at resume (TAKES_EFFECT_AT_RESUME), by what they mean for a kept run: one
# serves a grid point when it went at least as far (None: no limit) and was measured the same way.
AT_LEAST = ("model.max_upload_d", "model.target_accuracy", "model.target", "trainer.max_epochs", "trainer.max_steps")
EQUAL = ("model.eval_every_d", "model.test_every_n_rounds", "model.eval_train_objective", "model.target_metric",
         "model.target_mode", "model.personal_eval_every", "model.personal_eval_clients",
         "trainer.check_val_every_n_epoch")
HOW_COMPUTED = ("model.parallel_clients", "model.channels_last", "model.client_runner", "model.cohort_size")  # the same run, computed another way
NOT_KEPT = "not kept yet"


def _limit(value) -> float:
    return math.inf if value is None or value == -1 else value  # trainer.max_steps -1: no limit


def _versions(run_dir: Path) -> list[Path]:
    """The version_N pieces of a grid point: in ``run_dir`` itself (kept copies) or in its run folder
    ``run_dir/<label>/`` (a fit's, fl_lightning.runs.identity), oldest first."""
    found = [*run_dir.glob("version_*"), *run_dir.glob("*/version_*")]
    return sorted((p for p in found if (p / "config.yaml").is_file()),
                  key=lambda p: (version_number(p), (p / "config.yaml").stat().st_mtime))


def is_run_of(run_dir: Path, config: dict) -> bool:
    """``run_dir``'s newest version is a run of ``config`` (the same run id)."""
    versions = _versions(run_dir)
    return bool(versions) and version_id(versions[-1]) == run_id(config)


def serves(kept: Path, config: dict) -> Optional[str]:
    """Why the run kept in ``kept`` does not serve a grid point of ``config`` (None: it does, skip the point).
    A kept run of other settings (another run id) is refused in one line rather than overwritten."""
    versions = _versions(kept) if (kept / MARKER).is_file() else []
    if not versions:
        return NOT_KEPT
    old, old_id = yaml.safe_load((versions[-1] / "config.yaml").read_text()) or {}, version_id(versions[-1])
    if old_id != run_id(config):
        raise ConfigError("sweep --keep", f"{kept} holds another run (id {old_id}, this grid point is "
                          f"{run_id(config)}): keep this sweep in another directory, or remove that one")
    for key in AT_LEAST:
        if _limit(value_at(old, key)) < _limit(value_at(config, key)):
            return f"kept with {key} {value_at(old, key)} < {value_at(config, key)}"
    for key in EQUAL:
        if value_at(old, key) != value_at(config, key):
            return f"kept with {key} {value_at(old, key)}, asked for {value_at(config, key)}"
    return None


def keep(run_dir: Path, kept: Path, work: Path) -> None:
    """Copies version_N/{metrics.csv, config.yaml} of ``run_dir`` (or of its run folder ``run_dir/<label>``) — the
    versions of its newest run id, which a resumed run spans — to ``kept``, built in ``work`` first and swapped in
    by renames (never half a run)."""
    versions = _versions(run_dir)
    if not versions:
        raise ConfigError("sweep --keep", f"{run_dir} has no version_N/config.yaml to keep; the runs need a CSV "
                          "logger (trainer.logger) with its default version_N folders")
    newest = version_id(versions[-1])
    partial, replaced = work / f"{kept.name}.partial", work / f"{kept.name}.replaced"
    for stale in (partial, replaced):
        shutil.rmtree(stale, ignore_errors=True)
    for version in versions:
        if version_id(version) == newest:
            (partial / version.name).mkdir(parents=True, exist_ok=True)  # the same version_N in two label folders: the newer
            for name in KEPT_FILES:
                if (version / name).is_file():
                    shutil.copyfile(version / name, partial / version.name / name)
    (partial / MARKER).write_text(f"run id {newest}\n")
    kept.parent.mkdir(parents=True, exist_ok=True)
    if kept.exists():
        os.replace(kept, replaced)
    os.replace(partial, kept)
    shutil.rmtree(replaced, ignore_errors=True)


def check_apart(keep_dir: Path, runs_dir: Path) -> None:
    """The kept copies and the runs themselves (checkpoints included) must not share a directory."""
    a, b = keep_dir.resolve(), runs_dir.resolve()
    if a == b or a in b.parents or b in a.parents:
        raise ConfigError("--keep", f"{keep_dir} overlaps the runs' own directory {runs_dir}; keep the copies "
                          "elsewhere, e.g. docs/runs/<name>")
