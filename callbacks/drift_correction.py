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
they cost no upload; they live in the run's client-state store (tables ``feddc_drift``,
``feddc_control``), and the round's changes are summed by the server (``loop.received``), so
the sums hold every rank's clients under DDP. With clients of unequal size the public code
scales α per client, α_i = α·mean(n)/n_i (``scale_alpha_by_size``; off by default).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from fl_lightning.callbacks.base import FLCallback
from fl_lightning.federation.client_state import refuse_inline_client_state
from fl_lightning.errors import ConfigError


@dataclass
class ClientDrift:
    """One client's FedDC state during a round."""

    control: torch.Tensor  # c_i
    drift: torch.Tensor  # h_i
    alpha: float  # α_i: α, or α·mean(n)/n_i with scale_alpha_by_size
    correction: torch.Tensor  # α_i (h_i − x^r) + c − c_i: the part of the penalties' gradient not depending on y


class DriftCorrection(FLCallback):
    """FedDC: local drift h_i and gradient correction.

    Args:
        alpha: α ≥ 0, the weight of the drift penalty (FedDC: 0.01).
        scale_alpha_by_size: α_i = α·mean(n)/n_i, as the public FedDC (and FedDyn) code does for
            clients of unequal size; default off, the paper's one α for every client.
    """

    keeps_client_state = True  # (fl_lightning.assembly.fit.HookTraits)

    def __init__(self, alpha: float = 0.01, scale_alpha_by_size: bool = False):
        if alpha < 0:
            raise ConfigError("DriftCorrection(alpha=...)", f"must be ≥ 0, got {alpha}")
        self.alpha, self.scale_alpha_by_size = alpha, scale_alpha_by_size
        self.server_control: Optional[torch.Tensor] = None  # c
        self.drift_sum: Optional[torch.Tensor] = None  # Σ over all M clients of h_i

    def configure_round(self, round):
        d, device = round.num_params, round.device
        if self.server_control is None:
            self.server_control, self.drift_sum = torch.zeros(d, device=device), torch.zeros(d, device=device)
        self.server_control, self.drift_sum = self.server_control.to(device), self.drift_sum.to(device)
        self.client_drifts = round.client_state.table("feddc_drift", d)  # h_i
        self.client_controls = round.client_state.table("feddc_control", d)  # c_i
        round.channels.update(drift_change=d, control_change=d)  # server-side sums of the round's changes
        self._mean_size = round.total_samples / round.num_clients

    def on_client_start(self, client):
        c = self.server_control
        client.download.add("control", 0, c)
        c_i = self.client_controls.read(client.client_id).to(c.device)
        h_i = self.client_drifts.read(client.client_id).to(c.device)
        alpha = self.alpha * self._mean_size / client.num_samples if self.scale_alpha_by_size else self.alpha
        client.scratch[self] = ClientDrift(c_i, h_i, alpha, alpha * (h_i - client.global_params) + c - c_i)

    def on_local_gradient(self, client):
        state = client.scratch[self]
        client.grad.add_(client.params, alpha=state.alpha).add_(state.correction)

    def on_client_reported(self, client):
        state = client.scratch[self]
        change = client.params - client.global_params
        new_control = state.control - self.server_control - change / (client.steps * client.lr)
        client.received.add_sum("control_change", new_control - state.control)
        client.received.add_sum("drift_change", change)
        self.client_drifts.write(client.client_id, state.drift + change)
        self.client_controls.write(client.client_id, new_control)

    def on_server_update(self, server):
        self.drift_sum += server.received.sum("drift_change")
        server.update.add_(self.drift_sum, alpha=1.0 / server.num_clients)
        self.server_control.add_(server.received.sum("control_change"), alpha=1.0 / server.num_clients)

    def state_dict(self) -> dict:
        return {"alpha": self.alpha, "server_control": self.server_control, "drift_sum": self.drift_sum}

    def load_state_dict(self, state_dict: dict) -> None:
        refuse_inline_client_state(state_dict, "client_drifts")
        self.alpha = state_dict["alpha"]
        self.server_control, self.drift_sum = state_dict["server_control"], state_dict["drift_sum"]
