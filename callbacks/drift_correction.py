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
the sums hold every rank's clients under DDP.
"""
from __future__ import annotations

from typing import Optional

import torch

from fl_lightning.callbacks.base import FLCallback
from fl_lightning.client_state import refuse_inline_client_state
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
        self.server_control: Optional[torch.Tensor] = None  # c
        self.drift_sum: Optional[torch.Tensor] = None  # Σ over all M clients of h_i

    def configure_round(self, loop, plan):
        d, device = loop.flat.num_params, loop.flat.grad.device
        if self.server_control is None:
            self.server_control, self.drift_sum = torch.zeros(d, device=device), torch.zeros(d, device=device)
        self.server_control, self.drift_sum = self.server_control.to(device), self.drift_sum.to(device)
        self.client_drifts = loop.client_state.table("feddc_drift", d)  # h_i
        self.client_controls = loop.client_state.table("feddc_control", d)  # c_i
        plan.channels.update(drift_change=d, control_change=d)  # server-side sums of the round's changes

    def on_client_start(self, loop, client):
        c = self.server_control
        client.download.add("control", 0, c)
        c_i = self.client_controls.read(client.client_id).to(c.device)
        h_i = self.client_drifts.read(client.client_id).to(c.device)
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
        loop.received.add_sum("control_change", new_control - c_i)
        loop.received.add_sum("drift_change", change)
        self.client_drifts.write(client.client_id, client.info["drift"] + change)
        self.client_controls.write(client.client_id, new_control)

    def on_server_update(self, loop, update, received):
        self.drift_sum += received.sum("drift_change")
        update.add_(self.drift_sum, alpha=1.0 / len(loop.clients))
        self.server_control.add_(received.sum("control_change"), alpha=1.0 / len(loop.clients))

    def state_dict(self) -> dict:
        return {"alpha": self.alpha, "server_control": self.server_control, "drift_sum": self.drift_sum}

    def load_state_dict(self, state_dict: dict) -> None:
        refuse_inline_client_state(state_dict, "client_drifts")
        self.alpha = state_dict["alpha"]
        self.server_control, self.drift_sum = state_dict["server_control"], state_dict["drift_sum"]
