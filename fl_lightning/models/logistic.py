"""Multinomial logistic regression: one linear layer on flattened inputs (paper Sec. 5.3).

The ℓ2 term of the paper's objective is the optimizer's weight decay (``model.weight_decay``).
"""
from __future__ import annotations

from torch import nn


class LogisticRegression(nn.Module):
    def __init__(self, in_features: int = 784, num_classes: int = 10):
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear = nn.Linear(in_features, num_classes)

    def forward(self, x):
        return self.linear(self.flatten(x))

    def get_classifier(self) -> nn.Module:
        return self.linear


def logistic_regression(in_features: int = 784, num_classes: int = 10) -> LogisticRegression:
    return LogisticRegression(in_features, num_classes)
