"""``--model.privacy.*``: the options of client-level DP, checked once, one line per mistake."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional, Union

from fl_lightning.errors import ConfigError
from fl_lightning.resolve import resolve_part
from fl_lightning.privacy.accountant import ACCOUNTANTS, SAMPLINGS
from fl_lightning.privacy.mechanism import MECHANISMS

# Algorithms whose clients send a second message that is not privatised (SCAFFOLD's and FedBCGD+'s Δc are:
# their own clip control_clip, noise and half of the budget, privacy.control): refused, one line each.
SECOND_UPLOAD = {"fedbcgd_plus_qsgd": "quantises its updates with QSGD, which can decode above the clip",
                 "feddyn": "keeps per-client state h_i that the server update reads (its correction is not clipped)",
                 "feddc": "uploads its drift h_i besides Δ",
                 "fednova": "uploads each client's step count τ_i, which the server uses to weight Δ",
                 "centralized": "pools every client's data: there is no client upload to clip"}


@dataclass
class PrivacyOptions:
    """Client-level DP (McMahan et al. 2018): clip each upload to L2 ≤ C, add N(0, σ²C²) to every sum.

    Args:
        noise_multiplier: z = σ, the noise std in units of the clip C (give it or target_epsilon).
        target_epsilon: calibrate z so that ε after trainer.max_epochs rounds is this (at delta).
        clip: C, the L2 bound of a client's whole upload (the initial C when adaptive).
        control_clip: C_c, the L2 bound of SCAFFOLD's / FedBCGD+'s control-variate upload Δc (default: clip).
        adaptive_quantile: γ: adapt C so that a fraction γ of uploads is unclipped (Andrew et al. 2021).
        clip_lr: η_C, the geometric step of adaptive clipping: C ← C·exp(−η_C(b̃ − γ)).
        count_noise: σ_b, std of the noise on the unclipped count (default cohort/20, the paper's).
        delta: δ of the reported ε (default min(1e-5, 1/K^1.1), K the population; must be < 1/K).
        epsilon_budget: stop before a round after which ε would exceed this.
        accountant: rdp, or pld (poisson sampling, or a fixed cohort of everyone: M = K).
        sampling: fixed (a cohort of M of K without replacement: replace-one, sensitivity 2C, accounted at z/2)
            or poisson (recommended: each client joins a round independently with q = M/K; add/remove-one,
            sensitivity C; every sum is divided by its expected count).
        mechanism: the noise, by its registered name (fl_lightning.privacy.mechanism.MECHANISMS): gaussian, or one
            of your own (``@MECHANISMS.register("name")``: its noise and the DpEvent the accountant composes).
    """

    noise_multiplier: Optional[float] = None
    target_epsilon: Optional[float] = None
    clip: float = 1.0
    control_clip: Optional[float] = None
    adaptive_quantile: Optional[float] = None
    clip_lr: float = 0.2
    count_noise: Optional[float] = None
    delta: Optional[float] = None
    epsilon_budget: Optional[float] = None
    accountant: str = "rdp"
    sampling: str = "fixed"
    mechanism: str = "gaussian"

    def __post_init__(self):
        if (self.noise_multiplier is None) == (self.target_epsilon is None):
            raise ConfigError("model.privacy.noise_multiplier", "give exactly one of noise_multiplier and "
                              "target_epsilon")
        for name in ("noise_multiplier", "target_epsilon", "clip", "control_clip", "clip_lr", "count_noise", "epsilon_budget"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigError(f"model.privacy.{name}", f"must be > 0, got {value}")
        if self.adaptive_quantile is not None and not 0.0 < self.adaptive_quantile < 1.0:
            raise ConfigError("model.privacy.adaptive_quantile", f"must be in (0, 1), got {self.adaptive_quantile}")
        if self.delta is not None and not 0.0 < self.delta < 1.0:
            raise ConfigError("model.privacy.delta", f"must be in (0, 1), got {self.delta}")
        if self.accountant not in ACCOUNTANTS:
            raise ConfigError("model.privacy.accountant", f"unknown {self.accountant!r}; choose one of "
                              f"{', '.join(ACCOUNTANTS)}")
        if self.mechanism not in MECHANISMS:
            raise ConfigError("model.privacy.mechanism", f"unknown {self.mechanism!r}; choose one of "
                              f"{', '.join(MECHANISMS)}")
        if self.sampling not in SAMPLINGS:
            raise ConfigError("model.privacy.sampling", f"unknown {self.sampling!r}; choose one of {', '.join(SAMPLINGS)}")

    def spec(self) -> dict:
        return dataclasses.asdict(self)


def resolve_privacy(privacy: Union[PrivacyOptions, dict, str, None]) -> Optional[PrivacyOptions]:
    """None/"none": off; a dict (a checkpoint's hparams, a config's mapping) becomes PrivacyOptions."""
    if isinstance(privacy, dict) and "class_path" not in privacy:
        unknown = sorted(set(privacy) - {f.name for f in dataclasses.fields(PrivacyOptions)})
        if unknown:
            raise ConfigError(f"model.privacy.{unknown[0]}", "unknown option; see fl_lightning.privacy.PrivacyOptions")
    return resolve_part(privacy, PrivacyOptions, "model.privacy",
                        "PrivacyOptions (--model.privacy.noise_multiplier Z ...)")


def check_algorithm(privacy: PrivacyOptions, algorithm_name: str, weighted_aggregation: bool, codec,
                    control_rule: str = "spec") -> None:
    """What client-level DP refuses to run with: one line each."""
    if algorithm_name in SECOND_UPLOAD:
        raise ConfigError("model.privacy", f"{algorithm_name} {SECOND_UPLOAD[algorithm_name]}; client-level DP "
                          "covers the model update and SCAFFOLD's / FedBCGD+'s Δc only — use fedavg, fedavgm, "
                          "fedprox, fedbcgd, scaffold or fedbcgd_plus")
    if control_rule != "spec":
        raise ConfigError("model.algorithm.rule", f"{control_rule} sets c from the mean over whoever reported, a "
                          "divisor the control-variate noise does not fix in advance; use rule spec with model.privacy")
    if privacy.sampling == "poisson" and codec is not None:
        raise ConfigError("model.privacy.sampling", "poisson divides every coordinate's noised sum by its expected "
                          "count; a codec chooses the uploaded coordinates from the data, so that count is unknown — "
                          "use sampling fixed, or no codec")
    if weighted_aggregation:
        raise ConfigError("model.weighted_aggregation", "with model.privacy the sum's sensitivity must be C: "
                          "weights n_i would scale it; set weighted_aggregation false")
    if codec is not None and not codec.within_norm:
        raise ConfigError("model.compression", f"{type(codec).__name__} can decode to a norm above the clip C "
                          "(rescaling, rounding up or error feedback), so the noise would not cover it; use topk "
                          "with error_feedback false, or none")
