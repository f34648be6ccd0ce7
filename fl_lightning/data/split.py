"""What a data-set loader returns (``DataSplit``) and the options it reads (``DataOptions``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch


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
