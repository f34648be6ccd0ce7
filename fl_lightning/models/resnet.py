"""ResNet-18, CIFAR variant (3×3 stem, no max-pool), paper Table 9.

``norm="bn"`` (BatchNorm; its running statistics travel with their block) or ``"gn"``
(GroupNorm, 2 groups), as the authors' code offers both. Module names (``conv1``,
``bn1``, ``layer1``…``layer4``, ``linear``) are what the paper's block preset refers to.
"""
from __future__ import annotations

from typing import Optional

from torch import nn

from fl_lightning.models._registry import MODELS
from fl_lightning.models.sizing import sized
from fl_lightning.models.vgg import norm_layer


class BasicBlock(nn.Module):
    def __init__(self, in_planes: int, planes: int, stride: int, norm: str):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = norm_layer(norm, planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = norm_layer(norm, planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride, bias=False), norm_layer(norm, planes))
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.act(self.bn1(self.conv1(x)))
        return self.act(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet18(nn.Module):
    """Args:
        num_classes: outputs (None: from the data; in Python 10).
        in_channels: image channels (None: from the data; in Python 3).
        norm: bn (BatchNorm), gn (GroupNorm, 2 groups) or none."""

    def __init__(self, num_classes: Optional[int] = None, in_channels: Optional[int] = None, norm: str = "bn"):
        super().__init__()
        num_classes, in_channels = sized(num_classes, 10), sized(in_channels, 3)
        self.conv1 = nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)
        self.bn1 = norm_layer(norm, 64)
        self.act = nn.ReLU(inplace=True)
        widths, planes = [64, 128, 256, 512], 64
        for i, width in enumerate(widths, start=1):
            stride = 1 if i == 1 else 2
            setattr(self, f"layer{i}", nn.Sequential(BasicBlock(planes, width, stride, norm),
                                                     BasicBlock(width, width, 1, norm)))
            planes = width
        self.linear = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.act(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.linear(nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))

    def get_classifier(self) -> nn.Module:
        return self.linear


@MODELS.register("resnet18")
def resnet18(num_classes: Optional[int] = None, in_channels: Optional[int] = None, norm: str = "bn") -> ResNet18:
    return ResNet18(num_classes, in_channels, norm)
