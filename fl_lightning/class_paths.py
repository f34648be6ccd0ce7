"""The one class importer: a dotted class path (``pkg.module.Class``) → the class, for every option that takes a
class path (``model.algorithm``, ``model.sampler``, ``data.dataset``, a local trainer's callbacks, ...). It knows
the modules that moved, so class paths written before (configs, kept runs, checkpoints) still resolve."""
from __future__ import annotations

import importlib
from typing import Optional

from fl_lightning.errors import ConfigError

# Modules that moved (CHANGELOG.md): class paths written before, in configs and kept runs, still resolve.
# (fl_lightning.compression became a package that re-exports its codecs: its class paths resolve as they are.)
MOVED_MODULES = {
    "fl_lightning.blocks": "fl_lightning.federation.blocks",
    "fl_lightning.checkpoint_io": "fl_lightning.runs.checkpoint_io",
    "fl_lightning.client_state": "fl_lightning.federation.client_state",
    "fl_lightning.comm": "fl_lightning.federation.messages",
    "fl_lightning.contexts": "fl_lightning.federation.contexts",
    "fl_lightning.distributed": "fl_lightning.federation.distributed",
    "fl_lightning.evaluation": "fl_lightning.federation.evaluation",
    "fl_lightning.figures": "fl_lightning.runs.figures",
    "fl_lightning.flat": "fl_lightning.federation.flat",
    "fl_lightning.foreign": "fl_lightning.federation.user_module",
    "fl_lightning.kept_runs": "fl_lightning.runs.kept",
    "fl_lightning.lightning_cli": "fl_lightning.cli.lightning_cli",
    "fl_lightning.local_training": "fl_lightning.federation.local_training",
    "fl_lightning.loop": "fl_lightning.federation.loop",
    "fl_lightning.memory_format": "fl_lightning.federation.memory_format",
    "fl_lightning.options": "fl_lightning.cli.options",
    "fl_lightning.parallel": "fl_lightning.federation.parallel",
    "fl_lightning.plot": "fl_lightning.runs.plot",
    "fl_lightning.powersgd": "fl_lightning.compression.powersgd",
    "fl_lightning.progress": "fl_lightning.runs.progress",
    "fl_lightning.python_api": "fl_lightning.runs.python_api",
    "fl_lightning.report": "fl_lightning.runs.report",
    "fl_lightning.round_log": "fl_lightning.federation.round_log",
    "fl_lightning.run_files": "fl_lightning.runs.files",
    "fl_lightning.run_identity": "fl_lightning.runs.identity",
    "fl_lightning.seeding": "fl_lightning.federation.seeding",
    "fl_lightning.server_optimizers": "fl_lightning.federation.server_optimizers",
    "fl_lightning.sweep": "fl_lightning.cli.sweep",
    "fl_lightning.runs.sweep": "fl_lightning.cli.sweep",
    "fl_lightning.threads": "fl_lightning.federation.threads",
    "fl_lightning.toy": "fl_lightning.assembly.toy",
    "fl_lightning.federation.toy": "fl_lightning.assembly.toy",
}


def current_path(path: str) -> str:
    """A class path with a moved module replaced by where it lives now (``fl_lightning.powersgd.PowerSGD`` →
    ``fl_lightning.compression.powersgd.PowerSGD``); any other path unchanged."""
    module, _, name = str(path).rpartition(".")
    return f"{MOVED_MODULES[module]}.{name}" if module in MOVED_MODULES else path


def class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def import_class(path: Optional[str]) -> Optional[type]:
    """The class at a dotted path, or None where nothing importable is there."""
    module_name, _, name = current_path(str(path or "")).rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name), name) if module_name else None
    except (ImportError, AttributeError, ValueError):
        return None
    return found if isinstance(found, type) else None


def imported(path: str, field: str, example: str):
    """What the dotted ``path`` names (a class or any attribute), or a one-line error for ``field`` citing ``example``."""
    module_name, _, name = current_path(str(path)).rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError):
        raise ConfigError(field, f"cannot import {path!r}; give a full class path such as {example}") from None
