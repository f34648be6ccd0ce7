"""FedRep (Collins et al., ICML 2021, "Exploiting Shared Representations for Personalized Federated
Learning"), per round on each sampled client:

    head phase   ``head_epochs`` epochs on the head only (the body frozen at x^r's)
    body phase   model.local_epochs epochs on the body only (the head frozen at the head phase's result)
    upload       Δ of the body; the head stays on the client (its row of the client-state store)

Frozen coordinates are zeroed in the gradient and put back after every optimizer step, so weight
decay does not move them either. The phase of a step is decided by the samples the client has
drawn: the first head_epochs·n_i samples are the head phase.
"""
from __future__ import annotations

from typing import Optional

from fl_lightning.algorithms.base import register
from fl_lightning.algorithms.fedper import FedPer
from fl_lightning.callbacks.base import FLCallback
from fl_lightning.errors import ConfigError
from fl_lightning.personalization.personal import PersonalPart, subtract


class HeadThenBody(FLCallback):
    """FedRep's two phases inside one local training (module docstring)."""

    def __init__(self, part: PersonalPart, head_epochs: int):
        self.part, self.head_epochs = part, head_epochs

    def configure_round(self, round):
        for client in round.clients:
            client.local_epochs += self.head_epochs
        d = round.num_params
        head = subtract(self.part.ranges, [(d, round.numel)])  # parameters only: buffers are not stepped
        self.frozen = {True: subtract([(0, d)], head), False: head}  # head phase freezes the body, and back

    def on_client_start(self, client):
        client.scratch[self] = [0, None, []]  # samples drawn, current phase (True: head), frozen values

    def on_local_gradient(self, client):
        state = client.scratch[self]
        head_phase = state[0] < self.head_epochs * client.num_samples
        state[0] += len(client.batch[1])
        if state[1] != head_phase:
            state[1] = head_phase
            state[2] = [(a, b, client.params[a:b].clone()) for a, b in self.frozen[head_phase]]
        for a, b, _ in state[2]:
            client.grad[a:b].zero_()

    def on_local_step_end(self, client):
        for a, b, values in client.scratch[self][2]:
            client.params[a:b].copy_(values)


@register("fedrep")
class FedRep(FedPer):
    """FedRep: per round the head is trained first (body frozen), then the body (head frozen); the head stays local.

    Args:
        head_epochs: local epochs on the head before the body's model.local_epochs (paper: 10).
        personal_layers: module names of the head each client keeps; default: the classifier head.
        server_lr: η_g, the server step on the mean body update.
    """

    summary = "FedRep: head epochs then body epochs per round; the head kept on each client (head_epochs)"
    upload = "d − |head|"

    def __init__(self, head_epochs: int = 1, personal_layers: Optional[list[str]] = None, server_lr: float = 1.0):
        if head_epochs < 1:
            raise ConfigError("FedRep(head_epochs=...)", f"must be ≥ 1, got {head_epochs}")
        super().__init__(personal_layers, server_lr)  # FedPer's head, kept on each client
        self.head_epochs = head_epochs

    def callbacks(self):
        part = PersonalPart(self.select, f"fedrep head {self.modules}")
        return [part, HeadThenBody(part, self.head_epochs)]
