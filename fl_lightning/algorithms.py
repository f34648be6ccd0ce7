"""Algorithm presets: a name → the FLCallbacks that make it (spec, one section each).

FedAvg is the bare ``FederatedLoop``; every other algorithm adds callbacks. Users can
compose their own by adding FLCallbacks to ``trainer.callbacks`` instead.
"""
from __future__ import annotations

from typing import Callable

from fl_lightning.callbacks import FLCallback, ServerMomentum
from fl_lightning.errors import ConfigError

ALGORITHMS: dict[str, Callable[[dict], list[FLCallback]]] = {
    "fedavg": lambda hp: [],
    "fedavgm": lambda hp: [ServerMomentum(hp["server_momentum"])],
}


def build_algorithm(name: str, hparams: dict) -> list[FLCallback]:
    check_algorithm(name)
    return ALGORITHMS[name](hparams)


def check_algorithm(name: str) -> None:
    if name not in ALGORITHMS:
        raise ConfigError("model.algorithm", f"unknown algorithm {name!r}; choose one of {', '.join(sorted(ALGORITHMS))}")
