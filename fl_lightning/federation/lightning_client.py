"""An existing Lightning training script as one federated client.

``FederatedClient`` is an ordinary Lightning callback for the user's own ``Trainer`` (either namespace: its hooks
are called by name): before training it loads the server's global model into the user's LightningModule,
optionally adds FedProx's proximal gradient μ(y − x^r) before every optimizer step, and after training it
uploads the update Δ = y − x^r with the number of samples it trained on. ``InProcessServer`` is the server side
simulated in this process: FedAvg, x^{r+1} = x^r + Σ n_i Δ_i / Σ n_i (``weighted=False``: the plain mean).
Only floating-point entries of the state dict are averaged; others (BatchNorm's counters) are the last client's.
"""
from __future__ import annotations

from typing import Optional

import pytorch_lightning as pl
import torch
from torch import nn

from fl_lightning.errors import ConfigError


class InProcessServer:
    """The global model and one round's uploads (what a real deployment's server would hold)."""

    def __init__(self, model: nn.Module, weighted: bool = True):
        self.state = {name: value.detach().clone() for name, value in model.state_dict().items()}
        self.weighted = weighted
        self.round = 0
        self._sum: dict[str, torch.Tensor] = {}
        self._weight = 0.0

    def download(self) -> dict[str, torch.Tensor]:
        return {name: value.clone() for name, value in self.state.items()}

    def upload(self, delta: dict[str, torch.Tensor], num_samples: int) -> None:
        weight = float(num_samples) if self.weighted else 1.0
        for name, value in delta.items():
            self._sum[name] = self._sum[name] + weight * value if name in self._sum else weight * value
        self._weight += weight

    def end_round(self) -> None:
        """x^{r+1} = x^r + the (weighted) mean of this round's Δ; a round without uploads changes nothing."""
        if self._weight > 0:
            for name, total in self._sum.items():
                self.state[name] += (total / self._weight).to(self.state[name].dtype)
        self._sum, self._weight = {}, 0.0
        self.round += 1


class FederatedClient(pl.Callback):
    """Args:
        server: where the global model comes from and the update goes (``InProcessServer`` here).
        mu: FedProx's μ: adds μ(y − x^r) to every gradient before the optimizer step (0: FedAvg).
    """

    def __init__(self, server: InProcessServer, mu: float = 0.0):
        if mu < 0:
            raise ConfigError("FederatedClient.mu", f"must be ≥ 0, got {mu}")
        self.server, self.mu = server, mu
        self._start: Optional[dict[str, torch.Tensor]] = None
        self.num_samples = 0

    def on_fit_start(self, trainer, pl_module) -> None:
        global_state = self.server.download()
        pl_module.load_state_dict(global_state)
        self._start = {name: value.to(pl_module.device) for name, value in global_state.items()}
        self.num_samples = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        inputs = batch[0] if isinstance(batch, (list, tuple)) else batch
        self.num_samples += len(inputs)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if self.mu == 0:
            return
        for name, param in pl_module.named_parameters():
            if param.grad is not None:
                param.grad.add_(param.detach() - self._start[name], alpha=self.mu)

    def on_fit_end(self, trainer, pl_module) -> None:
        state = pl_module.state_dict()
        delta = {name: (state[name].detach() - start).cpu() if start.is_floating_point() else start.cpu()
                 for name, start in self._start.items()}
        floats = {name: value for name, value in delta.items() if value.is_floating_point()}
        self.server.upload(floats, self.num_samples)
        for name, value in delta.items():  # counters: the last client's
            if not value.is_floating_point():
                self.server.state[name] = state[name].detach().cpu().clone()
