"""Lightning's two namespaces: ``pytorch_lightning`` and ``lightning.pytorch`` (the ``lightning`` package) ship
the same classes twice, and an object of one is not an instance of the other's. fl-lightning runs its Trainer
on ``pytorch_lightning``; a user's network is recognised by what it is, from either package (callbacks and
loggers of ``lightning.pytorch`` on its Trainer are called by hook name and work as they are). The one mix that
cannot work: a ``lightning.pytorch.Trainer`` fitting ``FederatedModule`` (a ``pytorch_lightning`` module):
Lightning refuses it; fit with ``pytorch_lightning.Trainer`` (docs/lightning_namespaces.md)."""
from __future__ import annotations

import importlib
import sys
from typing import Optional

PACKAGES = ("pytorch_lightning", "lightning.pytorch")


def _package(name: str):
    """The package if it is imported: an object of ``lightning.pytorch`` implies it is (importing it here
    would only add its logging handlers to a process that does not use it)."""
    if name == "pytorch_lightning" and name not in sys.modules:
        importlib.import_module(name)
    return sys.modules.get(name)


def bases(kind: str) -> tuple[type, ...]:
    """``kind`` (LightningModule, LightningDataModule, Callback) from each importable namespace."""
    found = []
    for name in PACKAGES:
        package = _package(name)
        if package is not None and hasattr(package, kind):
            found.append(getattr(package, kind))
    return tuple(found)


def is_lightning_module(obj) -> bool:
    return isinstance(obj, bases("LightningModule"))


def lightning_base(obj) -> Optional[type]:
    """The LightningModule class ``obj`` derives from (either namespace's)."""
    return next((base for base in bases("LightningModule") if isinstance(obj, base)), None)
