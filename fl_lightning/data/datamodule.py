"""``FederatedDataModule``: one data set split among M clients (spec, "Experiment settings").

Client data is kept as tensors — all clients' samples in one tensor ordered by client,
plus offsets — and moved once to the training device (``ClientData.to``); local
training slices it directly, with no DataLoader per client per round.
The partition is part of ``state_dict()``, so a checkpoint restores it exactly.
"""
from __future__ import annotations

import csv
import hashlib
import os
from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence

import numpy as np
import pytorch_lightning as pl
import torch

from fl_lightning.data.images import ImageTransform
from fl_lightning.data.datasets import DATASETS, check_dataset, check_name
from fl_lightning.data.own import load_by_class_path, split_from_datasets
from fl_lightning.data.split import DataOptions, DataSplit
from fl_lightning.data.partition import (class_histogram, dirichlet_partition, iid_partition, quantity_partition,
                                        shards_partition)
from fl_lightning.errors import ConfigError, check_unchanged
from fl_lightning.federation.seeding import run_seed
from fl_lightning.personalization.split import check_fraction, hold_out_per_client


def check_partition_options(partition: str, classes_per_client, quantity_sigma) -> None:
    if classes_per_client is not None and (partition != "shards" or classes_per_client < 1):
        raise ConfigError("data.classes_per_client", f"got {classes_per_client}: it needs data.partition shards and "
                          "k ≥ 1; set both, or leave it unset")
    if quantity_sigma is not None and (partition != "quantity" or not quantity_sigma > 0):
        raise ConfigError("data.quantity_sigma", f"got {quantity_sigma}: it needs data.partition quantity and "
                          "σ > 0; set both, or leave it unset")

PARTITIONS = ("dirichlet", "iid", "shards", "quantity")


