"""Built-in networks sized by the data. A size argument left at None (input features, channels,
image side, classes) is filled in by ``fl-lightning fit|validate|test`` from the data set, so
``--model.network fl_lightning.models.MLP`` runs on any data set without further options; in
Python, None is the classic default named in each model's docstring."""
from __future__ import annotations

import math
from typing import Optional

SIZES = ("in_features", "in_channels", "image_size", "num_classes")


def sized(value: Optional[int], default: int) -> int:
    return default if value is None else value


def data_sizes(datamodule) -> dict[str, int]:
    """What the data gives a network: features per example, channels and side of an image, classes."""
    datamodule.setup("fit")
    shape = tuple(datamodule.eval_transform(datamodule.split.test_x[:1]).shape[1:])
    sizes = {"in_features": math.prod(shape), "num_classes": datamodule.num_classes}
    if len(shape) == 3:
        sizes.update(in_channels=shape[0], image_size=shape[-1])
    return sizes


def unset_sizes(network_config) -> list[str]:
    """The size arguments a built-in network's config (class_path/init_args) leaves at None."""
    if not str(getattr(network_config, "class_path", "")).startswith("fl_lightning.models."):
        return []
    init_args = network_config.get("init_args") or {}
    return [name for name in SIZES if name in init_args and init_args[name] is None]
