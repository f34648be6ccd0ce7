"""pval/*: each client's own model on its own held-out data.

With ``data.personal_fraction`` set, every ``model.personal_eval_every`` rounds (and after the last
round) the module evaluates, for every client — or for a sample of ``model.personal_eval_clients``
clients drawn once from the run seed, the same clients every time — the client's personalised model:
x^r, with each personal callback's ``personalize(evaluation, client_id, vector)`` applied in order
(FedPer/FedRep/FedBN/FedBCGD-personal: its personal part from the client-state store; Ditto: its
personal model v_i; FedAvg-FT: x^r fine-tuned on the client's training data). Plain algorithms have
none: their personalised model is x^r itself, evaluated on each client's held-out data.

Logged: ``pval/acc_mean`` (unweighted mean over the clients), ``pval/acc_std`` (population standard
deviation), ``pval/acc_p10`` (the 10th percentile of the clients' accuracies, numpy's linear
interpolation: the worst 10 % are at or below it), ``pval/loss_mean`` and ``pval/clients``; every
client's accuracy goes to ``pval_clients.csv`` in the run directory (for a histogram).
"""
from __future__ import annotations

import csv
import os
from typing import Optional, Sequence

import numpy as np
import torch

from fl_lightning.errors import ConfigError
from fl_lightning.federation.evaluation import batch_sums
from fl_lightning.federation.seeding import derive_seed, generator, isolated_rng, seed_global_rng

SAMPLE_KEY, FINE_TUNE_KEY, NEW_KEY = 0x9E75, 0x9E7A, 0x9E7B


def new_client_ids(num_clients: int, count: Optional[int]) -> list[int]:
    """``model.personal_new_clients``: the clients held out of training, a sample fixed by the run seed."""
    if not count:
        return []
    return sorted(np.random.default_rng(derive_seed(NEW_KEY)).choice(num_clients, count, replace=False).tolist())


def check_new_clients(count: Optional[int], system) -> None:
    """Held out vs Poisson sampling (``model.privacy.sampling poisson``) is the Poisson sampler's refusal
    (fl_lightning.federation.seams.PoissonSampler.refuse), asked by the connector like every part's."""
    if count is None:
        return
    if count < 1:
        raise ConfigError("model.personal_new_clients", f"must be ≥ 1, got {count}; unset: none held out")
    if system is not None:
        raise ConfigError("model.personal_new_clients", "samples from the clients not held out, which model.system "
                          "does not; unset one")


def check_schedule(every: Optional[int], clients: Optional[int]) -> None:
    if every is not None and every < 1:
        raise ConfigError("model.personal_eval_every", f"must be ≥ 1 round, got {every}")
    if clients is not None and clients < 1:
        raise ConfigError("model.personal_eval_clients", f"must be ≥ 1, got {clients}; unset: every client")


def evaluated_clients(num_clients: int, sample: Optional[int], new_clients: Sequence[int] = ()) -> list[int]:
    """The clients pval/* evaluates: all, or ``model.personal_eval_clients`` of them drawn once from the run
    seed; less the clients held out of training (``model.personal_new_clients``)."""
    if sample is None or sample >= num_clients:
        ids = list(range(num_clients))
    else:
        ids = sorted(np.random.default_rng(derive_seed(SAMPLE_KEY)).choice(num_clients, sample, replace=False).tolist())
    return [cid for cid in ids if cid not in set(new_clients)]


def summarise(accuracies: list[float], losses: list[float], prefix: str = "pval") -> dict[str, float]:
    acc = np.asarray(accuracies, dtype=np.float64)
    return {f"{prefix}/acc_mean": float(acc.mean()), f"{prefix}/acc_std": float(acc.std()),
            f"{prefix}/acc_p10": float(np.percentile(acc, 10)), f"{prefix}/loss_mean": float(np.mean(losses)),
            f"{prefix}/clients": float(len(acc))}


