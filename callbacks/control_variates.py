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
              With keep="uploaded" and "mean", c = mean_i c_i on every coordinate.

``rule="authors"`` (github junkangLiu0/FedBCGD, ``update_SCAFFOLDM``): y ← y − (c − c_i) after
each optimizer step (no η); c_i⁺ = c_i − c + (x^r − y_T)/T, kept whole; upload c_i⁺ − c; server
c ← c + 0.1 · (per-coordinate mean over uploaders), the first time c ← that mean.

c_i is kept for every one of the M clients across rounds in the run's client-state store (on
disk, table ``control_variate``; a checkpoint holds where the rows are, not the rows). The Δc
sum is never weighted by sample counts (``weighted_aggregation`` weights Δ only).
"""
from __future__ import annotations

from typing import Optional

import torch

from fl_lightning.callbacks.base import FLCallback
from fl_lightning.client_state import refuse_inline_client_state
from fl_lightning.errors import ConfigError

AUTHORS_SERVER_STEP = 0.1  # their c ← c + 0.1 · mean(c_i⁺ − c): an exponential moving average


class ControlVariates(FLCallback):
    """SCAFFOLD / FedBCGD+ control variates c_i and c.

    Args:
        option: c_i refresh, ``option1`` (∇f_i(x^r) + wd·x^r) or ``option2`` (SCAFFOLD's difference form).
        keep: what a client stores of c_i⁺: ``uploaded`` (only the slices it reported) or ``all``.
        shared_coefficient: server step on the shared block, ``paper`` (1/(MN)) or ``mean`` (1/M).
        block_coefficients: apply ``shared_coefficient`` (FedBCGD+); SCAFFOLD uses 1/M everywhere.
        rule: ``spec`` or ``authors`` (see the module docstring).
    """

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
    def configure_round(self, loop, plan):
        self.client_controls = loop.client_state.table("control_variate", loop.flat.num_params)  # c_i

    def _server_control(self, loop) -> torch.Tensor:
        if self.server_control is None:
            self.server_control = torch.zeros_like(loop.flat.grad)
        self.server_control = self.server_control.to(loop.flat.grad.device)
        return self.server_control

    def on_client_start(self, loop, client):
        c = self._server_control(loop)
        client.download.add("control", 0, c)
        c_i = self.client_controls.read(client.client_id).to(c.device)
        client.info["control"] = c_i
        client.info["correction"] = c - c_i
        if self.option == "option1" and self.rule == "spec":
            loop.full_gradient(client)  # while the working model is still x^r

    def on_local_gradient(self, loop, client):
        if self.rule == "spec":
            loop.flat.grad.add_(client.info["correction"])

    def on_local_step_end(self, loop, client):
        if self.rule == "authors":
            loop.flat.params.sub_(client.info["correction"])

    def refreshed(self, loop, client) -> torch.Tensor:
        """c_i⁺ (module docstring), after the local steps."""
        c_i, c, d = client.info["control"], self._server_control(loop), loop.flat.num_params
        global_params = loop.global_vector[:d]
        if self.rule == "spec" and self.option == "option1":
            weight_decay = loop.optimizer.param_groups[0]["weight_decay"]
            return loop.full_gradient(client) + weight_decay * global_params
        steps = client.steps * (loop.optimizer.param_groups[0]["lr"] if self.rule == "spec" else 1.0)
        return c_i - c + (global_params - loop.flat.vector[:d]) / steps

    def on_client_end(self, loop, client):
        c_i, new = client.info["control"], self.refreshed(loop, client)
        sent = new - (self._server_control(loop) if self.rule == "authors" else c_i)
        kept = c_i.clone() if self.keep == "uploaded" else new
        for start, stop in client.upload_ranges:
            stop = min(stop, sent.numel())  # control variates cover parameters, not buffers
            if start < stop:
                client.upload.add("control", start, sent[start:stop])
                kept[start:stop] = new[start:stop]
        client.info["kept_control"] = kept

    def on_client_reported(self, loop, client):
        self.client_controls.write(client.client_id, client.info["kept_control"])

    # -- server ---------------------------------------------------------------------------
    def _coefficient_vector(self, loop) -> torch.Tensor:
        """1/M everywhere; 1/(M N) on the shared block with block coefficients and ``paper`` (Eq. 5)."""
        if self._coefficients is None or self._coefficients.device != loop.flat.grad.device:
            num_clients, blocks = len(loop.clients), loop.blocks
            coefficients = torch.full_like(loop.flat.grad, 1.0 / num_clients)
            if self.block_coefficients and self.shared_coefficient == "paper" and blocks.shared is not None:
                for start, stop in blocks.shared.ranges:
                    coefficients[start:min(stop, coefficients.numel())] = 1.0 / (num_clients * blocks.num_blocks)
            self._coefficients = coefficients
        return self._coefficients

    def on_server_update(self, loop, update, received):
        c = self._server_control(loop)
        if self.rule == "spec":
            c.add_(received.sum("control") * self._coefficient_vector(loop))
        elif self.server_rounds == 0:
            c.copy_(received.mean("control"))
        else:
            c.add_(received.mean("control"), alpha=AUTHORS_SERVER_STEP)
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
