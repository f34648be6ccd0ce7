"""Federated algorithms, one file per algorithm or family, found by name in ``REGISTRY``.

    from fl_lightning.algorithms import FedProx, get
    FederatedModule(net, algorithm=FedProx(mu=0.1))      # or algorithm="fedprox"
    fl-lightning fit --config X --model.algorithm fedprox --model.algorithm.mu 0.1
    fl-lightning algorithms [NAME]                       # the list, or one algorithm's options

Write your own: docs/write_your_own_algorithm.md.
"""
from fl_lightning.algorithms.base import (REGISTRY, Algorithm, Entry, algorithms_with, register, register_preset,
                                          unknown)
from fl_lightning.algorithms.centralized import Centralized
from fl_lightning.algorithms.fedavg import FedAdam, FedAvg, FedAvgM, FedYogi
from fl_lightning.algorithms.fedbcgd import FedBCGD, FedBCGDFreezing, FedBCGDPlus
from fl_lightning.algorithms.feddc import FedDC
from fl_lightning.algorithms.feddyn import FedDyn
from fl_lightning.algorithms.fednova import FedNova
from fl_lightning.algorithms.fedprox import FedProx
from fl_lightning.algorithms.scaffold import SCAFFOLD
from fl_lightning.algorithms import compressed  # noqa: F401  (registers topk, fedpaq, fedbcgd_qsgd, ...)
from fl_lightning.codecs import CODECS
from fl_lightning.compression import Codec
from fl_lightning.options import ALGORITHM_ORDER

REGISTRY.update({name: REGISTRY.pop(name) for name in ALGORITHM_ORDER if name in REGISTRY})  # the README's order


def get(name: str) -> Entry:
    """The registry entry for ``name``; one line naming the choices if there is none."""
    if name not in REGISTRY:
        raise unknown(name)
    return REGISTRY[name]


def create(name: str) -> tuple[Algorithm, "Codec | None"]:
    """The algorithm ``name`` with its default options, and the codec its name implies (or None)."""
    entry = get(name)
    return entry.algorithm(), (CODECS[entry.codec]() if entry.codec else None)


__all__ = ["REGISTRY", "Algorithm", "Centralized", "Entry", "FedAdam", "FedAvg", "FedAvgM", "FedBCGD",
           "FedBCGDFreezing", "FedBCGDPlus", "FedDC", "FedDyn", "FedNova", "FedProx", "FedYogi", "SCAFFOLD",
           "algorithms_with", "create", "get", "register", "register_preset"]
