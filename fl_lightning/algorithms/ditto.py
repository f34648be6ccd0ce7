"""Ditto (Li et al., ICML 2021, "Ditto: Fair and Robust Federated Learning Through Personalization").

Each client keeps a personal model v_i (all parameters; x^0 until it first trains) in the
client-state store (table ``ditto_personal``). Per round on a sampled client:

    personal phase  ``personal_epochs`` epochs of SGD from v_i on  f_i(v) + (λ/2)‖v − x^r‖²
                    (g ← ∇f_i(v; ζ) + λ (v − x^r)); v_i ← the result, stored once the client reports
    global phase    y ← x^r, then model.local_epochs epochs of SGD on f_i (FedAvg's), upload Δ = y − x^r

Only Δ is uploaded; v_i never leaves the client. Floating buffers (BatchNorm statistics) are not
part of v_i: the global phase restarts them from x^r's, and v_i is evaluated with x^r's. The
local optimizer's state (momentum) carries across the two phases; train/loss averages both.
"""
from __future__ import annotations

from fl_lightning.algorithms.base import Algorithm, non_negative, positive, register
from fl_lightning.callbacks.base import FLCallback
from fl_lightning.errors import ConfigError


class PersonalModel(FLCallback):
    """Ditto's v_i: trained first in every local round, stored in the client-state store."""

    keeps_client_state = True  # (fl_lightning.assembly.fit.HookTraits)

    TABLE = "ditto_personal"

    def __init__(self, lam: float, personal_epochs: int):
        self.lam, self.personal_epochs = lam, personal_epochs

    def configure_round(self, round):
        self.table = round.client_state.table(self.TABLE, round.num_params)
        for client in round.clients:
            client.local_epochs += self.personal_epochs

    def on_client_start(self, client):
        if self.table.has(client.client_id):
            client.params.copy_(self.table.read(client.client_id).to(client.params.device))
        client.scratch[self] = [0, None]  # samples drawn, v_i once its phase ended

    def on_local_gradient(self, client):
        state = client.scratch[self]
        if state[1] is None:
            client.grad.add_(client.params - client.global_params, alpha=self.lam)
        state[0] += len(client.batch[1])

    def on_local_step_end(self, client):
        state = client.scratch[self]
        if state[1] is None and state[0] >= self.personal_epochs * client.num_samples:
            state[1] = client.params.clone()
            client.vector.copy_(client.global_vector)  # the global phase starts from x^r

    def on_client_reported(self, client):
        self.table.write(client.client_id, client.scratch[self][1])

    def personalize(self, evaluation, client_id: int, vector) -> None:
        table = evaluation.client_state.table(self.TABLE, evaluation.flat.num_params)
        if table.has(client_id):
            vector[:table.size].copy_(table.read(client_id).to(vector.device))


@register("ditto")
class Ditto(Algorithm):
    """Ditto: a personal model per client, regularised towards the global one by (λ/2)‖v − x‖².

    Args:
        lam: λ ≥ 0, the pull of the personal model to x^r (paper: 0.01–2; 0 = local training).
        personal_epochs: local epochs on the personal model per round, before the global model's.
        server_lr: η_g, the server step on the mean update.
    """

    summary = "Ditto: personal model v_i per client, (λ/2)‖v − x‖² to the global model (lam)"

    def __init__(self, lam: float = 0.1, personal_epochs: int = 1, server_lr: float = 1.0):
        self.lam = non_negative(self, "lam", lam)
        if personal_epochs < 1:
            raise ConfigError("Ditto(personal_epochs=...)", f"must be ≥ 1, got {personal_epochs}")
        self.personal_epochs = personal_epochs
        self.server_lr = positive(self, "server_lr", server_lr)

    def callbacks(self):
        return [PersonalModel(self.lam, self.personal_epochs)]
