"""Algorithm presets: a name → the FLCallbacks and the server optimizer that make it (spec, one section each).

FedAvg is the bare ``FederatedLoop`` with ``SGD(lr=η_g)`` as server optimizer; every other
algorithm adds callbacks and/or changes the server optimizer. Users can compose their own
by adding FLCallbacks to ``trainer.callbacks`` and passing ``server_optimizer``.

Options left at ``None`` take the preset's default (``resolve``); the resolved values are
one typed ``Settings`` object, the single place the rest of the code reads them from.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from fl_lightning.callbacks import (BlockUploadMask, CompressedUpload, ControlVariates, DriftCorrection, FLCallback,
                                    PooledTraining, Proximal, VarianceReduction)
from fl_lightning.callbacks.compression import METHODS as COMPRESSION_METHODS
from fl_lightning.errors import ConfigError
from fl_lightning.server_optimizers import FedAdam, FedYogi


@dataclass(frozen=True)
class Settings:
    """The options an algorithm reads, after preset defaults are filled in."""

    server_lr: float
    server_momentum: float
    grad_clip: Optional[float]
    control_variate: str = "option2"
    control_keep: str = "uploaded"
    shared_control_coefficient: str = "mean"
    control_rule: str = "spec"
    variance_reduction: bool = True
    fedprox_mu: float = 0.01
    feddc_alpha: float = 0.01
    compression: Optional[str] = None  # topk | randk | qsgd | None
    compression_k: float = 0.1
    qsgd_levels: int = 255
    qsgd_bucket_size: Optional[int] = 512
    error_feedback: bool = False


@dataclass(frozen=True)
class Algorithm:
    summary: str  # one line, shown by `fl-lightning fit --help` and in the README
    upload: str  # floats uploaded per client and round (d = model size, N = blocks)
    callbacks: Callable[[Settings], list[FLCallback]]
    server: str = "sgd"  # sgd (x + η_g Δ̄) | momentum (SGD with momentum λ) | fedadam | fedyogi
    uses_blocks: bool = False
    compression: Optional[str] = None  # the preset's model.compression


def _controls(s: Settings, blocks: bool) -> ControlVariates:
    return ControlVariates(s.control_variate, s.control_keep, s.shared_control_coefficient if blocks else "mean",
                           block_coefficients=blocks, rule=s.control_rule)


def _fedbcgd_plus(s: Settings) -> list[FLCallback]:
    return [BlockUploadMask(), _controls(s, blocks=True)] + ([VarianceReduction()] if s.variance_reduction else [])


ALGORITHMS: dict[str, Algorithm] = {
    "fedavg": Algorithm("FedAvg: mean of the clients' updates", "d", lambda s: []),
    "fedavgm": Algorithm("FedAvg with server momentum λ (model.server_momentum)", "d", lambda s: [], "momentum"),
    "fedadam": Algorithm("FedAvg with an Adam server step (Reddi et al. 2020)", "d", lambda s: [], "fedadam"),
    "fedyogi": Algorithm("FedAvg with a Yogi server step (Reddi et al. 2020)", "d", lambda s: [], "fedyogi"),
    "fedprox": Algorithm("FedAvg with the proximal term (μ/2)‖y − x‖² (model.fedprox_mu)", "d",
                         lambda s: [Proximal(s.fedprox_mu)]),
    "scaffold": Algorithm("SCAFFOLD: control variates c_i, c (option II)", "2d", lambda s: [_controls(s, blocks=False)]),
    "feddc": Algorithm("FedDC: local drift h_i and gradient correction (model.feddc_alpha)", "d",
                       lambda s: [DriftCorrection(s.feddc_alpha)]),
    "fedbcgd": Algorithm("FedBCGD: train all, upload one block + shared; block momentum", "|x_j| + |x_s| ≈ d/N",
                         lambda s: [BlockUploadMask()], "momentum", uses_blocks=True),
    "fedbcgd_freezing": Algorithm("FedBCGD ablation: train only the own block + shared", "≈ d/N",
                                  lambda s: [BlockUploadMask(freeze_other_blocks=True)], "momentum", uses_blocks=True),
    "fedbcgd_plus": Algorithm("FedBCGD+: FedBCGD with block control variates and SVRG", "≈ 2d/N", _fedbcgd_plus,
                              "momentum", uses_blocks=True),
    "topk": Algorithm("FedAvg uploading its k largest entries, with error feedback (Aji & Heafield 2017; model.compression_k)",
                      "2k", lambda s: [], compression="topk"),
    "fedpaq": Algorithm("FedAvg with QSGD quantised uploads (Reisizadeh et al. 2020; model.qsgd_levels)",
                        "≈ d(1 + ⌈log₂(s+1)⌉)/32", lambda s: [], compression="qsgd"),
    "fedbcgd_qsgd": Algorithm("FedBCGD with its uploaded blocks QSGD quantised (paper Table 6)", "≈ FedBCGD·9/32",
                              lambda s: [BlockUploadMask()], "momentum", uses_blocks=True, compression="qsgd"),
    "fedbcgd_plus_qsgd": Algorithm("FedBCGD+ with its uploaded blocks (Δ and Δc) QSGD quantised (paper Table 6)",
                                   "≈ FedBCGD+·9/32", _fedbcgd_plus, "momentum", uses_blocks=True, compression="qsgd"),
    "centralized": Algorithm("Centralised SGD on the pooled data, one pass per round (reference row)", "0",
                             lambda s: [PooledTraining()]),
}
BLOCK_ALGORITHMS = {name for name, algorithm in ALGORITHMS.items() if algorithm.uses_blocks}


def check_algorithm(name: str) -> None:
    if name not in ALGORITHMS:
        raise ConfigError("model.algorithm", f"unknown algorithm {name!r}; choose one of {', '.join(ALGORITHMS)}")


def _choice(field: str, value: str, choices: tuple) -> str:
    if value not in choices:
        raise ConfigError(f"model.{field}", f"unknown {value!r}; choose one of {', '.join(choices)}")
    return value


def check_ranges(hp) -> None:
    """Options that are wrong whatever the algorithm: one line each."""
    at_least_one = ("clients_per_round", "local_epochs", "batch_size", "test_every_n_rounds", "qsgd_levels",
                    "qsgd_bucket_size")
    for field in at_least_one:
        if hp.get(field) is not None and hp[field] < 1:
            raise ConfigError(f"model.{field}", f"must be ≥ 1, got {hp[field]}")
    for field in ("lr", "lr_decay", "max_upload_d", "compression_k", "eval_every_d"):
        if hp.get(field) is not None and not hp[field] > 0:
            raise ConfigError(f"model.{field}", f"must be > 0, got {hp[field]}")
    for field in ("weight_decay", "fedprox_mu", "feddc_alpha"):
        if hp[field] < 0:
            raise ConfigError(f"model.{field}", f"must be ≥ 0, got {hp[field]}")
    if hp["qsgd_levels"] > 16383:
        raise ConfigError("model.qsgd_levels", f"must be ≤ 16383 (15-bit codes), got {hp['qsgd_levels']}")
    if not 0.0 <= hp["client_dropout"] < 1.0:
        raise ConfigError("model.client_dropout", f"must be in [0, 1), got {hp['client_dropout']}")


def _compression(name: str, hp) -> Optional[str]:
    """The preset's compression unless model.compression says otherwise (``none`` switches it off)."""
    chosen = hp["compression"] if hp["compression"] is not None else ALGORITHMS[name].compression
    if chosen is not None and chosen != "none":
        _choice("compression", chosen, COMPRESSION_METHODS + ("none",))
    if chosen is not None and name == "centralized":
        raise ConfigError("model.compression", "centralized SGD sends nothing to compress; leave it unset")
    return None if chosen == "none" else chosen


