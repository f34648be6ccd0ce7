"""Lightning's two namespaces: ``pytorch_lightning`` and ``lightning.pytorch`` (the ``lightning`` package) ship
the same classes twice, and an object of one is not an instance of the other's. fl-lightning runs its Trainer
on ``pytorch_lightning``; a user's network is recognised by what it is, from either package (callbacks and
loggers of ``lightning.pytorch`` on its Trainer are called by hook name and work as they are). The one mix that
cannot work: a ``lightning.pytorch.Trainer`` fitting ``FederatedModule`` (a ``pytorch_lightning`` module):
Lightning refuses it with a TypeError before any of fl-lightning's code runs; a script that does not catch it
gets one line saying what to change and exit code 2 instead of the traceback (``explain_other_trainer``)
(docs/lightning_namespaces.md)."""
from __future__ import annotations

import importlib
import os
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


_LIGHTNING_TYPES: dict[type, bool] = {}  # type → whether it is a LightningModule of either namespace


def is_lightning_module(obj) -> bool:
    """Asked once per class (the loss asks it every local step): a class's answer cannot change later, as a
    namespace imported afterwards has no subclasses among the classes made before it."""
    kind = type(obj)
    answer = _LIGHTNING_TYPES.get(kind)
    if answer is None:
        answer = _LIGHTNING_TYPES[kind] = isinstance(obj, bases("LightningModule"))
    return answer


def lightning_base(obj) -> Optional[type]:
    """The LightningModule class ``obj`` derives from (either namespace's)."""
    return next((base for base in bases("LightningModule") if isinstance(obj, base)), None)


OTHER_TRAINER = ("fl-lightning: trainer: FederatedModule is a pytorch_lightning.LightningModule and the Trainer fitting "
                 "it is lightning.pytorch.Trainer; fit it with pytorch_lightning.Trainer (import pytorch_lightning as "
                 "pl; pl.Trainer(...)) — your network, data module, callbacks and loggers may come from either package "
                 "(docs/lightning_namespaces.md)")


def explain_other_trainer() -> None:
    """A ``sys.excepthook`` for the one mix that cannot work: lightning.pytorch's Trainer refusing FederatedModule
    (``TypeError: `model` must be a `LightningModule` ... got `FederatedModule```) becomes ``OTHER_TRAINER`` and
    exit code 2, as a user mistake; every other exception goes to the hook that was there."""
    previous = sys.excepthook
    if getattr(previous, "explains_other_trainer", False):
        return

    def hook(kind, error, traceback):
        text = str(error)
        if kind is TypeError and "must be a `LightningModule`" in text and "got `FederatedModule`" in text:
            print(OTHER_TRAINER, file=sys.stderr, flush=True)
            os._exit(2)  # nothing was started: Lightning refused before fitting
        previous(kind, error, traceback)

    hook.explains_other_trainer = True
    sys.excepthook = hook


explain_other_trainer()  # installed with FederatedModule (fl_lightning.module imports this module through user_module)
