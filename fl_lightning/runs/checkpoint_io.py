"""Checkpoints that survive a kill and cannot run code (docs/command_line.md, "Resuming and run identity").

``SafeCheckpointIO`` is Lightning's ``TorchCheckpointIO`` with two changes:

* writes are atomic on local disks: the checkpoint goes to a temporary file in the same
  directory, is flushed to disk, then renamed over the target — a process killed at any
  moment leaves either the old checkpoint or the new one, never a torn file;
* reads are always ``torch.load(weights_only=True)``: tensors and plain containers only. A
  checkpoint that carries a pickled object (which could run code when unpickled) is refused
  with one line, before anything of it runs.

``FederatedModule.setup`` installs it on the Trainer's strategy when the strategy uses
Lightning's default, so it holds on every path: the CLI, ``trainer.fit(ckpt_path=...)`` from
Python, and ``FederatedModule.load_from_checkpoint``.
"""
from __future__ import annotations

import os
import pickle
import tempfile
from typing import Any, Optional

import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

from fl_lightning.errors import ConfigError


def load_weights_only(path, map_location=None, **kwargs) -> Any:
    """``torch.load(path, weights_only=True)`` (local paths or fsspec URLs), or one line if the file
    holds code-carrying pickles."""
    try:
        if "://" not in os.fspath(path):
            return torch.load(path, map_location=map_location, weights_only=True, **kwargs)
        import fsspec

        with fsspec.open(os.fspath(path), "rb") as f:
            return torch.load(f, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        raise refusal(path, err) from None


def refuse_before_algorithm_objects(checkpoint: dict, path) -> None:
    """Checkpoints written before algorithms became typed objects name the algorithm as a string, with
    its options among the module's: refused in one line."""
    algorithm = (checkpoint.get("hyper_parameters") or {}).get("algorithm")
    if isinstance(algorithm, str):
        raise ConfigError("ckpt_path", f"{os.fspath(path)!r} was written before algorithms became typed objects "
                          f"(model.algorithm {algorithm!r} with flat options); resume it with the fl-lightning version "
                          "that wrote it, or start a new run")


def refusal(path, err: pickle.UnpicklingError) -> ConfigError:
    """The one line for a checkpoint that ``weights_only=True`` would not unpickle."""
    detail = next((line.strip() for line in str(err).splitlines() if "GLOBAL" in line or "Unsupported" in line),
                  "it is not weights-only")
    return ConfigError("ckpt_path", f"{os.fspath(path)!r} carries pickled Python objects that could run code "
                       f"({detail[:160]}); refused — fl-lightning loads checkpoints weights-only")


class SafeCheckpointIO(TorchCheckpointIO):
    """Atomic local writes, weights-only reads (module docstring)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Optional[Any] = None) -> None:
        path = os.fspath(path)
        if "://" in path:  # remote file systems: Lightning's own (transactional) upload
            return super().save_checkpoint(checkpoint, path, storage_options)
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".tmp-", suffix=".ckpt", dir=directory)
        try:
            with os.fdopen(handle, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, path)
        except BaseException:
            if os.path.exists(temporary):
                os.remove(temporary)
            raise
        directory_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(directory_fd)  # the rename itself survives a power cut
        finally:
            os.close(directory_fd)

    def load_checkpoint(self, path, map_location: Optional[Any] = lambda storage, loc: storage,
                        weights_only: Optional[bool] = None) -> dict[str, Any]:
        if weights_only is False:
            raise ConfigError("weights_only", "fl-lightning loads checkpoints with weights_only=True only (a pickled "
                              "object could run code); leave it unset")
        if "://" not in os.fspath(path) and not os.path.exists(path):
            raise FileNotFoundError(f"Checkpoint file not found: {path}")
        return load_weights_only(path, map_location=map_location)


def install(trainer) -> None:
    """Gives the Trainer's strategy a ``SafeCheckpointIO`` unless the user brought their own CheckpointIO."""
    strategy = trainer.strategy
    if type(strategy.checkpoint_io) is TorchCheckpointIO:
        strategy.checkpoint_io = SafeCheckpointIO()
