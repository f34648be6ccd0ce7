"""FedDyn (Acar et al., ICLR 2021, "Federated Learning Based on Dynamic Regularization", Alg. 1).

Per client i a linear term g_i (the gradient of its last local objective, 0 at first) and the
server's h (0 at first), with α > 0 and x^r the downloaded model:

client_step   minimises f_i(y) − ⟨g_i, y⟩ + (α/2)‖y − x^r‖²:
              g ← ∇f_i(y; ζ) − g_i + α (y − x^r)          (then the local SGD step, with weight decay)
client_final  upload Δ_i = y − x^r (d floats); once it arrives g_i ← g_i − α Δ_i
server        h ← h − (α/M) Σ_{i reported} Δ_i
              x^{r+1} = mean_i y_i − h/α = x^r + Δ̄ − h/α   (server SGD with lr 1 on the update)

g_i lives in the run's client-state store (table ``feddyn_gradient``); Σ Δ_i is summed by the
server on its own channel, unweighted whatever model.weighted_aggregation says, so it holds every
rank's clients under DDP.
"""
from __future__ import annotations

from typing import Optional

import torch

from fl_lightning.errors import ConfigError
from fl_lightning.algorithms.base import Algorithm, positive, register
from fl_lightning.callbacks.base import FLCallback


class DynamicRegularizer(FLCallback):
    """FedDyn's linear and quadratic terms on the client, and h on the server."""

    keeps_client_state = True  # (fl_lightning.assembly.fit.HookTraits)

    def __init__(self, alpha: float):
        self.alpha = alpha
        self.h: Optional[torch.Tensor] = None

    def configure_round(self, round):
        if self.h is None:
            self.h = torch.zeros(round.num_params, device=round.device)
        self.h = self.h.to(round.device)
        self.table = round.client_state.table("feddyn_gradient", round.num_params)
        round.channels["feddyn_delta"] = round.num_params

    def on_client_start(self, client):
        g_i = self.table.read(client.client_id).to(client.grad.device)
        client.scratch[self] = (g_i, -g_i - self.alpha * client.global_params)  # g_i, and the step's y-free part

    def on_local_gradient(self, client):
        client.grad.add_(client.params, alpha=self.alpha).add_(client.scratch[self][1])  # no allocation per step

    def on_client_reported(self, client):
        change = client.params - client.global_params
        client.received.add_sum("feddyn_delta", change)
        self.table.write(client.client_id, client.scratch[self][0] - self.alpha * change)

    def on_server_update(self, server):
        self.h.sub_(server.received.sum("feddyn_delta"), alpha=self.alpha / server.num_clients)
        server.update.sub_(self.h, alpha=1.0 / self.alpha)

    def state_dict(self) -> dict:
        return {"alpha": self.alpha, "h": self.h}

    def load_state_dict(self, state_dict: dict) -> None:
        self.alpha, self.h = state_dict["alpha"], state_dict["h"]


@register("feddyn")
class FedDyn(Algorithm):
    """FedDyn: dynamic regularisation with a per-client linear term.

    Args:
        alpha: α > 0, the weight of the dynamic regulariser (paper: 0.1, 0.01 or 0.001).
    """

    summary = "FedDyn: dynamic regularisation, per-client linear term g_i and server h (alpha)"

    def __init__(self, alpha: float = 0.01):
        self.alpha = positive(self, "alpha", alpha)

    def callbacks(self):
        return [DynamicRegularizer(self.alpha)]

    def check_with(self, weighted_aggregation, compression):
        super().check_with(weighted_aggregation, compression)
        if weighted_aggregation:  # Acar et al.'s server step: x = mean_i y_i − h/α over participants, unweighted
            raise ConfigError("model.weighted_aggregation", "FedDyn's server step is the plain mean over the "
                              "participants (Acar et al. 2021); leave weighted_aggregation off")
