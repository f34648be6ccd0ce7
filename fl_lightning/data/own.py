"""Your own data: any map-style torch ``Dataset`` (or a DataLoader over one), and any
torchvision-style classification data set by class path (docs/models_and_data.md, "Your own model and data").

Labels are read once; images are stored as today — uint8 N×C×H×W with crop/flip/normalise
per minibatch on the device (normalised by the training set's own mean and std), or float
tensors as they come. torchvision data sets with ``.data``/``.targets`` and no transform are
read from those arrays directly instead of sample by sample.
"""
from __future__ import annotations

import inspect
from typing import Optional, Sequence

import numpy as np
import torch

from fl_lightning.data.image_datasets import image_split
from fl_lightning.data.images import channel_stats, to_nchw_uint8
from fl_lightning.data.split import DataOptions, DataSplit
from fl_lightning.class_paths import imported
from fl_lightning.errors import ConfigError


def _as_tensor(x) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    if hasattr(x, "mode") and hasattr(x, "size"):  # a PIL image
        from torchvision.transforms.functional import pil_to_tensor

        return pil_to_tensor(x)
    return torch.as_tensor(np.asarray(x))


def read_dataset(dataset, field: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, labels) of a map-style data set; images as uint8 N×C×H×W."""
    dataset = getattr(dataset, "dataset", dataset) if isinstance(dataset, torch.utils.data.DataLoader) else dataset
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        raise ConfigError(field, f"{type(dataset).__name__} is not a map-style Dataset (needs __len__ and "
                          "__getitem__ returning (input, label))")
    if getattr(dataset, "transform", None) is None and hasattr(dataset, "data") and hasattr(dataset, "targets"):
        data = torch.as_tensor(np.asarray(dataset.data))
        x = to_nchw_uint8(data) if data.dtype == torch.uint8 and data.ndim in (3, 4) else data
        return x, labels_of(torch.as_tensor(np.asarray(dataset.targets)), field)
    if len(dataset) == 0:
        raise ConfigError(field, "the data set is empty")
    inputs, labels = [], []
    for index in range(len(dataset)):
        item = dataset[index]
        if not isinstance(item, (tuple, list)) or len(item) < 2:
            raise ConfigError(field, f"item {index} is a {type(item).__name__}; items must be (input, label)")
        inputs.append(_as_tensor(item[0]))
        labels.append(torch.as_tensor(np.asarray(item[1])))
    x = torch.stack(inputs)
    if x.dtype == torch.uint8 and x.ndim == 3:
        x = x.unsqueeze(1)
    return x, labels_of(torch.stack(labels), field)


def labels_of(labels: torch.Tensor, field: str) -> torch.Tensor:
    """Class indices (integral labels) as int64; anything else (float or vector targets: regression) as
    float32 — never silently cast to a class. Regression data have no classes (``num_classes`` 0): the
    partition must be iid (or the data's own clients) and the network must evaluate itself
    (``fl_lightning.module_options.check_compatible``)."""
    if labels.ndim == 1 and (not labels.is_floating_point() or torch.equal(labels, labels.round())):
        return labels.long()
    if not (labels.is_floating_point() or labels.dtype in (torch.int32, torch.int64)):
        raise ConfigError(field, f"labels of dtype {labels.dtype} are neither class indices nor numeric targets")
    return labels.float()


def is_regression(labels: torch.Tensor) -> bool:
    return labels.is_floating_point()


def split_from_datasets(train_dataset, test_dataset, opts: DataOptions, num_classes: Optional[int] = None,
                        client_ids: Optional[Sequence[int]] = None) -> DataSplit:
    train_x, train_y = read_dataset(train_dataset, "train_dataset")
    test_x, test_y = read_dataset(test_dataset, "test_dataset")
    classes = getattr(train_dataset, "classes", None)
    if is_regression(train_y) or is_regression(test_y):
        train_y, test_y, num_classes = train_y.float(), test_y.float(), 0  # targets, no classes
    num_classes = num_classes if num_classes is not None else (
        len(classes) if classes else int(max(train_y.max(), test_y.max())) + 1)
    if train_x.dtype == torch.uint8 and train_x.ndim == 4:
        split = image_split(train_x, train_y, test_x, test_y, num_classes, channel_stats(train_x), opts)
    else:
        split = DataSplit(train_x.float(), train_y, test_x.float(), test_y, num_classes)
    if client_ids is not None:
        ids = torch.as_tensor(np.asarray(client_ids)).long()
        if ids.shape != train_y.shape:
            raise ConfigError("client_ids", f"needs one client id per training sample ({len(train_y)}), "
                              f"got {tuple(ids.shape)}")
        split.natural_clients = torch.unique(ids, return_inverse=True)[1]  # ids → 0..M-1
    return split


def dataset_class(path: str):
    """``torchvision.datasets.KMNIST``-style class path → the class, or a one-line error."""
    return imported(path, "data.dataset", "torchvision.datasets.KMNIST (or a built-in name)")


def load_by_class_path(path: str, opts: DataOptions, init_args: dict) -> DataSplit:
    """Instantiates the class twice — ``train=True/False`` or ``split="train"/"test"`` — with
    ``data.root``/``data.download`` where it takes them and ``data.dataset_args`` on top."""
    cls = dataset_class(path)
    params = inspect.signature(cls).parameters
    common = {key: value for key, value in (("root", opts.root), ("download", opts.download)) if key in params}
    if "train" in params:
        parts = ({"train": True}, {"train": False})
    elif "split" in params:
        parts = ({"split": "train"}, {"split": "test"})
    else:
        raise ConfigError("data.dataset", f"{path} takes neither train= nor split=; wrap it and use "
                          "FederatedDataModule.from_datasets(train_dataset=..., test_dataset=...)")
    try:
        train, test = (cls(**{**common, **init_args, **part}) for part in parts)
    except (RuntimeError, OSError, TypeError) as err:
        raise ConfigError("data.dataset", f"{path}(...) failed: {str(err).splitlines()[0]}; check data.root, "
                          "data.download and data.dataset_args") from None
    return split_from_datasets(train, test, opts)
