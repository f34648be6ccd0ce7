"""LeNet-5 as used in the paper (spec, "Block divisions", LeNet-5; Table 7).

conv 3→64 k5, max-pool 2, conv 64→64 k5, max-pool 2, fc 1600→384→192→C (ReLU between).
``in_channels`` and ``image_size`` adapt it to MNIST-like inputs (fc1 input follows). ``norm="bn"``
(or ``"gn"``) adds a normalisation layer after each conv, for algorithms that need one (FedBN); the
paper's LeNet-5 has none (the default).
"""
from __future__ import annotations

from typing import Optional

from torch import nn

from fl_lightning.errors import ConfigError
from fl_lightning.models._registry import MODELS
from fl_lightning.models.sizing import sized
from fl_lightning.models.vgg import norm_layer


class LeNet5(nn.Module):
    """Args (None: from the data; in Python CIFAR-10's 10 classes, 3 channels, 32 pixels):
        num_classes: outputs.
        in_channels: image channels.
        image_size: image side in pixels (fc1's input follows it).
        norm: none (the paper's), bn (BatchNorm) or gn (GroupNorm, 2 groups) after each conv."""

    def __init__(self, num_classes: Optional[int] = None, in_channels: Optional[int] = None,
                 image_size: Optional[int] = None, norm: str = "none"):
        super().__init__()
        num_classes, in_channels, image_size = sized(num_classes, 10), sized(in_channels, 3), sized(image_size, 32)
        if norm not in ("none", "bn", "gn"):
            raise ConfigError("model.network.norm", f"unknown {norm!r}; choose none, bn or gn")
        self.conv1 = nn.Conv2d(in_channels, 64, kernel_size=5)
        self.conv2 = nn.Conv2d(64, 64, kernel_size=5)
        self.norm1, self.norm2 = norm_layer(norm, 64), norm_layer(norm, 64)  # nn.Identity for none
        self.pool = nn.MaxPool2d(2)
        self.act = nn.ReLU()
        side = ((image_size - 4) // 2 - 4) // 2
        self.fc1 = nn.Linear(64 * side * side, 384)
        self.fc2 = nn.Linear(384, 192)
        self.fc3 = nn.Linear(192, num_classes)

    def forward(self, x):
        x = self.pool(self.act(self.norm1(self.conv1(x))))
        x = self.pool(self.act(self.norm2(self.conv2(x))))
        x = x.flatten(1)
        x = self.act(self.fc1(x))
        x = self.act(self.fc2(x))
        return self.fc3(x)

    def get_classifier(self) -> nn.Module:
        return self.fc3


@MODELS.register("lenet5")
def lenet5(num_classes: Optional[int] = None, in_channels: Optional[int] = None, image_size: Optional[int] = None) -> LeNet5:
    return LeNet5(num_classes, in_channels, image_size)
