"""The Gaussian mechanism on the server's sums, its noise drawn from the run's seed streams.

Noise of round r comes from its own stream ``derive_seed(r, NOISE)`` (and ``COUNT_NOISE`` for the
adaptive clip's count), drawn on the CPU, so it is the same on every rank under DDP, on every device,
and after a resume (as every other draw in fl_lightning.federation.seeding). The "generator state" a checkpoint
needs is therefore just (run seed, round) — both are already in it.

This makes the noise reproducible by whoever knows the run seed: right for research, wrong for a
deployment, where the server must draw it from a secure source.

Sensitivity. The server releases, per coordinate k, S_k = Σ_{i uploads k} u_i[k] with ‖u_i‖ ≤ C over
everything client i uploads. Adding or removing one client (Poisson sampling) changes the vector (S_k)_k
by its u_i alone: L2 norm ≤ C. Replacing one client by another (a fixed cohort) changes it by u_i − u_i′:
up to 2C (two opposite uploads at the clip). Either way it holds whether u_i covers the whole model
(FedAvg) or only block j + the shared block (FedBCGD). Every coordinate's sum — every block's — gets
N(0, z²C²), and the accountant is given z / (sensitivity / C) (accountant.SENSITIVITY): noising only some
blocks would leave the others' sums with no noise at all, and block sums share no noise.

Normalisation. The noised sum of coordinate k is divided by n_k, the number of clients the plan of the
round assigned to it (all S for FedAvg and the shared block; the ⌊S/N⌋ or ⌈S/N⌉ clients of block j):
fixed before any client trains, so not data dependent. Clients that drop out still count in n_k
(their zero contribution shrinks the mean) and the noise stays σC — a dropout never weakens it. Under
Poisson sampling n_k is the expected count instead (expected_counts): qK for the whole model and the shared
block, qK/N for block j (each joining client draws its block uniformly); the realised count would tell who
joined, which the noise does not cover.
"""
from __future__ import annotations

import dp_accounting
import torch

from fl_lightning.federation.seeding import derive_seed, generator
from fl_lightning.registry import Registry

NOISE = 0xD1F0  # the update's noise, per round
COUNT_NOISE = 0xD1F1  # the adaptive clip's count noise, per round
CONTROL_NOISE = 0xD1F2  # the control variates' noise, per round (privacy.control)
MECHANISMS = Registry("privacy mechanism")  # model.privacy.mechanism: name → Mechanism class (``@MECHANISMS.register``)


def gaussian(size: int, std: float, round_idx: int, purpose: int = NOISE) -> torch.Tensor:
    """N(0, std²)^size from round ``round_idx``'s ``purpose`` stream (CPU, float64)."""
    rng = generator(derive_seed(round_idx, purpose))
    return torch.randn(size, generator=rng, dtype=torch.float64) * std


class Mechanism:
    """What the server adds to a released sum, and what the accountant composes for it. The clip bounds each
    upload's L2 norm, so the sensitivity Δ of a sum is an L2 one (SENSITIVITY·C, fl_lightning.privacy.accountant)."""

    def noise(self, size: int, std: float, round_idx: int, purpose: int = NOISE) -> torch.Tensor:
        """``size`` draws of std ``std`` from round ``round_idx``'s ``purpose`` stream (CPU, float64)."""
        raise NotImplementedError

    def dp_event(self, multiplier: float) -> dp_accounting.DpEvent:
        """One release at noise multiplier ``multiplier`` = std / Δ, before sampling's amplification."""
        raise NotImplementedError


@MECHANISMS.register("gaussian")
class GaussianMechanism(Mechanism):
    """N(0, std²) per coordinate (the Gaussian mechanism of McMahan et al. 2018)."""

    def noise(self, size: int, std: float, round_idx: int, purpose: int = NOISE) -> torch.Tensor:
        return gaussian(size, std, round_idx, purpose)

    def dp_event(self, multiplier: float) -> dp_accounting.DpEvent:
        return dp_accounting.GaussianDpEvent(multiplier)


def planned_counts(clients, size: int) -> torch.Tensor:
    """n_k per coordinate of [0, size): how many of the round's planned clients upload it."""
    counts = torch.zeros(size, dtype=torch.float64)
    for task in clients:
        for start, stop in task.upload_ranges:
            counts[start:min(stop, size)] += 1
    return counts


def expected_counts(choices, cohort: float, size: int) -> torch.Tensor:
    """E[n_k] under Poisson sampling: the expected cohort qK times the probability that a joining client uploads
    coordinate k, its upload drawn uniformly from ``choices`` (lists of ranges; None: the whole model)."""
    if choices is None:
        return torch.full((size,), cohort, dtype=torch.float64)
    counts = torch.zeros(size, dtype=torch.float64)
    for ranges in choices:
        for start, stop in ranges:
            counts[start:min(stop, size)] += cohort / len(choices)
    return counts


def noised_mean(total: torch.Tensor, counts: torch.Tensor, std: float, round_idx: int,
                mechanism: Mechanism = GaussianMechanism()) -> torch.Tensor:
    """(Σ u_i + noise of std ``std``) / n_k per coordinate (0 where n_k = 0)."""
    noised = total.double().cpu() + mechanism.noise(total.numel(), std, round_idx)
    return torch.where(counts > 0, noised / counts.clamp_min(1), torch.zeros_like(noised))
