"""Networks and the data they train on. A built-in network's size argument left at None (input
features, channels, image side, classes) is filled in by ``fl-lightning fit|validate|test`` from the
data set, so ``--model.network fl_lightning.models.MLP`` runs on any data set without further
options (in Python, None is the classic default named in each model's docstring); and any network
is checked against the data before a run starts."""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn

from fl_lightning.errors import ConfigError

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


def size_network_by_data(config, datamodule_class):
    """Writes a built-in network's unset sizes into a parsed CLI config (so the run's config.yaml
    records them) and returns the data module built for it, or None when nothing was unset."""
    network = (config.get("model") or {}).get("network")
    unset = unset_sizes(network) if network is not None else []
    if not unset:
        return None
    datamodule = datamodule_class(**config["data"].as_dict())
    sizes = data_sizes(datamodule)
    for name in unset:
        network.init_args[name] = sizes.get(name)
    return datamodule


def check_network_fits(net: nn.Module, datamodule, device: torch.device) -> None:
    """One line naming the fix when val/acc cannot be computed: fl-lightning calls ``forward`` on the batch's
    first element (the inputs) and needs class logits (the network is left in the mode it was in)."""
    x = datamodule.eval_transform(datamodule.split.test_x[:2].to(device))
    was_training = net.training
    way_out = ("; or make the network a LightningModule whose validation_step logs its own metrics (then "
               "forward is never called by fl-lightning)")
    try:
        with torch.no_grad():
            out = net.eval()(x)
    except RuntimeError as err:
        reason = str(err).splitlines()[0]
        size = math.prod(x.shape[1:])
        built_in = type(net).__module__.startswith("fl_lightning.models") and "mat1 and mat2" in reason
        fix = f"; set --model.network.init_args.in_features {size}" if built_in else ""
        raise ConfigError("model.network", f"fl-lightning calls {type(net).__name__}.forward(x) on the batch's first "
                          f"element (x: {datamodule.dataset} inputs of shape {tuple(x.shape[1:])}) for val/acc and it "
                          f"failed: {reason}{fix}{way_out}") from None
    finally:
        net.train(was_training)
    if not isinstance(out, torch.Tensor) or out.shape[-1] != datamodule.num_classes:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ConfigError("model.network", f"{type(net).__name__}.forward(x) on the batch's first element returned "
                          f"{shape}, but val/acc needs class logits (batch, {datamodule.num_classes}) for "
                          f"{datamodule.dataset}; set the network's num_classes{way_out}")
