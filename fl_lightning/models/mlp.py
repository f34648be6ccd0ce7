"""Multi-layer perceptron over flattened inputs."""
from __future__ import annotations

from typing import Optional, Sequence

from torch import nn

from fl_lightning.models._registry import MODELS
from fl_lightning.models.sizing import sized


class MLP(nn.Module):
    """Args:
        in_features: inputs per example, flattened (None: from the data; in Python 64, the digits).
        num_classes: outputs (None: from the data; in Python 10).
        hidden: widths of the hidden layers (ReLU after each)."""

    def __init__(self, in_features: Optional[int] = None, num_classes: Optional[int] = None,
                 hidden: Sequence[int] = (200, 200)):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = sized(in_features, 64)
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(width, sized(num_classes, 10))

    def forward(self, x):
        return self.head(self.features(x))

    def get_classifier(self) -> nn.Module:
        return self.head


@MODELS.register("mlp")
def mlp(in_features: Optional[int] = None, num_classes: Optional[int] = None, hidden: Sequence[int] = (200, 200)) -> MLP:
    return MLP(in_features, num_classes, hidden)
