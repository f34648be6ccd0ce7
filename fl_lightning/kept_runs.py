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
from fl_lightning.run_identity import read_run_id, run_id

KEPT_FILES = ("metrics.csv", "config.yaml")
# How far a run went and how it was measured: a kept run serves a grid point only when it went at least
# as far (a larger budget or round limit) and was evaluated at the same spacing.
AT_LEAST = ("model.max_upload_d", "trainer.max_epochs")
EQUAL = ("model.eval_every_d", "trainer.check_val_every_n_epoch")
NOT_KEPT = "not kept yet"


def _value(config: dict, dotted: str):
    for part in dotted.split("."):
        config = config.get(part) if isinstance(config, dict) else None
    return config


def _newest_config(kept: Path) -> tuple[Optional[dict], Optional[str]]:
    """The newest kept config.yaml and the run id at its top (None, None when nothing is kept)."""
    versions = sorted(kept.glob("version_*/config.yaml"), key=lambda p: int(p.parent.name.split("_")[-1]))
    if not versions:
        return None, None
    config = yaml.safe_load(versions[-1].read_text()) or {}
    return config, read_run_id(versions[-1]) or run_id(config)


def serves(kept: Path, config: dict) -> Optional[str]:
    """Why the run kept in ``kept`` does not serve a grid point of ``config`` (None: it does, skip the point).
    A kept run of other settings (another run id) is refused in one line rather than overwritten."""
    old, old_id = _newest_config(kept)
    if old is None:
        return NOT_KEPT
    if old_id != run_id(config):
        raise ConfigError("sweep --keep", f"{kept} holds another run (id {old_id}, this grid point is "
                          f"{run_id(config)}): keep this sweep in another directory, or remove that one")
    for key in AT_LEAST:
        before, now = _value(old, key), _value(config, key)
        if (math.inf if before is None else before) < (math.inf if now is None else now):
            return f"kept with {key} {before} < {now}"
    for key in EQUAL:
        if _value(old, key) != _value(config, key):
            return f"kept with {key} {_value(old, key)}, asked for {_value(config, key)}"
    return None


def keep(run_dir: Path, kept: Path) -> None:
    """Copies every version_N/{metrics.csv, config.yaml} of ``run_dir`` to ``kept``, replacing what was
    kept there in one rename (never half a run)."""
    partial = kept.with_name(f".{kept.name}.{os.getpid()}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    for version in sorted(run_dir.glob("version_*")):
        for name in KEPT_FILES:
            if (version / name).is_file():
                (partial / version.name).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(version / name, partial / version.name / name)
    if kept.exists():
        shutil.rmtree(kept)
    os.replace(partial, kept)
