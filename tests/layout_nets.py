"""A small residual network for the thread-layout tests: a conv stem, one ResNet-18 basic
block (BatchNorm, a strided 1×1 shortcut) and a linear head — the kernels of the paper's ResNet-18 at a
size CI can train."""
from typing import Optional

from torch import nn

from fl_lightning.models.resnet import BasicBlock
from fl_lightning.models.sizing import sized


class ResidualBlockNet(nn.Module):
    def __init__(self, num_classes: Optional[int] = None, in_channels: Optional[int] = None):
        super().__init__()
        num_classes, in_channels = sized(num_classes, 10), sized(in_channels, 3)
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.block = BasicBlock(16, 32, 2, "bn")
        self.head = nn.Linear(32, num_classes)

    def forward(self, x):
        return self.head(nn.functional.adaptive_avg_pool2d(self.block(self.stem(x)), 1).flatten(1))
