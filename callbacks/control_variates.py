"""SCAFFOLD control variates, and their block-restricted form in FedBCGD+ (spec, "SCAFFOLD",
"FedBCGD+"; Karimireddy et al. 2020).

client_init   c_i from this client's memory (0 the first time); c downloaded (d floats)
client_step   g ← g − c_i + c                      (``apply="gradient"``, the spec's sign)
client_final  option I:  c_i⁺ = ∇f_i(x^r)
              option II: c_i⁺ = c_i − c + (x^r − y_T) / (T η)
              upload Δc = c_i⁺ − c_i over the same slices as Δ (FedBCGD+: block j and shared)
server        c ← c + (1/M) Σ Δc on block coordinates, (1/(M N)) Σ Δc on shared ones (Eq. 5);
              with every coordinate uploaded by all (SCAFFOLD) that is c ← c + (S/M)·mean Δc.

c_i is kept for every one of the M clients across rounds, on the CPU (M model-sized
vectors do not belong on an accelerator), and saved in checkpoints.

The authors' code differs (spec, "Authors' code differences"); reachable by options:
``apply="after_step"`` (y ← y − (c − c_i) after the optimizer step, no η; option II then
uses (x^r − y_T)/T) and ``damping`` (their 0.1 on the server's c update).

The spec does not say what a FedBCGD+ client keeps of c_i⁺ outside the slices it uploads.
``keep="all"`` (default, as the authors' code) keeps all of it, so the server's c drifts from
the mean of the c_i on coordinates whose changes went unreported; ``keep="uploaded"`` keeps
only the reported part, which keeps c_(j) = (1/M) Σ_i c_i,(j) on every block.
"""
from __future__ import annotations

from typing import Optional

import torch

from fl_lightning.callbacks.base import FLCallback
from fl_lightning.errors import ConfigError

OPTIONS = ("option1", "option2")  # c_i refresh: full local gradient, or SCAFFOLD's difference form
APPLY = ("gradient", "after_step")
KEEP = ("all", "uploaded")  # what of c_i⁺ a client keeps: all of it (authors' code), or what it reported


class ControlVariates(FLCallback):
    def __init__(self, option: str = "option2", block_coefficients: bool = False, apply: str = "gradient",
                 damping: float = 1.0, keep: str = "all"):
        if option not in OPTIONS:
            raise ConfigError("model.control_variate", f"unknown {option!r}; choose one of {', '.join(OPTIONS)}")
        if apply not in APPLY:
            raise ConfigError("model.control_apply", f"unknown {apply!r}; choose one of {', '.join(APPLY)}")
        self.option, self.apply, self.damping = option, apply, damping
        if keep not in KEEP:
            raise ConfigError("model.control_keep", f"unknown {keep!r}; choose one of {', '.join(KEEP)}")
        self.block_coefficients, self.keep = block_coefficients, keep
        self.client_controls: dict[int, torch.Tensor] = {}  # c_i, on the CPU
        self.server_control: Optional[torch.Tensor] = None  # c
        self._coefficients: Optional[torch.Tensor] = None

    # -- client ---------------------------------------------------------------------------
    def _server_control(self, loop) -> torch.Tensor:
        if self.server_control is None:
            self.server_control = torch.zeros_like(loop.flat.grad)
        self.server_control = self.server_control.to(loop.flat.grad.device)
        return self.server_control

    def on_client_start(self, loop, client):
        c = self._server_control(loop)
        client.download.add("control", 0, c)
        stored = self.client_controls.get(client.client_id)
        c_i = stored.to(c.device) if stored is not None else torch.zeros_like(c)
        client.info["control"] = c_i
        client.info["correction"] = c - c_i
        if self.option == "option1":
            loop.full_gradient(client)  # while the working model is still x^r

    def on_local_gradient(self, loop, client):
        if self.apply == "gradient":
            loop.flat.grad.add_(client.info["correction"])

    def on_local_step_end(self, loop, client):
        if self.apply == "after_step":
            loop.flat.params.sub_(client.info["correction"])

    def on_client_end(self, loop, client):
        c_i, c = client.info["control"], self._server_control(loop)
        if self.option == "option1":
            new = loop.full_gradient(client).clone()
        else:
            d = loop.flat.num_params
            step = client.steps * (client_lr(loop) if self.apply == "gradient" else 1.0)
            new = c_i - c + (loop.global_vector[:d] - loop.flat.vector[:d]) / step
        delta = new - c_i
        kept = c_i.clone() if self.keep == "uploaded" else new
        for start, stop in client.upload_ranges:
            stop = min(stop, delta.numel())  # control variates cover parameters, not buffers
            if start < stop:
                client.upload.add("control", start, delta[start:stop])
                kept[start:stop] = new[start:stop]
        self.client_controls[client.client_id] = kept.cpu()

    # -- server ---------------------------------------------------------------------------
    def _coefficient_vector(self, loop) -> torch.Tensor:
        """1/M everywhere; 1/(M N) on the shared block when ``block_coefficients`` (Eq. 5)."""
        if self._coefficients is None or self._coefficients.device != loop.flat.grad.device:
            num_clients, blocks = len(loop.clients), loop.blocks
            coefficients = torch.full_like(loop.flat.grad, 1.0 / num_clients)
            if self.block_coefficients and blocks.shared is not None:
                for start, stop in blocks.shared.ranges:
                    coefficients[start:min(stop, coefficients.numel())] = 1.0 / (num_clients * blocks.num_blocks)
            self._coefficients = coefficients
        return self._coefficients

    def on_server_update(self, loop, update, received):
        c = self._server_control(loop)
        c.add_(received.sum("control") * self._coefficient_vector(loop), alpha=self.damping)

    def state_dict(self) -> dict:
        return {"option": self.option, "apply": self.apply, "damping": self.damping, "keep": self.keep,
                "client_controls": self.client_controls, "server_control": self.server_control}

    def load_state_dict(self, state_dict: dict) -> None:
        self.option, self.apply, self.damping = state_dict["option"], state_dict["apply"], state_dict["damping"]
        self.keep = state_dict["keep"]
        self.client_controls = dict(state_dict["client_controls"])
        self.server_control = state_dict["server_control"]


def client_lr(loop) -> float:
    return loop.optimizer.param_groups[0]["lr"]