def resolve(name: str, hp) -> Settings:
    """Fills the options left at None with the preset's defaults and checks them (spec, "FedBCGD+")."""
    check_algorithm(name)
    check_ranges(hp)
    choices = ControlVariates.CHOICES
    rule = _choice("control_rule", hp["control_rule"], choices["rule"])
    authors = rule == "authors"
    if authors and name not in ("fedbcgd_plus", "scaffold"):
        raise ConfigError("model.control_rule", f"'authors' is a rule of fedbcgd_plus and scaffold, not {name}")
    if authors and hp["control_variate"] not in (None, "option2"):
        raise ConfigError("model.control_variate", "the authors' rule has its own refresh (option II without η); "
                          "leave control_variate unset")
    momentum = hp["server_momentum"]
    if momentum is not None and not 0.0 <= momentum < 1.0:
        raise ConfigError("model.server_momentum", f"must be in [0, 1), got {momentum}")
    if ALGORITHMS[name].server != "momentum":
        momentum = 0.0  # read by the momentum presets only (fedavgm, fedbcgd*)
    elif momentum is None:
        momentum = 0.45 if authors else 0.8
    server_lr = hp["server_lr"]
    if server_lr is None:
        server_lr = 0.01 if ALGORITHMS[name].server in ("fedadam", "fedyogi") else 1.0
    if not server_lr > 0:
        raise ConfigError("model.server_lr", f"must be > 0, got {server_lr}")
    if hp["server_optimizer"] is not None and (hp["server_lr"] is not None or hp["server_momentum"] is not None):
        raise ConfigError("model.server_optimizer", "sets the server step itself: give its lr/momentum in its "
                          "init_args and leave model.server_lr and model.server_momentum unset")
    if name == "centralized" and (server_lr != 1.0 or hp["weighted_aggregation"]):
        raise ConfigError("model.server_lr", "centralized SGD takes the pooled model as it is: leave server_lr "
                          "unset and weighted_aggregation off")
    grad_clip = hp["grad_clip"] if hp["grad_clip"] is not None else (10.0 if authors else None)
    variance_reduction = hp["variance_reduction"]
    compression = _compression(name, hp)
    error_feedback = hp["error_feedback"] if hp["error_feedback"] is not None else compression == "topk"
    return Settings(
        server_lr=server_lr, server_momentum=momentum, grad_clip=grad_clip,
        control_variate=_choice("control_variate", hp["control_variate"] or "option2", choices["option"]),
        control_keep=_choice("control_keep", hp["control_keep"] or ("all" if authors else "uploaded"), choices["keep"]),
        shared_control_coefficient=_choice("shared_control_coefficient", hp["shared_control_coefficient"],
                                           choices["shared_coefficient"]),
        control_rule=rule,
        variance_reduction=(not authors) if variance_reduction is None else variance_reduction,
        fedprox_mu=hp["fedprox_mu"], feddc_alpha=hp["feddc_alpha"], compression=compression,
        compression_k=hp["compression_k"], qsgd_levels=hp["qsgd_levels"], qsgd_bucket_size=hp["qsgd_bucket_size"],
        error_feedback=error_feedback)


def build_callbacks(name: str, s: Settings) -> list[FLCallback]:
    """The preset's callbacks; compression last, on what they upload."""
    compression = [CompressedUpload(s.compression, s.compression_k, s.qsgd_levels, s.qsgd_bucket_size,
                                    s.error_feedback)] if s.compression else []
    return ALGORITHMS[name].callbacks(s) + compression


def build_server_optimizer(name: str, settings: Settings, params: list[torch.Tensor]) -> torch.optim.Optimizer:
    """The preset's server optimizer over the global parameters (fl_lightning.server_optimizers)."""
    kind = ALGORITHMS[name].server
    if kind == "fedadam":
        return FedAdam(params, lr=settings.server_lr)
    if kind == "fedyogi":
        return FedYogi(params, lr=settings.server_lr)
    return torch.optim.SGD(params, lr=settings.server_lr, momentum=settings.server_momentum)


def algorithm_help() -> str:
    """One line per preset, for the ``algorithm`` option's help."""
    return "; ".join(f"{name}: {algorithm.summary}" for name, algorithm in ALGORITHMS.items())