@dataclass
class ClientData:
    """Every client's samples in one tensor, ordered by client: client i is rows offsets[i]:offsets[i+1]."""

    x: torch.Tensor
    y: torch.Tensor
    offsets: list[int]
    transform: Optional[Callable[..., torch.Tensor]] = None  # (minibatch, generator) → inputs, on the device

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def num_samples(self, client: int) -> int:
        return self.offsets[client + 1] - self.offsets[client]

    def of(self, client: int) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = self.offsets[client], self.offsets[client + 1]
        return self.x[a:b], self.y[a:b]

    def pooled(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every client's samples together (centralised SGD)."""
        return self.x, self.y

    def prepare(self, x: torch.Tensor, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """A stored minibatch as the model sees it (e.g. uint8 images → floats augmented with draws
        from ``generator``)."""
        return self.transform(x, generator) if self.transform is not None else x

    def to(self, device) -> "ClientData":
        return ClientData(self.x.to(device), self.y.to(device), self.offsets, self.transform)


class TensorBatches:
    """A loader over in-memory tensors: consecutive slices, no per-sample Python work."""

    def __init__(self, *tensors: torch.Tensor, batch_size: int, rank: int = 0, world_size: int = 1):
        # several processes: rank r takes the r-th of K runs of consecutive batches, the batches one process
        # makes (same contents, so the same per-batch sums), none twice
        batches = -(-len(tensors[0]) // batch_size)
        first, stop = batches * rank // world_size * batch_size, batches * (rank + 1) // world_size * batch_size
        self.tensors = tuple(t[first:stop] for t in tensors)
        self.batch_size = batch_size
        # a rank without a batch yields one empty batch, so that it runs the evaluation hooks (and their
        # collectives) with the others; the module skips it
        self.stand_in = world_size > 1 and first == stop

    def __len__(self) -> int:
        return max(-(-len(self.tensors[0]) // self.batch_size), int(self.stand_in))

    def __iter__(self):
        if self.stand_in:
            yield self.tensors
        for start in range(0, len(self.tensors[0]), self.batch_size):
            yield tuple(t[start:start + self.batch_size] for t in self.tensors)


class FederatedDataModule(pl.LightningDataModule):
    """One data set split among M clients, a validation set and the global test set.

    Args:
        dataset: ``digits`` (embedded), ``mnist``, ``emnist``, ``cifar10``, ``cifar100`` (torchvision),
            ``tinyimagenet``, ``imagefolder`` (root/{train,test}/<class>/…), ``synthetic``
            (FedProx Synthetic(α,β)), or the class path of any torchvision-style classification data
            set (e.g. ``torchvision.datasets.KMNIST``; made with train=True/False or split=train/test).
        dataset_args: extra init args for a data set given by class path (root/download come from
            data.root/data.download).
        num_clients: M, the number of clients.
        partition: ``dirichlet`` (label skew), ``iid``, ``shards`` (k classes per client, McMahan et al.) or
            ``quantity`` (IID labels, log-normal sizes) (fl_lightning.data.partition). Synthetic data is split by
            its generator.
        dirichlet_rho: ρ > 0, Dirichlet concentration (paper: 0.6 and 0.1; smaller = more skew).
        samples_per_client: samples held by every client (paper: 500); default ⌊N/M⌋.
        root: where data sets live (torchvision layout, e.g. ``root/MNIST/raw``).
        download: let torchvision download missing data.
        synthetic_alpha: α of Synthetic(α, β): how much the clients' labelling models differ.
        synthetic_beta: β of Synthetic(α, β): how much the clients' inputs differ.
        image_size: resize images to this side (e.g. 224 for ViT-Base); default: as stored.
        augment: random crop (padding 4) and horizontal flip of training images.
        cache_dir: where decoded image folders are cached as uint8 tensors (None: no cache).
        emnist_split: ``byclass`` (62 classes) or ``balanced`` (47).
        eval_batch_size: batch size of the global test set.
        val_fraction: share of the training data held out (seeded, before the partition) for
            validation (val/*); 0 validates on the test set, the paper's protocol (every experiment
            config sets it). test/* is always the test set (logged at the end of fit).
        classes_per_client: k, with partition shards: each client gets k label-sorted shards (default 2).
        quantity_sigma: σ > 0, with partition quantity: client sizes ∝ LogNormal(0, σ²) (default 1.0).
        personal_fraction: share of every client's own data held out (seeded) for per-client evaluation
            (pval/*, fl_lightning.personalization); None: no per-client evaluation.
        eval_samples: evaluate val/* and test/* on this many images of each (the same seeded subsample every
            round and in every run; the summary line says so); None: all of them.
    """

    def __init__(self, dataset: str = "digits", num_clients: int = 20, partition: str = "dirichlet",
                 dirichlet_rho: float = 0.5, samples_per_client: Optional[int] = None, root: str = "data",
                 download: bool = False, synthetic_alpha: float = 1.0, synthetic_beta: float = 1.0,
                 image_size: Optional[int] = None, augment: bool = True,
                 cache_dir: Optional[str] = "~/.cache/fl-lightning", emnist_split: str = "byclass",
                 eval_batch_size: int = 1000, dataset_args: Optional[dict] = None, val_fraction: float = 0.1,
                 classes_per_client: Optional[int] = None, quantity_sigma: Optional[float] = None,
                 personal_fraction: Optional[float] = None, eval_samples: Optional[int] = None):
        super().__init__()
        if eval_samples is not None and eval_samples < 1:
            raise ConfigError("data.eval_samples", f"must be ≥ 1 (images evaluated per split), got {eval_samples}; "
                              "leave it unset to evaluate on all")
        self.eval_samples = eval_samples
        check_partition_options(partition, classes_per_client, quantity_sigma)
        check_fraction(personal_fraction)
        self.classes_per_client, self.quantity_sigma = classes_per_client, quantity_sigma
        self.personal_fraction = personal_fraction
        self.personal: Optional[ClientData] = None  # every client's held-out share (personal_fraction)
        self.loader_batch_size: Optional[int] = None  # the batch size of the user's DataLoader, if data came in one
        check_name(dataset)
        if num_clients < 1:
            raise ConfigError("data.num_clients", f"must be ≥ 1, got {num_clients}")
        if partition not in PARTITIONS:
            raise ConfigError("data.partition", f"unknown partition {partition!r}; choose one of {', '.join(PARTITIONS)}")
        if not dirichlet_rho > 0:
            raise ConfigError("data.dirichlet_rho", f"must be > 0 (e.g. 0.6 or 0.1), got {dirichlet_rho}")
        if samples_per_client is not None and samples_per_client < 1:
            raise ConfigError("data.samples_per_client", f"must be ≥ 1, got {samples_per_client}")
        self.dataset = dataset
        self.num_clients = num_clients
        self.partition = partition
        self.dirichlet_rho = dirichlet_rho
        self.eval_batch_size = eval_batch_size
        self.dataset_args = dict(dataset_args or {})
        if not 0.0 <= val_fraction < 1.0:
            raise ConfigError("data.val_fraction", f"must be in [0, 1), got {val_fraction}; 0 validates on the test set")
        self.val_fraction = val_fraction
        cache_dir = os.path.expanduser(cache_dir) if cache_dir else None
        self.options = DataOptions(root, download, num_clients, samples_per_client, synthetic_alpha, synthetic_beta,
                                   image_size, augment, cache_dir, emnist_split)
        self.split: Optional[DataSplit] = None
        self.client_indices: Optional[list[torch.Tensor]] = None
        self.clients: Optional[ClientData] = None
        self._fingerprint: Optional[str] = None
        self._restored_from: Optional[str] = None  # the fingerprint of the checkpoint whose partition is set

    @classmethod
    def from_tensors(cls, split: DataSplit, client_indices: Optional[list[torch.Tensor]] = None,
                     **kwargs) -> "FederatedDataModule":
        """Federate tensors you already have; ``client_indices`` fixes the partition (else ``partition``);
        with fixed indices no validation set is held out (val/* is then the test set)."""
        num_clients = len(client_indices) if client_indices is not None else kwargs.pop("num_clients", 20)
        datamodule = cls(num_clients=num_clients, **kwargs)
        datamodule.dataset = "tensors"
        datamodule.split = split
        if client_indices is not None:  # they address the given training tensors: nothing is held out
            datamodule.val_fraction = 0.0
            datamodule._set_partition(client_indices)
        return datamodule

    @classmethod
    def from_datasets(cls, train_dataset=None, test_dataset=None, *, client_ids: Optional[Sequence[int]] = None,
                      num_classes: Optional[int] = None, **kwargs) -> "FederatedDataModule":
        """Federate any map-style torch Datasets (or DataLoaders over them) of (input, label) items.

        Labels are read once and inputs stored as tensors (images as uint8, augmented and
        normalised per minibatch). ``client_ids`` (one per training sample) gives a natural
        partition (e.g. writers, users); otherwise ``partition``/``dirichlet_rho`` split the data.
        Other keyword arguments are the constructor's (num_clients, partition, augment, ...).
        """
        if train_dataset is None or test_dataset is None:
            raise ConfigError("test_dataset" if train_dataset is not None else "train_dataset",
                              "from_datasets needs both train_dataset and test_dataset (the global test set)")
        if client_ids is not None:
            kwargs["num_clients"] = len(set(np.asarray(client_ids).tolist()))
        datamodule = cls(**kwargs)
        split = split_from_datasets(train_dataset, test_dataset, datamodule.options, num_classes, client_ids)
        source = train_dataset
        while hasattr(source, "dataset"):  # a DataLoader, Subsets: named by the data set they draw from
            source = source.dataset
        datamodule.dataset = type(source).__name__
        datamodule.loader_batch_size = getattr(train_dataset, "batch_size", None)  # model.batch_size rules
        datamodule.split = split
        return datamodule

    @classmethod
    def from_datamodule(cls, datamodule, **kwargs) -> "FederatedDataModule":
        """Federate a user's ``LightningDataModule`` (``pytorch_lightning`` or ``lightning.pytorch``): its
        ``train_dataloader()`` data is split among clients, its ``test_dataloader()`` (else
        ``val_dataloader()``) is the global test set. Keyword arguments as ``from_datasets``."""
        from fl_lightning.federation.namespaces import bases

        if not isinstance(datamodule, bases("LightningDataModule")):
            raise ConfigError("datamodule", f"{type(datamodule).__name__} is not a LightningDataModule (of "
                              "pytorch_lightning or lightning.pytorch); use from_datasets for torch Datasets")
        datamodule.prepare_data()
        datamodule.setup("fit")
        train = datamodule.train_dataloader()
        base = next(b for b in bases("LightningDataModule") if isinstance(datamodule, b))
        if type(datamodule).test_dataloader is not base.test_dataloader:  # it defines its own test set
            datamodule.setup("test")
            test = datamodule.test_dataloader()
        else:
            test = datamodule.val_dataloader()
        return cls.from_datasets(train, test, **kwargs)

    # -- Lightning hooks --------------------------------------------------------------
    def check(self) -> None:
        """Fail fast if the data set is missing (called by the CLI before a run directory exists)."""
        if self.split is None:
            check_dataset(self.dataset, self.options)

    def prepare_data(self) -> None:
        self.check()

    def setup(self, stage: Optional[str] = None) -> None:
        if self.split is None:
            loader = DATASETS.get(self.dataset)
            self.split = loader(self.options) if loader else load_by_class_path(self.dataset, self.options,
                                                                                self.dataset_args)
        if self.client_indices is None:
            if self.val_fraction > 0:
                self.split.hold_out(self.val_fraction, np.random.default_rng([run_seed(), 0x7A1]))
            self._set_partition(self._make_partition())

    def train_dataloader(self):
        # One item per epoch: the FederatedLoop runs the whole round inside training_step.
        return TensorBatches(torch.zeros(1), batch_size=1)

    def _shard(self) -> dict:
        """Under DDP each rank evaluates its share of the batches; the module sums them over ranks."""
        trainer = self.trainer
        return {"rank": trainer.global_rank, "world_size": trainer.world_size} if trainer is not None else {}

    def val_dataloader(self):
        self.setup()
        if self.split.val_x is not None:
            return TensorBatches(*self.evaluated("val"), batch_size=self.eval_batch_size, **self._shard())
        return self.test_dataloader()

    def test_dataloader(self):
        self.setup()
        return TensorBatches(*self.evaluated("test"), batch_size=self.eval_batch_size, **self._shard())

    def evaluated(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The images val/* or test/* is computed on: all, or data.eval_samples of them (a fixed seeded draw, in order)."""
        x, y = getattr(self.split, f"{split}_x"), getattr(self.split, f"{split}_y")
        if self.eval_samples is None or self.eval_samples >= len(y):
            return x, y
        kept = torch.randperm(len(y), generator=torch.Generator().manual_seed(0xE7A1))[:self.eval_samples].sort().values
        return x[kept], y[kept]

    def eval_note(self) -> str:
        """``, val/test on 500 of 4500 / 500 of 10000 images`` for the summary line when data.eval_samples cuts them."""
        if self.eval_samples is None or self.split is None:
            return ""
        sizes = [len(y) for y in (self.split.val_y, self.split.test_y) if y is not None]
        shown = " / ".join(f"{min(self.eval_samples, n)} of {n}" for n in sizes)
        return f", {'val/test' if len(sizes) == 2 else 'test'} on {shown} images (data.eval_samples)"

    def settings(self) -> dict:
        """The options that decide what the clients hold (checked when a run resumes)."""
        opts = self.options
        return {"dataset": self.dataset, "num_clients": self.num_clients, "partition": self.partition,
                "dirichlet_rho": self.dirichlet_rho, "samples_per_client": opts.samples_per_client,
                "val_fraction": self.val_fraction, "synthetic_alpha": opts.synthetic_alpha,
                "synthetic_beta": opts.synthetic_beta, "image_size": opts.image_size, "augment": opts.augment,
                "emnist_split": opts.emnist_split, "dataset_args": self.dataset_args or None,
                **{key: value for key, value in (("classes_per_client", self.classes_per_client),
                   ("quantity_sigma", self.quantity_sigma), ("personal_fraction", self.personal_fraction),
                   ("eval_samples", self.eval_samples))
                   if value is not None}}

    def state_dict(self) -> dict:
        return {"client_indices": self.client_indices, "settings": self.settings(), "fingerprint": self.fingerprint()}

    def load_state_dict(self, state_dict: dict) -> None:
        """A run resumes only on the clients it started with: same settings, and — whatever the
        settings say — the same samples and labels in every client (the fingerprint)."""
        for key, saved in state_dict.get("settings", {}).items():
            check_unchanged(f"data.{key}", self.settings().get(key), saved)
        saved = state_dict.get("fingerprint")
        if saved is not None and saved == self._restored_from:
            return  # already checked and set (the CLI does it before any run folder exists; Lightning again)
        self.setup()
        if saved is not None and saved != self.fingerprint():
            raise ConfigError("data", f"the clients' data differ from the checkpoint's (fingerprint {self.fingerprint()}"
                              f" now, {saved} in the checkpoint): the data files or the partition changed; resume "
                              "with the data the run started with, or start a new run without ckpt_path")
        self._set_partition(state_dict["client_indices"])
        self._restored_from = saved

    def fingerprint(self) -> str:
        """A digest of every client's samples and labels, in order (computed once per partition)."""
        if self._fingerprint is None:
            digest = hashlib.blake2b(digest_size=12)
            clients = self.clients
            digest.update(np.asarray(clients.offsets, dtype=np.int64).tobytes())
            for tensor in (clients.y, clients.x):
                digest.update(str((tensor.dtype, tuple(tensor.shape))).encode())
                digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
            self._fingerprint = digest.hexdigest()
        return self._fingerprint

    # -- partition --------------------------------------------------------------------
    @property
    def num_classes(self) -> int:
        self.setup()
        return self.split.num_classes

    def _make_partition(self) -> list[torch.Tensor]:
        split = self.split
        if split.natural_clients is not None:
            return [torch.nonzero(split.natural_clients == k).flatten() for k in range(self.num_clients)]
        rng = np.random.default_rng([run_seed(), 0xDA7A])
        labels = split.train_y.numpy()
        if split.num_classes == 0 and self.partition != "iid":
            raise ConfigError("data.partition", f"{self.partition} splits by class, and the labels are regression "
                              "targets (floats, no classes): use data.partition iid, or give client_ids")
        if self.partition == "iid":
            return iid_partition(labels, self.num_clients, rng, self.options.samples_per_client)
        if self.partition == "shards":
            return shards_partition(labels, self.num_clients, self.classes_per_client or 2, rng,
                                    self.options.samples_per_client)
        if self.partition == "quantity":
            return quantity_partition(labels, self.num_clients, self.quantity_sigma or 1.0, rng,
                                      self.options.samples_per_client)
        return dirichlet_partition(labels, self.num_clients, self.dirichlet_rho, rng, self.options.samples_per_client)

    def _set_partition(self, client_indices: list[torch.Tensor]) -> None:
        self.client_indices = [idx.cpu() for idx in client_indices]
        self._fingerprint = None
        training = self.client_indices
        if self.personal_fraction is not None:  # each client's held-out share: disjoint, seeded, re-made on resume
            training, held = hold_out_per_client(self.client_indices, self.personal_fraction)
            self.personal = self._client_data(held)
        self.clients = self._client_data(training)

    def _client_data(self, client_indices: list[torch.Tensor]) -> ClientData:
        """The clients' samples in client order: a view of the training inputs when the clients hold one run of
        consecutive rows in order (no second copy of the data set), else a gathered copy."""
        order = torch.cat(client_indices)
        offsets = np.concatenate([[0], np.cumsum([len(i) for i in client_indices])]).tolist()
        x = self.split.train_x
        first = int(order[0]) if len(order) else 0
        consecutive = len(order) > 0 and torch.equal(order, torch.arange(first, first + len(order), dtype=order.dtype))
        x = x[first:first + len(order)] if consecutive else x[order]
        return ClientData(x, self.split.train_y[order], offsets, self.split.train_transform)

    def histogram(self) -> torch.Tensor:
        """(M, C) per-client class counts (C = 0 for regression targets)."""
        if self.split.num_classes == 0:
            return torch.zeros(len(self.client_indices), 0, dtype=torch.long)
        return class_histogram(self.split.train_y, self.client_indices, self.split.num_classes)

    def save_partition(self, path: str) -> None:
        """Write the per-client class histogram as CSV (one row per client); with data.personal_fraction also each
        client's held-out share (``held_out``, ``held_class_c``), so that the label prior can be re-made from it."""
        hist = self.histogram()
        classes = hist.shape[1]
        held = None if self.personal is None else [
            [len(self.personal.of(i)[1])] + torch.bincount(self.personal.of(i)[1].long(), minlength=classes).tolist()
            for i in range(len(self.client_indices))]
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["client", "samples"] + [f"class_{c}" for c in range(classes)]
                            + ([] if held is None else ["held_out"] + [f"held_class_{c}" for c in range(classes)]))
            for i, row in enumerate(hist.tolist()):
                writer.writerow([i, len(self.client_indices[i])] + row + ([] if held is None else held[i][:1 + classes]))

    def use_input_config(self, mean: tuple, std: tuple, interpolation: str, image_size: int) -> None:
        """Feed images as a pretrained model expects them (timm's data config): its mean/std and
        resize interpolation, and its input side unless data.image_size sets one."""
        split = self.split
        if not isinstance(split.train_transform, ImageTransform) or split.train_x.shape[1] != len(mean):
            return
        side = self.options.image_size or image_size
        split.train_transform, split.eval_transform = (
            replace(transform, mean=mean, std=std, interpolation=interpolation, image_size=side)
            for transform in (split.train_transform, split.eval_transform))

    def eval_transform(self, x: torch.Tensor) -> torch.Tensor:
        transform = self.split.eval_transform if self.split is not None else None
        return transform(x) if transform is not None else x