class PersonalEvaluation:
    """Evaluates personalised models on held-out client data (module docstring)."""

    def __init__(self, flat, loss_fn, held_out, train_clients, client_state, callbacks, eval_transform,
                 batch_size: int, lr: float, every: Optional[int] = None, sample: Optional[int] = None,
                 new_clients: Sequence[int] = (), new_epochs: int = 1):
        self.flat, self.loss_fn, self.held_out, self.train_clients = flat, loss_fn, held_out, train_clients
        self.client_state, self.eval_transform, self.batch_size, self.lr = client_state, eval_transform, batch_size, lr
        self.callbacks = [cb for cb in callbacks if hasattr(cb, "personalize")]
        self.every = every
        self.new_clients, self.new_epochs = list(new_clients), new_epochs
        self.client_ids = evaluated_clients(len(held_out), sample, self.new_clients)
        self.round = 0

    def due(self, rounds_done: int, last: bool) -> bool:
        return last or (self.every is not None and rounds_done % self.every == 0)

    def personal_vector(self, client_id: int, global_vector: torch.Tensor) -> torch.Tensor:
        vector = global_vector.clone()
        for cb in self.callbacks:
            cb.personalize(self, client_id, vector)
        return vector

    def fine_tune(self, vector: torch.Tensor, client_id: int, epochs: int, lr: Optional[float]) -> None:
        """``epochs`` of plain minibatch SGD (lr: the given one, else the round's) from ``vector`` on the
        client's training data, in place; batch order and augmentation seeded by (round, client)."""
        flat, (x, y) = self.flat, self.train_clients.of(client_id)
        lr = self.lr if lr is None else lr
        seed = derive_seed(self.round, FINE_TUNE_KEY, client_id)
        order, augmentation = generator(seed), generator(seed + 1, x.device)
        flat.load(vector)
        flat.net.train()
        with isolated_rng(flat.device), torch.enable_grad():
            seed_global_rng(seed + 2, flat.device)
            for _ in range(epochs):
                perm = torch.randperm(len(y), generator=order).to(x.device)
                for start in range(0, len(y), self.batch_size):
                    idx = perm[start:start + self.batch_size]
                    loss = self.loss_fn(flat.net, self.train_clients.prepare(x[idx], augmentation), y[idx])
                    with torch.no_grad():
                        flat.params.sub_(flat.backward(loss), alpha=lr)
        vector.copy_(flat.vector)

    @torch.no_grad()
    def client_accuracy(self, client_id: int) -> tuple[float, float]:
        x, y = self.held_out.of(client_id)
        if len(y) == 0:
            return float("nan"), float("nan")
        sums = torch.zeros(3, device=x.device)
        for start in range(0, len(y), 1000):
            sums += batch_sums(self.flat.net, self.eval_transform(x[start:start + 1000]), y[start:start + 1000])
        loss, correct, count = sums.tolist()
        return correct / count, loss / count

    def run(self, global_vector: torch.Tensor, round_idx: int, lr: Optional[float] = None,
            csv_dir: Optional[str] = None) -> dict[str, float]:
        """The pval/* metrics after round ``round_idx`` (0-based); the working model is left at x^r."""
        self.round, self.lr = round_idx, (self.lr if lr is None else lr)
        net, was_training = self.flat.net, self.flat.net.training
        accuracies, losses, rows = [], [], []
        for cid in self.client_ids:
            self.flat.load(self.personal_vector(cid, global_vector))
            net.eval()
            acc, loss = self.client_accuracy(cid)
            if acc == acc:  # clients with a held-out share
                accuracies.append(acc)
                losses.append(loss)
                rows.append([round_idx + 1, cid, acc])
        never_trained = self._new_clients(global_vector)
        self.flat.load(global_vector)
        net.train(was_training)
        if csv_dir is not None:
            path = os.path.join(csv_dir, "pval_clients.csv")
            new = not os.path.exists(path)
            with open(path, "a", newline="") as f:
                writer = csv.writer(f)
                if new:
                    writer.writerow(["round", "client", "acc"])
                writer.writerows(rows)
        return {**(summarise(accuracies, losses) if accuracies else {}), **never_trained}

    def _new_clients(self, global_vector: torch.Tensor) -> dict[str, float]:
        """pval_new/*: each never-trained client's x^r fine-tuned for ``new_epochs`` (every parameter, plain
        SGD at the round's lr) on its own training data, evaluated on its held-out data."""
        accuracies, losses = [], []
        for cid in self.new_clients:
            vector = global_vector.clone()
            self.fine_tune(vector, cid, self.new_epochs, None)
            self.flat.load(vector)
            self.flat.net.eval()
            acc, loss = self.client_accuracy(cid)
            if acc == acc:
                accuracies.append(acc)
                losses.append(loss)
        return summarise(accuracies, losses, "pval_new") if accuracies else {}
