"""Evaluation of the global model: accuracy and loss on a data set, the network's own logged metrics, the
global training objective, and ``model.eval_every_d``'s schedule (``GlobalEvaluation``).

A LightningModule that defines its own ``validation_step`` (or ``test_step``) is evaluated by it alone: what it
logs, averaged over the evaluation set's samples and summed over ranks, is the evaluation, and ``forward`` is
never called here (any task: reconstruction, regression, ...). Other networks get val/acc and val/loss from
their class logits."""
from __future__ import annotations

import math
from typing import Optional

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn

from fl_lightning.federation.distributed import Collective
from fl_lightning.federation.user_module import LoggedValues, logging_into, overrides


def batch_sums(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """[Σ loss, # correct, # samples] of ``net`` on one (transformed) batch."""
    logits = net(x).float()
    loss = F.cross_entropy(logits, y, reduction="sum").detach()
    return torch.stack([loss, (logits.argmax(-1) == y).sum().float(), torch.tensor(float(len(y)), device=x.device)])


def own_hook(net: nn.Module, hook: str) -> Optional[str]:
    """The network's own evaluation hook for ``hook`` (a missing test_step falls back to its validation_step)."""
    return next((name for name in (hook, "validation_step") if overrides(net, name)), None)


def evaluates_itself(net: nn.Module) -> bool:
    """A LightningModule with its own validation_step: the loop needs neither forward nor class logits."""
    return own_hook(net, "validation_step") is not None


@torch.no_grad()
def test_metrics(net: nn.Module, trainer: pl.Trainer) -> dict[str, float]:
    """test/acc and test/loss of the global model on the test set (the number papers report); for a network
    that evaluates itself, what its test_step (else validation_step) logs there, under test/ names."""
    datamodule, was_training = trainer.datamodule, net.training
    device = next(net.parameters()).device
    hook, logs = own_hook(net, "test_step"), LoggedValues()
    net.eval()
    sums = []
    for batch_idx, (x, y) in enumerate(datamodule.test_dataloader()):
        if not len(y):  # a rank's stand-in batch (fewer batches than ranks)
            continue
        x, y = x.to(device), y.to(device)
        with trainer.precision_plugin.forward_context():
            if hook is None:
                sums.append(batch_sums(net, datamodule.eval_transform(x), y))
                continue
            logs.weight = len(y)
            with logging_into(net, logs):
                getattr(net, hook)((datamodule.eval_transform(x), y), batch_idx)
    net.train(was_training)
    if hook is not None:
        means = logs.pop_means(Collective(trainer.strategy))
        return {name if name.startswith("test") else f"test/{name}": value for name, value in means.items()}
    loss, correct, count = summed_over_ranks(sums, device, Collective(trainer.strategy)).tolist()
    return {"test/acc": correct / count, "test/loss": loss / count}


def summed_over_ranks(sums: list[torch.Tensor], device: torch.device, collective: Collective) -> torch.Tensor:
    """[Σ loss, # correct, # samples] over every batch: each rank's batch sums (DDP gives each rank
    consecutive batches) gathered in batch order, then summed as one process sums them."""
    table = torch.stack(sums) if sums else torch.zeros(0, 3, device=device)
    return collective.concat(table).sum(0)


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


class GlobalEvaluation:
    """val/* (test/* for ``validate``/``test``) of the global model: [Σ loss, # correct, # samples] summed over
    batches and ranks, plus what the network's own ``validation_step``/``test_step`` log; with ``eval_every_d``
    only when comm/upload_d crosses a new multiple of it, or after the last round."""

    def __init__(self, eval_every_d: Optional[float]):
        self.every = eval_every_d
        self.mark = 0  # multiples of eval_every_d evaluated so far (in checkpoints)
        self.skip = False  # this evaluation is not due
        self.metrics: dict[str, float] = {}  # this round's val/* (its log row)
        self._sums: list[torch.Tensor] = []
        self._logs = LoggedValues()  # the network's own self.log calls

    def start(self, trainer: pl.Trainer, upload_d: Optional[float]) -> None:
        self.skip = not self._due(trainer, upload_d)

    def _due(self, trainer: pl.Trainer, upload_d: Optional[float]) -> bool:
        if self.every is None or upload_d is None or trainer.state.fn != "fit" or trainer.sanity_checking:
            return True
        max_rounds = trainer.max_epochs
        mark = math.floor(upload_d / self.every + 1e-9)
        last = trainer.should_stop or (max_rounds is not None and 0 <= max_rounds <= trainer.current_epoch + 1)
        if mark > self.mark or last or upload_d == 0:
            self.mark = mark
            return True
        return False

    def step(self, net: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_idx: int, hook_name: str) -> None:
        if self.skip:
            return
        hook = own_hook(net, hook_name)
        if hook is not None:  # the network's own validation_step / test_step is the evaluation
            self._logs.weight = len(y)
            with logging_into(net, self._logs):
                getattr(net, hook)((x, y), batch_idx)
            return
        self._sums.append(batch_sums(net, x, y))

    def end(self, prefix: str, net: nn.Module, collective: Collective) -> Optional[dict[str, float]]:
        """The metrics of this evaluation (None when it was not due). Every rank takes the same path,
        also one that had no batch (an evaluation set of fewer batches than ranks)."""
        if self.skip:
            self.skip = False
            return None
        if own_hook(net, "validation_step" if prefix == "val" else "test_step") is not None:
            return self._logs.pop_means(collective)
        device = next(net.parameters()).device
        loss, correct, count = summed_over_ranks(self._sums, device, collective).tolist()
        self._sums = []
        return {**self._logs.pop_means(collective), f"{prefix}/acc": correct / count, f"{prefix}/loss": loss / count}
