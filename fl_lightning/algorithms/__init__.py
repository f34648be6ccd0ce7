"""Federated algorithms, one file per algorithm or family, found by name in ``REGISTRY``.

    from fl_lightning.algorithms import FedProx, get
    FederatedModule(net, algorithm=FedProx(mu=0.1))      # or algorithm="fedprox"
    fl-lightning fit --config X --model.algorithm fedprox --model.algorithm.mu 0.1
    fl-lightning algorithms [NAME]                       # the list, or one algorithm's options

Write your own: docs/write_your_own_algorithm.md.
"""
from fl_lightning.algorithms.base import (REGISTRY, Algorithm, Entry, algorithms_with, register, register_preset,
                                          unknown)
# The order of these imports is the order of registration: how `fl-lightning algorithms`, docs/algorithms.md's
# table and every plot's colours list the algorithms. A new algorithm is one file plus one line here.
from fl_lightning.algorithms.fedavg import FedAdam, FedAvg, FedAvgM, FedYogi  # isort: skip
from fl_lightning.algorithms.fedprox import FedProx  # isort: skip
from fl_lightning.algorithms.scaffold import SCAFFOLD  # isort: skip
from fl_lightning.algorithms.feddc import FedDC  # isort: skip
from fl_lightning.algorithms.feddyn import FedDyn  # isort: skip
from fl_lightning.algorithms.fednova import FedNova  # isort: skip
from fl_lightning.algorithms.fedbcgd import FedBCGD, FedBCGDFreezing, FedBCGDPlus  # isort: skip
from fl_lightning.algorithms import compressed  # noqa: F401,E402  isort: skip (topk, fedpaq, fedbcgd_qsgd, ...)
from fl_lightning.algorithms.fedavg_ft import FedAvgFT  # isort: skip (personalised FL)
from fl_lightning.algorithms.fedper import FedPer  # isort: skip
from fl_lightning.algorithms.fedbn import FedBN  # isort: skip
from fl_lightning.algorithms.ditto import Ditto  # isort: skip
from fl_lightning.algorithms.apfl import APFL  # isort: skip
from fl_lightning.algorithms.fedrep import FedRep  # isort: skip
from fl_lightning.algorithms.fedbcgd_personal import FedBCGDPersonal  # isort: skip
from fl_lightning.algorithms.local import Local  # isort: skip
from fl_lightning.algorithms.centralized import Centralized  # isort: skip
from fl_lightning.compression import CODECS  # noqa: E402
from fl_lightning.compression.codecs import Codec  # noqa: E402


def get(name: str) -> Entry:
    """The registry entry for ``name``; one line naming the choices if there is none."""
    if name not in REGISTRY:
        raise unknown(name)
    return REGISTRY[name]


DEFAULT_ALGORITHM = "fedavg"  # what model.algorithm left out (None) means


def default_spec() -> dict:
    """The default algorithm as a fit records it (``Algorithm.spec``): a run that leaves ``model.algorithm`` out is
    the run that names it (one identity, fl_lightning.runs.identity; its checkpoint resumes)."""
    return create(DEFAULT_ALGORITHM)[0].spec()


def create(name: str) -> tuple[Algorithm, "Codec | None"]:
    """The algorithm ``name`` with its default options, and the codec its name implies (or None)."""
    entry = get(name)
    return entry.algorithm(), (CODECS[entry.codec]() if entry.codec else None)


__all__ = ["APFL", "REGISTRY", "Algorithm", "Centralized", "Ditto", "Entry", "FedAdam", "FedAvg", "FedAvgFT", "FedAvgM",
           "FedBCGD", "FedBCGDFreezing", "FedBCGDPersonal", "FedBCGDPlus", "FedBN", "FedDC", "FedDyn", "FedNova",
           "FedPer", "FedProx", "FedRep", "FedYogi", "Local", "SCAFFOLD",
           "DEFAULT_ALGORITHM", "algorithms_with", "create", "default_spec", "get", "register", "register_preset"]
