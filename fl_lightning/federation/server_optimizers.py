"""Server optimizers: the FedOpt view of the server step (Reddi et al. 2020; spec, "FedAdam").

Each round the server writes the pseudo-gradient g = −Δ̄ (the negated aggregated client
update) into ``.grad`` of the global parameters and calls ``step()`` of an ordinary
``torch.optim.Optimizer``. So server state (momentum, Adam moments) is optimizer state:
Lightning saves it in checkpoints and restores it on resume.

- FedAvg: ``SGD(lr=η_g)``: x ← x + η_g Δ̄.
- FedAvgM and FedBCGD's block momentum: ``SGD(lr=η_g, momentum=λ)``: torch keeps
  b ← λ b + g = −v, so x ← x + η_g v with v ← λ v + Δ̄ (spec, "FedAvgM"). The update is
  elementwise, hence per block exactly as the paper's v_(j) ← λ v_(j) + Δ̄_(j).
- FedAdam / FedYogi below follow Reddi et al.'s Algorithm 2 literally: no bias correction,
  m, v start at 0 and τ², τ the adaptivity constant (torch.optim.Adam bias-corrects instead).
"""
from __future__ import annotations

import torch
from torch.optim import Optimizer


class FedAdam(Optimizer):
    """m ← β1 m + (1−β1) g;  v ← β2 v + (1−β2) g²;  x ← x − lr · m / (√v + τ)."""

    def __init__(self, params, lr: float, betas: tuple[float, float], tau: float):
        """Every hyper-parameter is given: their defaults live in one place, fl_lightning.algorithms.FedAdam."""
        if not lr > 0 or not tau > 0 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"{type(self).__name__}: need lr > 0, tau > 0 and betas in [0, 1), got "
                             f"lr={lr}, tau={tau}, betas={betas}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), tau=tau))

    def second_moment(self, v: torch.Tensor, g2: torch.Tensor, beta2: float) -> None:
        v.mul_(beta2).add_(g2, alpha=1 - beta2)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.full_like(p, group["tau"] ** 2)
                m, v, g = state["exp_avg"], state["exp_avg_sq"], p.grad
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                self.second_moment(v, g * g, beta2)
                p.addcdiv_(m, v.sqrt().add_(group["tau"]), value=-group["lr"])
        return loss


class FedYogi(FedAdam):
    """As FedAdam, with Yogi's second moment: v ← v − (1−β2) g² sign(v − g²)."""

    def second_moment(self, v: torch.Tensor, g2: torch.Tensor, beta2: float) -> None:
        v.sub_(g2 * torch.sign(v - g2), alpha=1 - beta2)
