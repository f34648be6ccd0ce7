"""SCAFFOLD control variates, and their block-restricted form in FedBCGD+ (spec, "SCAFFOLD",
"FedBCGD+"; Karimireddy et al. 2020).

``rule="spec"`` (the contract):

client_init   c_i from this client's memory (0 the first time); c downloaded (d floats)
client_step   g ← g − c_i + c
client_final  option I:  c_i⁺ = ∇f_i(x^r) + wd·x^r   (the gradient of f_i + (wd/2)‖x‖²)
              option II: c_i⁺ = c_i − c + (x^r − y_T) / (T η)
              upload Δc = c_i⁺ − c_i over the same slices as Δ (FedBCGD+: block j and shared);
              ``keep="uploaded"``: the client stores c_i⁺ only on those slices, its old c_i elsewhere
server        c ← c + (1/M) Σ Δc; on FedBCGD+'s shared block (1/(MN)) Σ Δc when
              ``shared_coefficient="paper"`` (Eq. 5 as printed), 1/M when ``"mean"``.
              With keep="uploaded" and "mean", c = mean_i c_i on every coordinate; a compressed
              Δc is kept as the server decodes it (c_i + decode), so this holds under QSGD too.

``rule="authors"`` (github junkangLiu0/FedBCGD, ``update_SCAFFOLDM``): y ← y − (c − c_i) after
each optimizer step (no η); c_i⁺ = c_i − c + (x^r − y_T)/T, kept whole; upload c_i⁺ − c; server
c ← c + 0.1 · (per-coordinate mean over uploaders), the first time c ← that mean.

c_i is kept for every one of the M clients across rounds in the run's client-state store (on
disk, table ``control_variate``; a checkpoint holds where the rows are, not the rows). The Δc
sum is never weighted by sample counts (``weighted_aggregation`` weights Δ only).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from fl_lightning.callbacks.base import FLCallback
from fl_lightning.federation.client_state import refuse_inline_client_state
from fl_lightning.errors import ConfigError

AUTHORS_SERVER_STEP = 0.1  # their c ← c + 0.1 · mean(c_i⁺ − c): an exponential moving average


@dataclass
class ClientControls:
    """One client's control variates during a round."""

    c_i: torch.Tensor  # as stored before the round
    correction: torch.Tensor  # c − c_i, added to every local gradient
    kept: Optional[torch.Tensor] = None  # the c_i it stores once its upload arrives


