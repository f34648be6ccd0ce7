"""Algorithm presets: a name → the FLCallbacks that make it (spec, one section each).

FedAvg is the bare ``FederatedLoop``; every other algorithm adds callbacks. Users can
compose their own by adding FLCallbacks to ``trainer.callbacks`` instead.
"""
from __future__ import annotations

from typing import Callable

from fl_lightning.callbacks import BlockUploadMask, ControlVariates, FLCallback, ServerMomentum, VarianceReduction
from fl_lightning.errors import ConfigError


def _momentum(hp) -> list[FLCallback]:
    return [ServerMomentum(hp["server_momentum"])] if hp["server_momentum"] > 0 else []


def _controls(hp, default_option: str, block_coefficients: bool) -> ControlVariates:
    return ControlVariates(hp["control_variate"] or default_option, block_coefficients, hp["control_apply"],
                           hp["control_damping"], hp["control_keep"])


def _fedbcgd_plus(hp) -> list[FLCallback]:
    callbacks = [BlockUploadMask(), *_momentum(hp), _controls(hp, "option1", block_coefficients=True)]
    return callbacks + ([VarianceReduction()] if hp["variance_reduction"] else [])


ALGORITHMS: dict[str, Callable[[dict], list[FLCallback]]] = {
    "fedavg": lambda hp: [],
    "fedavgm": _momentum,
    "scaffold": lambda hp: [_controls(hp, "option2", block_coefficients=False)],
    "fedbcgd": lambda hp: [BlockUploadMask(), *_momentum(hp)],
    "fedbcgd_freezing": lambda hp: [BlockUploadMask(freeze_other_blocks=True), *_momentum(hp)],
    "fedbcgd_plus": _fedbcgd_plus,
}
BLOCK_ALGORITHMS = {"fedbcgd", "fedbcgd_freezing", "fedbcgd_plus"}


def build_algorithm(name: str, hparams: dict) -> list[FLCallback]:
    check_algorithm(name)
    return ALGORITHMS[name](hparams)


def check_algorithm(name: str) -> None:
    if name not in ALGORITHMS:
        raise ConfigError("model.algorithm", f"unknown algorithm {name!r}; choose one of {', '.join(sorted(ALGORITHMS))}")
