"""FedDC: local drift decoupling and correction (Gao et al., CVPR 2022; spec, "FedDC").

Written from the paper and its public code (github gaoliang13/FedDC, ``train_model_FedDC`` and
the server loop of ``utils_methods_FedDC.py``), per client i with drift h_i and gradient
control c_i (0 at first), server control c and T local steps at lr η:

client_init   download x^r and c (2d floats)
client_step   minimises f_i(y) + (α/2)‖y + h_i − x^r‖² + ⟨y, c − c_i⟩:
              g ← ∇f_i(y; ζ) + α (y + h_i − x^r) + c − c_i   (then SGD with weight decay)
client_final  upload Δ_i = y − x^r (d floats); h_i ← h_i + Δ_i;
              c_i⁺ = c_i − c + (x^r − y) / (T η)            (the code's ``state_g``)
server        c ← c + (1/M) Σ_sampled (c_i⁺ − c_i)
              x^{r+1} = mean_sampled y_i + mean_{all M} h_i  = x^r + Δ̄ + h̄

Choices, as the public code (the paper's Algorithm 1 averages y_i + h_i over the sampled
clients only): h̄ is the mean over all M clients' drifts; both corrections use the same
SCAFFOLD-style c, c_i. The server can derive h_i and c_i⁺ − c_i from Δ_i and T itself, so
they cost no upload; the callback keeps them (h_i, c_i on the CPU, saved in checkpoints).
"""
from __future__ import annotations

from typing import Optional

import torch

from fl_lightning.callbacks.base import FLCallback
from fl_lightning.errors import ConfigError


class DriftCorrection(FLCallback):
    """FedDC: local drift h_i and gradient correction.

    Args:
        alpha: α ≥ 0, the weight of the drift penalty (FedDC: 0.01).
    """

    def __init__(self, alpha: float = 0.01):
        if alpha < 0:
            raise ConfigError("DriftCorrection(alpha=...)", f"must be ≥ 0, got {alpha}")
        self.alpha = alpha
        self.client_drifts: dict[int, torch.Tensor] = {}  # h_i, on the CPU
        self.client_controls: dict[int, torch.Tensor] = {}  # c_i, on the CPU
        self.server_control: Optional[torch.Tensor] = None  # c
        self.drift_sum: Optional[torch.Tensor] = None  # Σ over all M clients of h_i
        self._round_control_change: Optional[torch.Tensor] = None

    def _zeros(self, loop) -> torch.Tensor:
        return torch.zeros_like(loop.flat.grad)

    def _client_state(self, store: dict, client_id: int, like: torch.Tensor) -> torch.Tensor:
        stored = store.get(client_id)
        return stored.to(like.device) if stored is not None else torch.zeros_like(like)

    def configure_round(self, loop, plan):
        if self.server_control is None:
            self.server_control, self.drift_sum = self._zeros(loop), self._zeros(loop)
        device = loop.flat.grad.device
        self.server_control, self.drift_sum = self.server_control.to(device), self.drift_sum.to(device)
        self._round_control_change = self._zeros(loop)

    def on_client_start(self, loop, client):
        c = self.server_control
        client.download.add("control", 0, c)
        c_i = self._client_state(self.client_controls, client.client_id, c)
        h_i = self._client_state(self.client_drifts, client.client_id, c)
        client.info["control"], client.info["drift"] = c_i, h_i
        # α (h_i − x^r) + c − c_i: the part of the penalties' gradient that does not depend on y
        client.info["correction"] = self.alpha * (h_i - loop.global_vector[:c.numel()]) + c - c_i

    def on_local_gradient(self, loop, client):
        loop.flat.grad.add_(loop.flat.params, alpha=self.alpha).add_(client.info["correction"])

    def on_client_reported(self, loop, client):
        d = loop.flat.num_params
        change = loop.flat.vector[:d] - loop.global_vector[:d]
        c_i, c = client.info["control"], self.server_control
        new_control = c_i - c - change / (client.steps * loop.optimizer.param_groups[0]["lr"])
        self._round_control_change += new_control - c_i
        self.drift_sum += change
        self.client_drifts[client.client_id] = (client.info["drift"] + change).cpu()
        self.client_controls[client.client_id] = new_control.cpu()

    def on_server_update(self, loop, update, received):
        update.add_(self.drift_sum, alpha=1.0 / len(loop.clients))
        self.server_control.add_(self._round_control_change, alpha=1.0 / len(loop.clients))

    def state_dict(self) -> dict:
        return {"alpha": self.alpha, "client_drifts": self.client_drifts, "client_controls": self.client_controls,
                "server_control": self.server_control, "drift_sum": self.drift_sum}

    def load_state_dict(self, state_dict: dict) -> None:
        self.alpha = state_dict["alpha"]
        self.client_drifts = dict(state_dict["client_drifts"])
        self.client_controls = dict(state_dict["client_controls"])
        self.server_control, self.drift_sum = state_dict["server_control"], state_dict["drift_sum"]
