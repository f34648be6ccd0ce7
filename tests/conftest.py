import os
import sys
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
requires_shared_data = pytest.mark.skipif(
    not (SHARED_DATA / "MNIST" / "raw").is_dir(),
    reason=f"{SHARED_DATA} is absent (a user's clone): the offline MNIST/CIFAR-10 copies live there",
)


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """Every test runs in its own directory, offline, with the run seed fixed to 0."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["fl-lightning"])  # in-process CLI calls get their args explicitly
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    pl.seed_everything(0, verbose=False)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


def make_trainer(max_epochs: int, **kwargs) -> pl.Trainer:
    defaults = dict(accelerator="cpu", devices=1, enable_progress_bar=False, enable_model_summary=False,
                    num_sanity_val_steps=0, log_every_n_steps=1, logger=False, enable_checkpointing=False)
    defaults.update(kwargs)
    return pl.Trainer(max_epochs=max_epochs, **defaults)
