"""Runs for tests/test_distributed.py, importable by every rank (not a test module).

As a script, launched once per rank the way torchrun / SLURM do it (MASTER_ADDR, MASTER_PORT,
WORLD_SIZE, NODE_RANK, LOCAL_RANK in the environment):  python -m tests.ddp_runs OUT
it fits every case of ``CASES`` with 2 DDP processes, and a 4-round scaffold run with a
checkpoint every round followed by its resume from round 2; rank 0 writes OUT/<case>.pt.
"""
from __future__ import annotations

import os
import signal
import sys
import time

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger

from fl_lightning import FederatedDataModule, FederatedModule
from fl_lightning.callbacks.base import FLCallback
from fl_lightning.models import MLP
from tests.conftest import fl_module
from tests.lightning_fixtures import make_classifier

ROUNDS = 3
CASES = {  # S = 5 clients per round: not divisible by the 2 ranks
    "fedavg": dict(algorithm="fedavg"),
    "fedbcgd": dict(algorithm="fedbcgd", num_blocks=2, block_division="balanced"),
    "fedbcgd_plus": dict(algorithm="fedbcgd_plus", num_blocks=2, block_division="balanced"),
    "scaffold": dict(algorithm="scaffold"),
    "topk": dict(algorithm="topk"),  # error-feedback residuals in the client-state store
    "feddc": dict(algorithm="feddc"),  # drifts in the store, their sums through loop.received
    "scaffold_k2": dict(algorithm="scaffold", parallel_clients=2),  # each rank trains 2 clients at a time
    "powersgd": dict(algorithm="powersgd"),  # each client's warm-started Q and residual in the store
    "fedbcgd_eden": dict(algorithm="fedbcgd_eden", num_blocks=2, block_division="balanced"),  # seeded rotations
    # a LightningModule with its own Adam, training logs and validation_step: its logged values over the ranks
    "own_evaluation": dict(algorithm="fedavg", local_optimizer="network"),
}


def fit(case: str, out: str, ddp: bool, rounds: int = ROUNDS, ckpt_path=None, checkpoint_every_round=False,
        version=None):
    """One run of ``case``; returns the module. Its CSV log goes to out/<case>/."""
    pl.seed_everything(0, verbose=False)
    network = make_classifier(pl)() if case == "own_evaluation" else MLP(in_features=64, num_classes=10, hidden=[32])
    module = fl_module(network, clients_per_round=5, local_epochs=1,
                             batch_size=10, lr=0.05, **CASES[case])
    data = FederatedDataModule(dataset="digits", num_clients=12, partition="dirichlet", dirichlet_rho=0.5)
    callbacks = [ModelCheckpoint(filename="{epoch}", save_top_k=-1, every_n_epochs=1)] if checkpoint_every_round else []
    trainer = pl.Trainer(max_epochs=rounds, accelerator="cpu", devices=2 if ddp else 1, strategy="ddp" if ddp else "auto",
                         logger=CSVLogger(out, name=case, version=version), callbacks=callbacks,
                         enable_checkpointing=checkpoint_every_round, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, log_every_n_steps=1)
    trainer.fit(module, data, ckpt_path=ckpt_path)
    return module


def result(module: FederatedModule) -> dict:
    """The global model (parameters and buffers, flat) and every logged row."""
    log_dir = module.trainer.logger.log_dir
    with open(os.path.join(log_dir, "metrics.csv")) as f:
        rows = f.read()
    return {"global": module.flat.vector.detach().clone(), "rows": rows}


class DieOnRank(FLCallback):
    """Kills its own process (SIGKILL: no clean-up, no goodbye) at its first client of round ``round``
    (1-based) when it runs as rank ``rank``; the other ranks then wait on a collective."""

    def __init__(self, rank: int = 1, round: int = 2):
        self.rank, self.round, self._round, self._my_rank = rank, round, 0, 0

    def setup(self, trainer, pl_module, stage):
        super().setup(trainer, pl_module, stage)
        self._my_rank = trainer.global_rank

    def configure_round(self, round):
        self._round = round.round + 1

    def on_client_start(self, client):
        if self._my_rank == self.rank and self._round >= self.round:
            os.kill(os.getpid(), signal.SIGKILL)


class StallOnRank(DieOnRank):
    """Stays alive but stops answering (sleeps ``seconds``) at its first client of round ``round`` as rank ``rank``."""

    def __init__(self, rank: int = 1, round: int = 2, seconds: float = 300.0):
        super().__init__(rank, round)
        self.seconds = seconds

    def on_client_start(self, client):
        if self._my_rank == self.rank and self._round >= self.round:
            time.sleep(self.seconds)


def main(out: str) -> None:
    torch.set_num_threads(1)
    rank_zero = int(os.environ.get("LOCAL_RANK", "0")) == 0
    for case in CASES:
        module = fit(case, out, ddp=True)
        if rank_zero:
            torch.save(result(module), os.path.join(out, f"{case}.pt"))
    full = fit("scaffold", os.path.join(out, "resume"), ddp=True, rounds=4, checkpoint_every_round=True, version=0)
    checkpoint = os.path.join(out, "resume", "scaffold", "version_0", "checkpoints", "epoch=1.ckpt")
    resumed = fit("scaffold", os.path.join(out, "resume"), ddp=True, rounds=4, ckpt_path=checkpoint, version=1)
    if rank_zero:
        torch.save({"full": result(full), "resumed": result(resumed)}, os.path.join(out, "resume.pt"))


if __name__ == "__main__":
    main(sys.argv[1])
