"""The checkpoint a command resumes from: read it in one line or refuse it (``--ckpt_path PATH``), find the newest
one of the same run (``--ckpt_path last``), and refuse one written by another network."""
from __future__ import annotations

import glob
import os
from typing import Optional

from fl_lightning.errors import ConfigError
from fl_lightning.runs.checkpoint_io import load_weights_only
from fl_lightning.runs.resumed_folder import logger_roots

CKPT_ALIASES = {"last", "best", "hpc", "registry"}


def check_checkpoint(path: Optional[str]) -> Optional[dict]:
    """The checkpoint at ``path`` (tensors memory-mapped), or one line saying it is not one."""
    if path is None or path in CKPT_ALIASES:
        return None
    if os.path.isfile(path) and os.path.getsize(path) == 0:
        reason = "the file is empty"
    else:
        try:
            checkpoint = load_weights_only(path, map_location="cpu", mmap=True)
            if isinstance(checkpoint, dict) and "state_dict" in checkpoint:
                return checkpoint
            reason = "no state_dict in it"
        except ConfigError:
            raise
        except Exception as err:  # any failure to read is the user's file, not our bug
            reason = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
    raise ConfigError("ckpt_path", f"{path!r} is not a readable checkpoint ({reason}); pass a .ckpt file written "
                      "by fl-lightning fit")


def newest_checkpoint(trainer_config, identity: str) -> tuple[Optional[str], Optional[dict]]:
    """``ckpt_path: last``: the newest checkpoint that an earlier piece of this same run wrote
    (<save_dir>/<name>/<version>/checkpoints/*.ckpt with run id ``identity``), so a killed run resumes
    with the same command plus ``--ckpt_path last``: its path and contents (memory-mapped), or Nones."""
    found = []
    for _, _, root in logger_roots(trainer_config):
        found += glob.glob(os.path.join(glob.escape(str(root)), "*", "checkpoints", "*.ckpt"))
    for path in sorted(found, key=os.path.getmtime, reverse=True):
        try:
            checkpoint = load_weights_only(path, map_location="cpu", mmap=True)
        except Exception:  # a half-written or foreign file is not this run's
            continue
        if (checkpoint.get("federated") or {}).get("run_id") == identity:
            return path, checkpoint
    return None, None


def check_same_network(checkpoint: dict, model) -> None:
    """A checkpoint resumes only into the network that wrote it: same tensor names and shapes."""
    saved = {name: tuple(t.shape) for name, t in checkpoint["state_dict"].items()}
    current = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    for name in sorted(set(saved) | set(current)):
        if saved.get(name) != current.get(name):
            raise ConfigError("ckpt_path", f"was written by a different network ({name}: "
                              f"{saved.get(name, 'absent')} in the checkpoint, {current.get(name, 'absent')} now); "
                              "resume with the model.network it was trained with")
