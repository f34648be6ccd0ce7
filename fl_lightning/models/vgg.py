"""VGG-11 / VGG-19 for 32×32 inputs (paper Tables 8 and 10).

3×3 convolutions without bias (the tables count weights only), each followed by a
normalisation and ReLU, max-pool after each stage, then fc1 → fc2 → classifier.
Module names (``convs.i``, ``fc1``, ``fc2``, ``classifier``) are what the paper's block
presets in ``fl_lightning.federation.blocks`` refer to. The paper's FC widths differ between its
tables; ``hidden`` (default 512) sets them.
"""
from __future__ import annotations

from typing import Optional

from torch import nn

from fl_lightning.models._registry import MODELS
from fl_lightning.models.sizing import sized

CONFIGS = {
    11: [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    19: [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"],
}


def norm_layer(kind: str, channels: int) -> nn.Module:
    if kind == "bn":
        return nn.BatchNorm2d(channels)
    if kind == "gn":
        return nn.GroupNorm(2, channels)
    return nn.Identity()


class VGG(nn.Module):
    """Args:
        depth: 11 or 19.
        num_classes: outputs (None: from the data; in Python 10).
        in_channels: image channels (None: from the data; in Python 3).
        norm: bn (BatchNorm), gn (GroupNorm, 2 groups) or none.
        hidden: width of the two hidden fully connected layers."""

    def __init__(self, depth: int = 11, num_classes: Optional[int] = None, in_channels: Optional[int] = None,
                 norm: str = "bn", hidden: int = 512):
        super().__init__()
        num_classes, in_channels = sized(num_classes, 10), sized(in_channels, 3)
        convs, pool_after, width = [], [], in_channels
        for item in CONFIGS[depth]:
            if item == "M":
                pool_after[-1] = True
                continue
            convs.append(nn.Sequential(nn.Conv2d(width, item, 3, padding=1, bias=False), norm_layer(norm, item),
                                       nn.ReLU(inplace=True)))
            pool_after.append(False)
            width = item
        self.convs = nn.ModuleList(convs)
        self.pool_after = pool_after
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.classifier = nn.Linear(hidden, num_classes)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        for conv, pool in zip(self.convs, self.pool_after):
            x = conv(x)
            if pool:
                x = self.pool(x)
        x = x.flatten(1) if x.shape[-1] == 1 else nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.classifier(self.act(self.fc2(self.act(self.fc1(x)))))

    def get_classifier(self) -> nn.Module:
        return self.classifier


@MODELS.register("vgg11")
def vgg11(num_classes: Optional[int] = None, in_channels: Optional[int] = None, norm: str = "bn", hidden: int = 512) -> VGG:
    return VGG(11, num_classes, in_channels, norm, hidden)


@MODELS.register("vgg19")
def vgg19(num_classes: Optional[int] = None, in_channels: Optional[int] = None, norm: str = "bn", hidden: int = 512) -> VGG:
    return VGG(19, num_classes, in_channels, norm, hidden)