class ControlVariates(FLCallback):
    """SCAFFOLD / FedBCGD+ control variates c_i and c.

    Args:
        option: c_i refresh, ``option1`` (∇f_i(x^r) + wd·x^r) or ``option2`` (SCAFFOLD's difference form).
        keep: what a client stores of c_i⁺: ``uploaded`` (only the slices it reported) or ``all``.
        shared_coefficient: server step on the shared block, ``paper`` (1/(MN)) or ``mean`` (1/M).
        block_coefficients: apply ``shared_coefficient`` (FedBCGD+); SCAFFOLD uses 1/M everywhere.
        rule: ``spec`` or ``authors`` (see the module docstring).
    """

    keeps_client_state = True  # (fl_lightning.assembly.fit.HookTraits)
    uploads_control_variates = True  # Δc_i beside the update: client-level DP noises it too (fl_lightning.privacy)

    CHOICES = {"option": ("option1", "option2"), "keep": ("uploaded", "all"), "shared_coefficient": ("mean", "paper"),
               "rule": ("spec", "authors")}

    def __init__(self, option: str = "option2", keep: str = "uploaded", shared_coefficient: str = "mean",
                 block_coefficients: bool = False, rule: str = "spec"):
        for name, value in (("option", option), ("keep", keep), ("shared_coefficient", shared_coefficient),
                            ("rule", rule)):
            choices = self.CHOICES[name]
            if value not in choices:
                raise ConfigError(f"ControlVariates({name}=...)", f"unknown {value!r}; choose one of {choices}")
        self.option, self.keep, self.shared_coefficient, self.rule = option, keep, shared_coefficient, rule
        self.block_coefficients = block_coefficients
        self.server_control: Optional[torch.Tensor] = None  # c
        self.server_rounds = 0  # server updates of c so far (the authors' first one is undamped)
        self._coefficients: Optional[torch.Tensor] = None

    # -- client ---------------------------------------------------------------------------
    def configure_round(self, round):
        self.client_controls = round.client_state.table("control_variate", round.num_params)  # c_i
        if self.server_control is None:
            self.server_control = torch.zeros(round.num_params, device=round.device)
        self.server_control = self.server_control.to(round.device)
        if self._coefficients is None or self._coefficients.device != round.device:
            self._coefficients = self._coefficient_vector(round)

    def on_client_start(self, client):
        c = self.server_control
        client.download.add("control", 0, c)
        c_i = self.client_controls.read(client.client_id).to(c.device)
        client.scratch[self] = ClientControls(c_i, c - c_i)
        if self.option == "option1" and self.rule == "spec":
            client.full_gradient()  # while the working model is still x^r

    def on_local_gradient(self, client):
        if self.rule == "spec":
            client.grad.add_(client.scratch[self].correction)

    def on_local_step_end(self, client):
        if self.rule == "authors":
            client.params.sub_(client.scratch[self].correction)

    def refreshed(self, client) -> torch.Tensor:
        """c_i⁺ (module docstring), after the local steps."""
        c_i, c = client.scratch[self].c_i, self.server_control
        if self.rule == "spec" and self.option == "option1":
            return client.full_gradient() + client.weight_decay * client.global_params
        steps = client.steps * (client.lr if self.rule == "spec" else 1.0)
        return c_i - c + (client.global_params - client.params) / steps

    def on_client_end(self, client):
        controls = client.scratch[self]
        c_i, new = controls.c_i, self.refreshed(client)
        sent = new - (self.server_control if self.rule == "authors" else c_i)
        kept = c_i.clone() if self.keep == "uploaded" else new
        for start, stop in client.upload_ranges:
            stop = min(stop, sent.numel())  # control variates cover parameters, not buffers
            if start < stop:
                client.upload.add("control", start, sent[start:stop])
                kept[start:stop] = new[start:stop]
        controls.kept = kept

    def on_client_reported(self, client):
        controls = client.scratch[self]
        self._keep_what_the_server_decoded(client, controls)
        self.client_controls.write(client.client_id, controls.kept)

    def _keep_what_the_server_decoded(self, client, controls: ClientControls) -> None:
        """A compressed Δc reaches the server as decode(message), not as sent: on those slices the
        client keeps c_i + decode(message) (authors' rule: c + decode), so c stays the mean of the c_i."""
        base = self.server_control if self.rule == "authors" else controls.c_i
        for part in client.upload.parts:
            if part.channel != "control" or isinstance(part.message, torch.Tensor):
                continue  # sent exactly: kept already holds c_i⁺ there
            values, offset = part.values().to(base.device), 0
            for start, stop in part.ranges:
                controls.kept[start:stop] = base[start:stop] + values[offset:offset + stop - start]
                offset += stop - start

    # -- server ---------------------------------------------------------------------------
    def _coefficient_vector(self, round) -> torch.Tensor:
        """1/M everywhere; 1/(M N) on the shared block with block coefficients and ``paper`` (Eq. 5)."""
        num_clients, blocks = round.num_clients, round.blocks
        coefficients = torch.full((round.num_params,), 1.0 / num_clients, device=round.device)
        if self.block_coefficients and self.shared_coefficient == "paper" and blocks.shared is not None:
            for start, stop in blocks.shared.ranges:
                coefficients[start:min(stop, coefficients.numel())] = 1.0 / (num_clients * blocks.num_blocks)
        return coefficients

    def on_server_update(self, server):
        c = self.server_control
        if self.rule == "spec":
            c.add_(server.received.sum("control") * self._coefficients)
        elif self.server_rounds == 0:
            c.copy_(server.received.mean("control"))
        else:
            c.add_(server.received.mean("control"), alpha=AUTHORS_SERVER_STEP)
        self.server_rounds += 1

    def state_dict(self) -> dict:
        return {"option": self.option, "keep": self.keep, "shared_coefficient": self.shared_coefficient,
                "rule": self.rule, "server_rounds": self.server_rounds,
                "server_control": self.server_control}

    def load_state_dict(self, state_dict: dict) -> None:
        self.option, self.keep, self.rule = state_dict["option"], state_dict["keep"], state_dict["rule"]
        self.shared_coefficient, self.server_rounds = state_dict["shared_coefficient"], state_dict["server_rounds"]
        refuse_inline_client_state(state_dict, "client_controls")
        self.server_control = state_dict["server_control"]
