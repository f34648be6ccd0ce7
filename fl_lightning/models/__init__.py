"""The networks (one file per family, each registered with ``@MODELS.register``; fl_lightning.models._registry):
``create_model("lenet5", num_classes=10)``, or in configs by class path, e.g.
``network: {class_path: fl_lightning.models.LeNet5, init_args: {num_classes: 10}}``.
"""
from fl_lightning.models._registry import MODELS, create_model
from fl_lightning.models.lenet import LeNet5
from fl_lightning.models.logistic import LogisticRegression
from fl_lightning.models.mlp import MLP
from fl_lightning.models.resnet import ResNet18
from fl_lightning.models.timm_models import TimmModel
from fl_lightning.models.vgg import VGG

__all__ = ["MODELS", "create_model", "LeNet5", "MLP", "LogisticRegression", "ResNet18", "TimmModel", "VGG"]
