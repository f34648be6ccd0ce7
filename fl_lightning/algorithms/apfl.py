"""APFL (Deng, Kamani & Mahdavi 2020, "Adaptive Personalized Federated Learning"), with a fixed α.

Each client keeps a personal model v_i (all parameters; x^r the first time it trains) in the
client-state store (table ``apfl_personal``); its personalised model is the mixture
v̄_i = α v_i + (1−α) x^r. Per round on a sampled client:

    personal phase  ``personal_epochs`` epochs of SGD on v through the mixture, the global part held
                    at x^r: g = ∇_v f_i(α v + (1−α) x^r) = α ∇f_i(v̄). The working parameters are v̄
                    itself, stepped with α² ∇f_i(v̄) (the same step: v̄ − (1−α) x^r = α v);
                    v_i ← (v̄ − (1−α) x^r) / α, stored once the client reports
    global phase    y ← x^r, then model.local_epochs epochs of SGD on f_i (FedAvg's), upload Δ = y − x^r

Only Δ is uploaded; v_i never leaves the client. Differences from the paper, said plainly: α is a fixed
option (the paper's experiments also use fixed α ∈ {0.25, 0.5, 0.75}; its adaptive α is not built), and
the two phases run one after the other with the global part held at x^r (as Ditto's do here) rather than
interleaved step by step with the client's moving w. Floating buffers (BatchNorm statistics) are not
part of v_i: the personalised model uses x^r's. With momentum or weight decay in the local optimizer,
they act on v̄ (the working parameters), not on v.
"""
from __future__ import annotations

from fl_lightning.algorithms.base import Algorithm, positive, register
from fl_lightning.callbacks.base import FLCallback
from fl_lightning.errors import ConfigError


class MixedPersonalModel(FLCallback):
    """APFL's v_i: trained through the mixture first in every local round, stored in the client-state store."""

    keeps_client_state = True  # (fl_lightning.assembly.fit.HookTraits)

    TABLE = "apfl_personal"

    def __init__(self, alpha: float, personal_epochs: int):
        self.alpha, self.personal_epochs = alpha, personal_epochs

    def configure_round(self, round):
        self.table = round.client_state.table(self.TABLE, round.num_params)
        for client in round.clients:
            client.local_epochs += self.personal_epochs

    def mix(self, personal, global_params):
        return personal * self.alpha + global_params * (1 - self.alpha)

    def on_client_start(self, client):
        if self.table.has(client.client_id):
            personal = self.table.read(client.client_id).to(client.params.device)
            client.params.copy_(self.mix(personal, client.global_params))
        client.scratch[self] = [0, None]  # samples drawn, v_i once its phase ended

    def on_local_gradient(self, client):
        state = client.scratch[self]
        if state[1] is None:
            client.grad.mul_(self.alpha * self.alpha)
        state[0] += len(client.batch[1])

    def on_local_step_end(self, client):
        state = client.scratch[self]
        if state[1] is None and state[0] >= self.personal_epochs * client.num_samples:
            state[1] = (client.params - client.global_params * (1 - self.alpha)) / self.alpha
            client.vector.copy_(client.global_vector)  # the global phase starts from x^r

    def on_client_reported(self, client):
        self.table.write(client.client_id, client.scratch[self][1])

    def personalize(self, evaluation, client_id: int, vector) -> None:
        table = evaluation.client_state.table(self.TABLE, evaluation.flat.num_params)
        if table.has(client_id):
            d = table.size
            vector[:d].copy_(self.mix(table.read(client_id).to(vector.device), vector[:d]))


@register("apfl")
class APFL(Algorithm):
    """APFL: a personal model v_i per client; the client's model is α v_i + (1−α) x (fixed α).

    Args:
        alpha: α in (0, 1], the personal model's weight in the mixture (paper: 0.25–0.75; 1 = local training).
        personal_epochs: local epochs on the personal model per round, before the global model's.
        server_lr: η_g, the server step on the mean update.
    """

    summary = "APFL: personal v_i per client, evaluated as α v_i + (1−α) x (alpha, fixed)"

    def __init__(self, alpha: float = 0.5, personal_epochs: int = 1, server_lr: float = 1.0):
        if not 0.0 < alpha <= 1.0:
            raise ConfigError("APFL(alpha=...)", f"must be in (0, 1], got {alpha} (e.g. 0.5)")
        if personal_epochs < 1:
            raise ConfigError("APFL(personal_epochs=...)", f"must be ≥ 1, got {personal_epochs}")
        self.alpha, self.personal_epochs = alpha, personal_epochs
        self.server_lr = positive(self, "server_lr", server_lr)

    def callbacks(self):
        return [MixedPersonalModel(self.alpha, self.personal_epochs)]
