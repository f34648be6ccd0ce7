import os
import sys
from pathlib import Path

# Bit-for-bit comparisons with numbers recorded on another machine (tests/data/preset_golden.json)
# need the same CPU kernels: ATen's AVX-512 kernels sum in another order than its AVX2 ones, the ISA
# the records were made with. Set before torch is imported; subprocesses inherit it. Run-to-run
# equality holds with either.
os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")
# `make test` runs two pytest-xdist workers on the two cores: each worker, and every process it starts, takes
# one thread (two threads per worker would oversubscribe the cores). Tests that need a count set it themselves.
XDIST_WORKER = bool(os.environ.get("PYTEST_XDIST_WORKER"))
if XDIST_WORKER:
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402

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
    torch.set_num_threads(1 if XDIST_WORKER else max(1, min(2, os.cpu_count() or 1)))


def make_trainer(max_epochs: int, **kwargs) -> pl.Trainer:
    defaults = dict(accelerator="cpu", devices=1, enable_progress_bar=False, enable_model_summary=False,
                    num_sanity_val_steps=0, log_every_n_steps=1, logger=False, enable_checkpointing=False)
    defaults.update(kwargs)
    return pl.Trainer(max_epochs=max_epochs, **defaults)


CODEC_OPTIONS = {"compression_k": "k", "qsgd_levels": "levels", "qsgd_bucket_size": "bucket_size",
                 "error_feedback": "error_feedback"}


def split_options(algorithm: str, hp: dict, default_blocks=None) -> dict:
    """FederatedModule kwargs for ``algorithm`` (a registry name) and the options in ``hp``: the algorithm's
    own (e.g. num_blocks=2) go to its object, compression_k/qsgd_levels/... to the codec, the rest stay."""
    from fl_lightning.algorithms import get
    from fl_lightning.compression import CODECS

    hp = dict(hp)
    entry = get(algorithm)
    options = {key: hp.pop(key) for key in list(hp) if key in entry.algorithm.option_names()}
    if entry.algorithm.uses_blocks and default_blocks is not None:
        options.setdefault("block_division", default_blocks)
    codec_options = {CODEC_OPTIONS[key]: hp.pop(key) for key in list(hp) if key in CODEC_OPTIONS}
    codec = hp.pop("compression", entry.codec)
    if isinstance(codec, str):
        codec = CODECS[codec](**codec_options) if codec != "none" else None
    return {"algorithm": entry.algorithm(**options), "compression": codec, **hp}


def fl_module(network, algorithm: str = "fedavg", **hp):
    """``FederatedModule(network, ...)`` with ``algorithm``'s options given flat (``split_options``)."""
    from fl_lightning import FederatedModule

    return FederatedModule(network, **split_options(algorithm, hp))
