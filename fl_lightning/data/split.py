"""What a data-set loader returns (``DataSplit``), the options it reads (``DataOptions``) and the registry of
loaders by name (``DATASETS``: ``@DATASETS.register("name")`` on the loader)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from fl_lightning.registry import Registry


@dataclass
class DataSplit:
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    # Data sets that come already split among clients (Synthetic): client id per training sample.
    natural_clients: Optional[torch.Tensor] = None
    # Batched, on-device transforms of stored samples (images are stored as uint8).
    train_transform: Optional[Callable[[torch.Tensor], torch.Tensor]] = None
    eval_transform: Optional[Callable[[torch.Tensor], torch.Tensor]] = None
    # Held out of the training data for validation (data.val_fraction); None: validate on the test set.
    val_x: Optional[torch.Tensor] = None
    val_y: Optional[torch.Tensor] = None

    def hold_out(self, fraction: float, rng) -> None:
        """Moves a random ``fraction`` of the training samples into the validation set."""
        count = int(round(fraction * len(self.train_y)))
        if count == 0 or self.val_x is not None:
            return
        order = torch.as_tensor(rng.permutation(len(self.train_y)))
        val, train = order[:count].sort().values, order[count:].sort().values
        self.val_x, self.val_y = self.train_x[val], self.train_y[val]
        self.train_x, self.train_y = self.train_x[train], self.train_y[train]
        if self.natural_clients is not None:
            self.natural_clients = self.natural_clients[train]


@dataclass
class DataOptions:
    root: str = "data"
    download: bool = False
    num_clients: int = 20
    samples_per_client: Optional[int] = None
    synthetic_alpha: float = 1.0
    synthetic_beta: float = 1.0
    image_size: Optional[int] = None
    augment: bool = True
    cache_dir: Optional[str] = None
    emnist_split: str = "byclass"


DATASETS = Registry("data set")  # --data.dataset NAME → its loader (DataOptions → DataSplit), by decorator
