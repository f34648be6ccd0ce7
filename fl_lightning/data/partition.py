"""Splitting one labelled data set among M clients (paper Sec. 5.1, spec "Experiment settings").

Every client gets the same number of samples n (``samples_per_client``; default
⌊N/M⌋). Label skew follows the Dirichlet scheme of the FedDyn/FedDC/FedBCGD code:
client i draws class proportions p_i ~ Dir(ρ·1_C), then
fills its n slots one sample at a time by drawing a class from p_i and taking the next
unused sample of that class; a class that runs out is removed from every client's
proportions. Small ρ means strong skew; ρ → ∞ approaches IID.

Two more splits of personalised-FL papers:

- ``shards`` (the pathological non-IID split of McMahan et al. 2017, as PFLlib and FL-bench make it):
  every client holds exactly k classes (``classes_per_client``), n/k samples of each (the first
  n mod k of its classes one more). With π a seeded
  permutation of the C classes, client i holds classes π[(i·k + j) mod C], j < k, so every class goes
  to ≈ M·k/C clients; its n/k samples of a class are drawn without replacement from that class's
  shuffled pool (no shard straddles two classes, unlike cutting the label-sorted data into shards).
- ``quantity`` skew: labels IID, sizes unequal. Weights w_i ~ LogNormal(0, σ²) (σ =
  ``quantity_sigma``, default 1.0); client i gets n_i = ⌊T·w_i/Σw⌋ + (1 for the T − Σ⌊·⌋ largest
  remainders) of T = M·n shuffled samples, at least 1 each (taken from the largest clients).

All functions are plain: labels and a ``numpy.random.Generator`` in, one index tensor per
client out.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from fl_lightning.errors import ConfigError


def _client_size(num_samples: int, num_clients: int, samples_per_client: Optional[int]) -> int:
    n = num_samples // num_clients if samples_per_client is None else samples_per_client
    if n < 1 or n * num_clients > num_samples:
        raise ConfigError(
            "data.samples_per_client",
            f"{num_clients} clients × {n} samples needs {num_clients * max(n, 1)} but the data set has "
            f"{num_samples}; lower data.num_clients or data.samples_per_client",
        )
    return n


def iid_partition(labels: np.ndarray, num_clients: int, rng: np.random.Generator,
                  samples_per_client: Optional[int] = None) -> list[torch.Tensor]:
    n = _client_size(len(labels), num_clients, samples_per_client)
    order = rng.permutation(len(labels))[: n * num_clients]
    return [torch.as_tensor(np.sort(chunk), dtype=torch.long) for chunk in order.reshape(num_clients, n)]


def dirichlet_partition(labels: np.ndarray, num_clients: int, rho: float, rng: np.random.Generator,
                        samples_per_client: Optional[int] = None) -> list[torch.Tensor]:
    n = _client_size(len(labels), num_clients, samples_per_client)
    classes = np.unique(labels)
    proportions = rng.dirichlet(np.full(len(classes), rho), size=num_clients)  # (M, C)
    pools = [rng.permutation(np.flatnonzero(labels == c)).tolist() for c in classes]
    remaining = proportions.copy()
    clients = []
    for i in range(num_clients):
        taken = []
        for _ in range(n):
            p = remaining[i]
            total = p.sum()
            if total <= 0:  # every class this client wanted ran out: fall back to what is left
                p = np.array([len(pool) > 0 for pool in pools], dtype=float)
                total = p.sum()
            c = int(np.searchsorted(np.cumsum(p / total), rng.random(), side="right"))
            c = min(c, len(classes) - 1)
            taken.append(pools[c].pop())
            if not pools[c]:
                remaining[:, c] = 0.0
        clients.append(torch.as_tensor(sorted(taken), dtype=torch.long))
    return clients


def shards_partition(labels: np.ndarray, num_clients: int, classes_per_client: int, rng: np.random.Generator,
                     samples_per_client: Optional[int] = None) -> list[torch.Tensor]:
    n = _client_size(len(labels), num_clients, samples_per_client)
    classes = np.unique(labels)
    k = classes_per_client
    if not 1 <= k <= min(len(classes), n):
        raise ConfigError("data.classes_per_client", f"must be in 1..{min(len(classes), n)} ({len(classes)} classes, "
                          f"{n} samples per client), got {k}")
    order = rng.permutation(len(classes))
    pools = [rng.permutation(np.flatnonzero(labels == c)).tolist() for c in classes]
    clients = []
    for i in range(num_clients):
        taken = []
        for j in range(k):
            c, count = order[(i * k + j) % len(classes)], n // k + (j < n % k)
            if len(pools[c]) < count:
                raise shards_too_large(labels, classes, order, num_clients, k, n, samples_per_client)
            taken += [pools[c].pop() for _ in range(count)]
        clients.append(torch.as_tensor(sorted(taken), dtype=torch.long))
    return clients


def shards_too_large(labels, classes, order, num_clients: int, k: int, n: int,
                     samples_per_client: Optional[int]) -> ConfigError:
    """The one line for shards that some class cannot fill, with the largest data.samples_per_client that fits."""
    uses = np.bincount([order[p % len(classes)] for p in range(num_clients * k)], minlength=len(classes))
    sizes = np.array([np.sum(labels == c) for c in classes])
    fits = k * int(min(sizes[c] // uses[c] for c in range(len(classes)) if uses[c]))
    given = (f"data.samples_per_client {n}" if samples_per_client is not None else
             f"{n} samples per client (data.samples_per_client unset: the {len(labels)} samples over {num_clients} clients)")
    return ConfigError("data.samples_per_client", f"{given} with {k} classes each need more samples of a class than "
                       f"the data has; set --data.samples_per_client {fits} (or less) or lower data.num_clients"
                       if fits >= k else f"{num_clients} clients × {k} classes need more samples of a class than the "
                       "data has; lower data.num_clients or data.classes_per_client")


def quantity_partition(labels: np.ndarray, num_clients: int, sigma: float, rng: np.random.Generator,
                       samples_per_client: Optional[int] = None) -> list[torch.Tensor]:
    n = _client_size(len(labels), num_clients, samples_per_client)
    total = n * num_clients
    weights = rng.lognormal(0.0, sigma, size=num_clients)
    exact = total * weights / weights.sum()
    sizes = np.floor(exact).astype(np.int64)
    sizes[np.argsort(-(exact - sizes), kind="stable")[: total - sizes.sum()]] += 1
    for i in np.flatnonzero(sizes == 0):  # every client holds at least one sample
        sizes[int(np.argmax(sizes))] -= 1
        sizes[i] = 1
    order = rng.permutation(len(labels))[:total]
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return [torch.as_tensor(np.sort(order[a:b]), dtype=torch.long) for a, b in zip(bounds[:-1], bounds[1:])]


def class_histogram(labels: torch.Tensor, client_indices: list[torch.Tensor], num_classes: int) -> torch.Tensor:
    """(M, C) matrix: how many samples of each class every client holds."""
    return torch.stack([torch.bincount(labels[idx], minlength=num_classes) for idx in client_indices])


def label_skew(histogram: torch.Tensor) -> float:
    """Mean total-variation distance between each client's label distribution and the global one (0 = IID)."""
    hist = histogram.double()
    client = hist / hist.sum(1, keepdim=True)
    overall = hist.sum(0) / hist.sum()
    return float(0.5 * (client - overall).abs().sum(1).mean())
