"""Data sets as tensors: a registry of loaders, each returning a ``DataSplit``.

Loaders read data through the ordinary library code paths (scikit-learn's embedded
digits, ``torchvision.datasets.MNIST``) and return normalised float tensors.
"""
from __future__ import annotations

import os
from typing import Callable

import numpy as np
import torch

from fl_lightning.data.image_datasets import check_image_folder, check_tiny_imagenet  # and registers its loaders
from fl_lightning.data.own import dataset_class
from fl_lightning.data.split import DATASETS, DataOptions, DataSplit
from fl_lightning.errors import ConfigError


@DATASETS.register("digits")
def load_digits(opts: DataOptions) -> DataSplit:
    """scikit-learn's 8×8 digits (1,797 images, embedded: no download); fixed 80/20 split."""
    from sklearn.datasets import load_digits as sk_digits

    bunch = sk_digits()
    x = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(bunch.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    cut = int(0.8 * len(y))
    train, test = order[:cut], order[cut:]
    return DataSplit(x[train], y[train], x[test], y[test], 10)


MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def check_mnist(opts: DataOptions) -> None:
    raw = os.path.join(opts.root, "MNIST", "raw")
    missing = [f for f in MNIST_FILES if not (os.path.exists(os.path.join(raw, f)) or os.path.exists(os.path.join(raw, f + ".gz")))]
    if missing and not opts.download:
        raise ConfigError(
            "data.root",
            f"MNIST not found in {os.path.abspath(raw)} (missing {missing[0]}); put the four raw MNIST files there "
            "or set data.download=true to fetch them",
        )


@DATASETS.register("mnist")
def load_mnist(opts: DataOptions) -> DataSplit:
    """MNIST through ``torchvision.datasets.MNIST`` (downloads when ``data.download`` is true)."""
    from torchvision.datasets import MNIST

    check_mnist(opts)
    try:
        train = MNIST(opts.root, train=True, download=opts.download)
        test = MNIST(opts.root, train=False, download=opts.download)
    except (RuntimeError, OSError) as err:
        raise ConfigError("data.download", f"could not get MNIST into {opts.root}: {err}") from None

    def prep(images: torch.Tensor) -> torch.Tensor:
        return ((images.float() / 255.0 - 0.1307) / 0.3081).unsqueeze(1)

    return DataSplit(prep(train.data), train.targets.long(), prep(test.data), test.targets.long(), 10)


@DATASETS.register("synthetic")
def load_synthetic(opts: DataOptions) -> DataSplit:
    """Synthetic(α, β) of the FedProx paper (Li et al. 2020), 60 features, 10 classes.

    Client k: u_k ~ N(0, α), W_k, b_k ~ N(u_k, 1); B_k ~ N(0, β), v_k ~ N(B_k, 1);
    x ~ N(v_k, Σ) with Σ_jj = j^-1.2; y = argmax(W_k x + b_k). Each client holds
    ``samples_per_client`` (default 100) training samples plus 20% more for the global test set.
    Generated from a fixed seed so every run sees the same data.
    """
    rng = np.random.default_rng(12345)
    dim, classes = 60, 10
    n_train = opts.samples_per_client or 100
    n_test = max(1, n_train // 5)
    cov_diag = np.arange(1, dim + 1) ** -1.2
    xs_train, ys_train, owner, xs_test, ys_test = [], [], [], [], []
    for k in range(opts.num_clients):
        u = rng.normal(0, np.sqrt(opts.synthetic_alpha))
        w = rng.normal(u, 1, (classes, dim))
        b = rng.normal(u, 1, classes)
        v = rng.normal(rng.normal(0, np.sqrt(opts.synthetic_beta)), 1, dim)
        x = rng.normal(v, np.sqrt(cov_diag), (n_train + n_test, dim))
        y = np.argmax(x @ w.T + b, axis=1)
        xs_train.append(x[:n_train]), ys_train.append(y[:n_train]), owner.append(np.full(n_train, k))
        xs_test.append(x[n_train:]), ys_test.append(y[n_train:])
    to_x = lambda parts: torch.tensor(np.concatenate(parts), dtype=torch.float32)  # noqa: E731
    to_y = lambda parts: torch.tensor(np.concatenate(parts), dtype=torch.long)  # noqa: E731
    return DataSplit(to_x(xs_train), to_y(ys_train), to_x(xs_test), to_y(ys_test), classes,
                     natural_clients=to_y(owner))


CHECKS: dict[str, Callable[[DataOptions], None]] = {"mnist": check_mnist, "imagefolder": check_image_folder,
                                                    "tinyimagenet": check_tiny_imagenet}


def check_name(name: str) -> None:
    """A built-in name, or the class path of a torchvision-style data set (imported to check it)."""
    if "." in name:
        dataset_class(name)
    elif name not in DATASETS:
        raise ConfigError("data.dataset", f"unknown data set {name!r}; choose one of {', '.join(sorted(DATASETS))}, "
                          "or give a class path such as torchvision.datasets.KMNIST")


def check_dataset(name: str, opts: DataOptions) -> None:
    """Fail fast, before any run directory exists, if the data set is unknown or missing."""
    check_name(name)
    CHECKS.get(name, lambda _: None)(opts)
