"""The one resolver of a configurable part: ``None | name | {class_path, init_args} | mapping | object`` → the
part, or one ``ConfigError`` line naming the option. Every option that takes a part (``model.algorithm``,
``model.compression``, ``model.system``, ``model.round_policy``, ``model.asynchronous``, ``model.privacy``)
goes through ``resolve_part``."""
from __future__ import annotations

import importlib
from typing import Callable, Optional

from fl_lightning.errors import ConfigError


def resolve_part(value, base: type, option: str, wanted: str, from_name: Optional[Callable[[str], object]] = None,
                 off: tuple = ("none",)):
    """``value`` as a ``base`` instance. None (or a name in ``off``) → None; a ``base`` → itself; a name →
    ``from_name(name)``; ``{class_path, init_args}`` (a checkpoint's hparams) → that class, if a ``base``; any
    other mapping → ``base(**mapping)`` (unknown keys named). ``wanted`` says what the option takes."""
    if value is None or (isinstance(value, str) and value in off):
        return None
    if isinstance(value, base):
        return value
    if isinstance(value, type) and issubclass(value, base):
        raise ConfigError(option, f"got the class {value.__name__}; pass an instance, {value.__name__}() or "
                          f"{value.__name__}(option=value)")
    if isinstance(value, str) and from_name is not None:
        return from_name(value)
    if isinstance(value, dict) and "class_path" in value:
        cls = _import(value["class_path"])
        if cls is None or not (isinstance(cls, type) and issubclass(cls, base)):
            raise ConfigError(option, f"cannot import {value['class_path']!r} as a {base.__name__}")
        return cls(**(value.get("init_args") or {}))
    if isinstance(value, dict):
        try:
            return base(**value)
        except TypeError as err:
            raise ConfigError(option, f"{err}; {option} takes {wanted}") from None
    raise ConfigError(option, f"needs {wanted}, got {type(value).__name__}")


def _import(path) -> Optional[type]:
    module, _, name = str(path).rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return None
