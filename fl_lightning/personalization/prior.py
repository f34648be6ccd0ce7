"""The label prior: the score of a classifier that learns nothing but each client's majority class.

Client i predicts, for every sample of its held-out share, the most frequent label of its own training
share (ties: the smallest label). Its accuracy is the held-out share's fraction of that label. Over the
clients pval/* evaluates (fl_lightning.personalization.evaluation.evaluated_clients; clients without a
held-out share are skipped, as there): the mean and the 10th percentile (numpy's linear
interpolation), the same statistics as pval/acc_mean and pval/acc_p10. A personalised method that does
not beat it has learned nothing a label count would not give.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch


def majority_accuracy(train_labels: torch.Tensor, held_labels: torch.Tensor) -> float:
    """The held-out share's fraction of the training share's most frequent label (nan: nothing held out)."""
    if len(held_labels) == 0:
        return float("nan")
    if len(train_labels) == 0:
        return 0.0
    majority = int(torch.bincount(train_labels.long()).argmax())
    return float((held_labels.long() == majority).double().mean())


def label_prior(train, held, client_ids: Sequence[int]) -> dict[str, float]:
    """``{acc_mean, acc_p10, clients}`` of the label prior over ``client_ids`` (``train``/``held``: ClientData)."""
    accs = [majority_accuracy(train.of(cid)[1], held.of(cid)[1]) for cid in client_ids]
    accs = np.asarray([a for a in accs if a == a], dtype=np.float64)
    return {"acc_mean": float(accs.mean()), "acc_p10": float(np.percentile(accs, 10)), "clients": float(len(accs))}
