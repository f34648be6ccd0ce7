"""Seeded uint8 images on which a float32 per-channel mean taken at 1 and at 2 intra-op threads differs in the last
bit (one channel) (tests of the thread-layout guarantee, docs/scale_out.md), and the same images as a torchvision data set on disk."""
import os

import numpy as np
import torch

SEEDS = {(60_000, 1, 28, 28): 1, (50_000, 3, 32, 32): 1}  # 1 × 28 × 28: seed 1 differs at 2 and 4 threads (seed 0
# does not); three channels are reduced one output per thread, so no seed splits them


def images_where_thread_count_changes_the_float32_mean(shape: tuple) -> torch.Tensor:
    generator = torch.Generator().manual_seed(SEEDS[shape])
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator)


def write_fashion_mnist(root: str, train: torch.Tensor, test: torch.Tensor) -> None:
    """``root/FashionMNIST/raw``: the four idx files ``torchvision.datasets.FashionMNIST(root)`` reads, labels seeded."""
    raw = os.path.join(root, "FashionMNIST", "raw")
    os.makedirs(raw, exist_ok=True)
    labels = np.random.default_rng(0)
    for part, images in (("train", train), ("t10k", test)):
        n, side = images.shape[0], images.shape[-1]
        with open(os.path.join(raw, f"{part}-images-idx3-ubyte"), "wb") as f:
            f.write(np.array([0x803, n, side, side], dtype=">i4").tobytes() + images.reshape(n, side, side).numpy().tobytes())
        with open(os.path.join(raw, f"{part}-labels-idx1-ubyte"), "wb") as f:
            f.write(np.array([0x801, n], dtype=">i4").tobytes() + labels.integers(0, 10, n, dtype=np.uint8).tobytes())
