"""Server momentum (spec, "FedAvgM" and "FedBCGD"): v ← λ v + Δ̄;  x ← x + η_g v.

The update is elementwise, so when Δ̄ is assembled block by block (FedBCGD) this is
exactly the paper's per-block momentum v_(j) ← λ v_(j) + Δ̄_(j), v_s ← λ v_s + Δ̄_s.
"""
from __future__ import annotations

from typing import Optional

import torch

from fl_lightning.callbacks.base import FLCallback


class ServerMomentum(FLCallback):
    def __init__(self, momentum: float = 0.9):
        if not 0.0 <= momentum < 1.0:
            from fl_lightning.errors import ConfigError

            raise ConfigError("model.server_momentum", f"must be in [0, 1), got {momentum}")
        self.momentum = momentum
        self.velocity: Optional[torch.Tensor] = None

    def on_server_update(self, loop, update, received):
        if self.velocity is None:
            self.velocity = torch.zeros_like(update)
        self.velocity = self.velocity.to(update.device)
        self.velocity.mul_(self.momentum).add_(update)
        update.copy_(self.velocity)

    def state_dict(self) -> dict:
        return {"momentum": self.momentum, "velocity": self.velocity}

    def load_state_dict(self, state_dict: dict) -> None:
        self.momentum = state_dict["momentum"]
        self.velocity = state_dict["velocity"]
