"""Model registry (timm style): ``create_model("lenet5", num_classes=10)``.

In configs a network is given by class path, e.g.
``network: {class_path: fl_lightning.models.LeNet5, init_args: {num_classes: 10}}``.
"""
from __future__ import annotations

from typing import Callable

from torch import nn

from fl_lightning.errors import ConfigError
from fl_lightning.models.lenet import LeNet5, lenet5
from fl_lightning.models.logistic import LogisticRegression, logistic_regression
from fl_lightning.models.mlp import MLP, mlp
from fl_lightning.models.resnet import ResNet18, resnet18
from fl_lightning.models.timm_models import TimmModel
from fl_lightning.models.vgg import VGG, vgg11, vgg19

MODELS: dict[str, Callable[..., nn.Module]] = {
    "lenet5": lenet5,
    "mlp": mlp,
    "logistic_regression": logistic_regression,
    "vgg11": vgg11,
    "vgg19": vgg19,
    "resnet18": resnet18,
    "timm": TimmModel,
}


def create_model(name: str, **kwargs) -> nn.Module:
    if name not in MODELS:
        raise ConfigError("model.network", f"unknown model {name!r}; choose one of {', '.join(sorted(MODELS))}")
    return MODELS[name](**kwargs)


__all__ = ["MODELS", "create_model", "LeNet5", "MLP", "LogisticRegression", "ResNet18", "TimmModel", "VGG"]
