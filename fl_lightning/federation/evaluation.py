"""Evaluation of the global model: accuracy and loss on a data set, the global training objective."""
from __future__ import annotations

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn

from fl_lightning.federation.distributed import Collective


def batch_sums(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """[Σ loss, # correct, # samples] of ``net`` on one (transformed) batch."""
    logits = net(x).float()
    loss = F.cross_entropy(logits, y, reduction="sum").detach()
    return torch.stack([loss, (logits.argmax(-1) == y).sum().float(), torch.tensor(float(len(y)), device=x.device)])


@torch.no_grad()
def test_metrics(net: nn.Module, trainer: pl.Trainer) -> dict[str, float]:
    """test/acc and test/loss of the global model on the test set (the number papers report)."""
    datamodule, was_training = trainer.datamodule, net.training
    device = next(net.parameters()).device
    net.eval()
    sums = []
    for x, y in datamodule.test_dataloader():
        x, y = x.to(device), y.to(device)
        with trainer.precision_plugin.forward_context():
            sums.append(batch_sums(net, datamodule.eval_transform(x), y))
    net.train(was_training)
    loss, correct, count = summed_over_ranks(sums, device, Collective(trainer.strategy)).tolist()
    return {"test/acc": correct / count, "test/loss": loss / count}


def summed_over_ranks(sums: list[torch.Tensor], device: torch.device, collective: Collective) -> torch.Tensor:
    """[Σ loss, # correct, # samples] over this rank's batches, then over every rank's (DDP shards the data)."""
    total = torch.stack(sums).sum(0) if sums else torch.zeros(3, device=device)
    return collective.sum_(total)


@torch.no_grad()
def train_objective(net: nn.Module, clients, datamodule, params: torch.Tensor, weight_decay: float) -> float:
    """(1/M) Σ_i f_i(x) + (λ/2)‖x‖², f_i the mean loss over client i's data (clients are equal-sized)."""
    total = torch.zeros((), device=clients.y.device)
    for start in range(0, len(clients.y), datamodule.eval_batch_size):
        stop = start + datamodule.eval_batch_size
        logits = net(datamodule.eval_transform(clients.x[start:stop]))
        total += F.cross_entropy(logits.float(), clients.y[start:stop], reduction="sum")
    penalty = 0.5 * weight_decay * params.pow(2).sum()  # params: the flat vector of net's parameters
    return float(total / len(clients.y) + penalty)
