"""Multi-layer perceptron over flattened inputs."""
from __future__ import annotations

from typing import Sequence

from torch import nn


class MLP(nn.Module):
    def __init__(self, in_features: int = 64, num_classes: int = 10, hidden: Sequence[int] = (200, 200)):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x):
        return self.head(self.features(x))

    def get_classifier(self) -> nn.Module:
        return self.head


def mlp(in_features: int = 64, num_classes: int = 10, hidden: Sequence[int] = (200, 200)) -> MLP:
    return MLP(in_features, num_classes, hidden)
