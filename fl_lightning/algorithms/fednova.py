"""FedNova (Wang et al., NeurIPS 2020, "Tackling the Objective Inconsistency Problem", Sec. 4).

Clients that run different numbers of local steps τ_i (E epochs over unequal data) pull FedAvg
towards the clients that ran longest. FedNova normalises each update by ‖a_i‖₁, the number of
effective steps of its local solver (τ_i for SGD; Σ_{k=1..τ_i} (1 − ρ^k)/(1 − ρ) with local
momentum ρ = model.client_momentum), and rescales the mean by τ_eff:

client_final  upload d_i = Δ_i / ‖a_i‖₁ over the parameters (d floats) and ‖a_i‖₁ (1 float);
              buffers (BatchNorm statistics) are sent as Δ, unnormalised
server        p_i = the aggregation weights (n_i with model.weighted_aggregation, else 1), normalised
              τ_eff = Σ p_i ‖a_i‖₁;   x^{r+1} = x^r + η_g τ_eff Σ p_i d_i

With equal τ_i this is FedAvg exactly (up to rounding).
"""
from __future__ import annotations

import torch

from fl_lightning.algorithms.base import Algorithm, positive, register
from fl_lightning.callbacks.base import FLCallback


def effective_steps(steps: int, momentum: float) -> float:
    """‖a_i‖₁ for τ local SGD steps with heavy-ball momentum ρ (ρ = 0: τ)."""
    if momentum == 0:
        return float(steps)
    return sum((1 - momentum ** k) / (1 - momentum) for k in range(1, steps + 1))


class NormalizedAveraging(FLCallback):
    """FedNova's normalised upload and τ_eff-scaled server update."""

    counts_local_steps = True  # the upload is normalised by τ_i (fl_lightning.assembly.fit.HookTraits)

    def configure_round(self, round):
        round.channels.update(steps=1, weighted_steps=1)

    def on_client_end(self, client):
        a_i = effective_steps(client.steps, client.momentum)
        for part in client.upload.parts:
            if part.channel == "delta":
                start, stop = part.ranges[0]
                params = max(0, min(stop, client.num_params) - start)
                part.message[:params].div_(a_i)  # Δ over the parameters → d_i
        client.upload.add("steps", 0, torch.tensor([a_i], device=client.vector.device))

    def on_client_reported(self, client):
        (a_i,) = [part.values() for part in client.upload.parts if part.channel == "steps"]  # as the server got it
        client.received.add_sum("weighted_steps", client.weight * a_i)  # p_i ∝ Δ̄'s weight of this client

    def on_server_update(self, server):
        total_weight = server.received.weight("delta")[0]
        tau_eff = server.received.sum("weighted_steps")[0] / total_weight
        server.update.mul_(tau_eff)


@register("fednova")
class FedNova(Algorithm):
    """FedNova: normalised averaging of updates from clients that ran different numbers of steps.

    Args:
        server_lr: η_g, the server step on τ_eff Σ p_i d_i.
    """

    summary = "FedNova: updates normalised by each client's local steps τ_i, rescaled by τ_eff"
    upload = "d + 1"

    def __init__(self, server_lr: float = 1.0):
        self.server_lr = positive(self, "server_lr", server_lr)

    def callbacks(self):
        return [NormalizedAveraging()]
