"""``Registry``: names to things, filled by one decorator where each thing is defined (as timm's
``register_model``): codecs (``fl_lightning.compression.CODECS``), data sets (``fl_lightning.data.DATASETS``),
models (``fl_lightning.models.MODELS``), client runners and samplers (``fl_lightning.federation.seams.RUNNERS``,
``SAMPLERS``), system profiles (``fl_lightning.systems.PROFILES``, with ``add``); algorithms register with their summary through ``fl_lightning.algorithms.register``. A new one is its file
plus its decorator; listings and the docs check (tests/test_docs.py) read the registry."""
from __future__ import annotations

from typing import Callable, Optional, TypeVar

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
