"""``Registry``: names to things, filled by one decorator where each thing is defined (as timm's
``register_model``): codecs (``fl_lightning.compression.CODECS``), data sets (``fl_lightning.data.DATASETS``),
models (``fl_lightning.models.MODELS``), client runners and samplers (``fl_lightning.federation.seams.RUNNERS``,
``SAMPLERS``), system profiles (``fl_lightning.systems.PROFILES``, with ``add``); algorithms register with their summary through ``fl_lightning.algorithms.register``. A new one is its file
plus its decorator; listings and the docs check (tests/test_docs.py) read the registry."""
from __future__ import annotations

import difflib
from typing import Callable, Optional, TypeVar

from fl_lightning.errors import ConfigError

T = TypeVar("T")


class Registry(dict):
    """``kind``: what its entries are, for messages (``"codec"``, ``"data set"``)."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def register(self, name: Optional[str] = None) -> Callable[[T], T]:
        """Registers the decorated thing under ``name`` (default: its ``name`` attribute); a name is taken once."""

        def add(thing: T) -> T:
            key = name or getattr(thing, "name", "")
            if not key or key in self:
                raise ValueError(f"{self.kind} {key!r}: {'no name' if not key else 'registered twice'}")
            self[key] = thing
            return thing

        return add

    def add(self, thing: T) -> T:
        """Registers a value that is not a definition (a profile's numbers) under its ``name``."""
        return self.register()(thing)

    def unknown(self, name: str, option: str) -> ConfigError:
        """One line for a name that is not registered: the close match, the names, and that a class path works."""
        close = difflib.get_close_matches(str(name), list(self), n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        return ConfigError(option, f"unknown {self.kind} {name!r}; {hint}choose one of {', '.join(self)}, or give a "
                           "class path (my_package.module.MyClass)")
