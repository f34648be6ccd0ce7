"""``NoisedControlSum``: the Gaussian noise on SCAFFOLD's / FedBCGD+'s control-variate sum.

Each client's Δc is clipped to ‖Δc‖ ≤ C_c by ClientDP (over everything it uploads on the "control" channel:
the whole model for SCAFFOLD, block j + the shared block for FedBCGD+). The server releases Σ Δc_i only
through c ← c + Σ Δc_i / K (rule ``spec``: a fixed divisor), so noising that sum once, N(0, z_c²C_c²) on
every coordinate, privatises it. Budget split: Δ and Δc are two Gaussian releases of one client, with
multipliers z_Δ and z_c; together they are one Gaussian mechanism of multiplier z when
z_Δ⁻² + z_c⁻² (+ (2σ_b)⁻² with adaptive clipping) = z⁻², so each gets half: z_Δ = z_c = √2·z without
adaptive clipping. The accountant is given z, as for the model update alone (z/2 for a fixed cohort, whose
replace-one relation doubles both sensitivities).

It must run before ControlVariates reads the sum, so FederatedModule.configure_callbacks puts it first.
Its noise has its own per-round stream (``CONTROL_NOISE``): exact resume, the same on every rank.
"""
from __future__ import annotations

from fl_lightning.callbacks.base import FLCallback
from fl_lightning.privacy.mechanism import CONTROL_NOISE


class NoisedControlSum(FLCallback):
    """Adds N(0, (z_c·C_c)²) to the received control-variate sum, before the algorithm's server hooks.

    Args:
        dp: the run's ClientDP (z_c and C_c).
    """

    def __init__(self, dp):
        self.dp = dp

    def on_server_update(self, server):
        total = server.received.sum("control")
        std = self.dp.update_noise_multiplier * self.dp.control_clip
        total.add_(self.dp.mechanism.noise(total.numel(), std, server.round, CONTROL_NOISE).to(total))
