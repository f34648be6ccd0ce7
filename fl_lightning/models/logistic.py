"""Multinomial logistic regression: one linear layer on flattened inputs (paper Sec. 5.3).

The ℓ2 term of the paper's objective is the optimizer's weight decay (``model.weight_decay``).
"""
from __future__ import annotations

from typing import Optional

from torch import nn

from fl_lightning.models._registry import MODELS
from fl_lightning.models.sizing import sized


class LogisticRegression(nn.Module):
    """Args:
        in_features: inputs per example, flattened (None: from the data; in Python 784, MNIST).
        num_classes: outputs (None: from the data; in Python 10)."""

    def __init__(self, in_features: Optional[int] = None, num_classes: Optional[int] = None):
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear = nn.Linear(sized(in_features, 784), sized(num_classes, 10))

    def forward(self, x):
        return self.linear(self.flatten(x))

    def get_classifier(self) -> nn.Module:
        return self.linear


@MODELS.register("logistic_regression")
def logistic_regression(in_features: Optional[int] = None, num_classes: Optional[int] = None) -> LogisticRegression:
    return LogisticRegression(in_features, num_classes)
