"""Clipping a client's whole upload to L2 ≤ C, fixed or adaptive (Andrew et al., NeurIPS 2021).

The clip acts on everything the client sends on the "delta" channel, as one vector: FedAvg's Δ,
FedBCGD's block Δ_(j) together with the shared block Δ_s. It runs in ``on_client_end``, before any
codec's ``on_upload`` encodes the upload, so a codec sees the clipped vector.

Adaptive clipping (Andrew et al. 2021, Alg. 1 with geometric update): each client also reports
b_i = 1[‖Δ_i‖ ≤ C]; the server releases the noised, centred count Σ(b_i − ½) + N(0, σ_b²) (one
client changes it by ½), b̃ = (that + M/2)/M, and sets C ← C·exp(−η_C (b̃ − γ)). The two Gaussian
releases of a round together are one Gaussian mechanism with noise multiplier z when the update's
own multiplier is z_Δ = (z⁻² − (2σ_b)⁻²)^(−½) (their Thm. 1); the accountant is given z, divided by two for a
fixed cohort (replace-one doubles both releases' sensitivities, C → 2C and ½ → 1: accountant.SENSITIVITY).
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from fl_lightning.federation.messages import Payload
from fl_lightning.errors import ConfigError


def clip_upload(upload: Payload, bound: float, channel: str = "delta") -> tuple[float, bool]:
    """Scales every ``channel`` part of ``upload`` by min(1, C/‖u‖) (u: all of them as one vector); returns
    (‖u‖ before clipping, whether it was clipped). A non-finite upload becomes zero (counted as clipped):
    dropping it, as the loop drops NaN updates, would make the cohort depend on the data."""
    parts = [p for p in upload.parts if p.channel == channel]
    for part in parts:
        if not isinstance(part.message, torch.Tensor):
            raise ConfigError("model.privacy", "an upload was encoded before the clip; the privacy callback must "
                              "run before the codec")
    if not parts:
        return 0.0, False
    norm = float(torch.sqrt(sum(p.message.double().pow(2).sum() for p in parts)))
    if not math.isfinite(norm):
        for part in parts:
            part.message = torch.zeros_like(part.message)
        return norm, True
    if norm <= bound:
        return norm, False
    scale = bound / norm
    for part in parts:
        part.message = part.message * scale
    return norm, True


def update_noise_multiplier(noise_multiplier: float, count_noise: Optional[float], messages: int = 1) -> float:
    """z_m, the noise multiplier of each of ``messages`` equal shares (Δ; Δ and Δc), so that they and the
    count (σ_b; None without adaptive clipping) together spend z: Σ z_m⁻² + (2σ_b)⁻² = z⁻² (Andrew et al.,
    Thm. 1; a Gaussian release of sensitivity C_m and std z_m·C_m, joined, is one of multiplier z)."""
    rest = noise_multiplier ** -2 - (0.0 if count_noise is None else (2 * count_noise) ** -2)
    if not rest > 0:
        raise ConfigError("model.privacy.count_noise", f"σ_b = {count_noise:g} leaves no budget for the update at "
                          f"z = {noise_multiplier:g}: needs σ_b > z/2 = {noise_multiplier / 2:g}; raise it")
    return (rest / messages) ** -0.5


def adapted_clip(clip: float, noised_centred_count: float, cohort: int, quantile: float, clip_lr: float) -> float:
    """C ← C·exp(−η_C(b̃ − γ)), b̃ the noised fraction of unclipped uploads."""
    unclipped = (noised_centred_count + cohort / 2) / cohort
    return clip * math.exp(-clip_lr * (unclipped - quantile))
