"""``MODELS``: model names to their builders, filled by ``@MODELS.register("name")`` in each model's file (as timm's
``register_model``); ``create_model(name, **kwargs)`` builds one. In configs a network is given by class path, e.g.
``network: {class_path: fl_lightning.models.LeNet5, init_args: {num_classes: 10}}``."""
from __future__ import annotations

from torch import nn

from fl_lightning.errors import ConfigError
from fl_lightning.registry import Registry

MODELS = Registry("model")


def create_model(name: str, **kwargs) -> nn.Module:
    if name not in MODELS:
        raise ConfigError("model.network", f"unknown model {name!r}; choose one of {', '.join(sorted(MODELS))}")
    return MODELS[name](**kwargs)
