"""Compression: codecs (what a client sends instead of its update; ``codecs.py``, ``powersgd.py``) by the
name ``--model.compression NAME`` gives them, and the accounting of every byte that crosses the network
(``fl_lightning.federation.messages``, re-exported as ``accounting``). Config class paths such as
``fl_lightning.compression.QSGD`` resolve here."""
from __future__ import annotations

from fl_lightning.compression.codecs import CODECS, EDEN, QSGD, Codec, EFSign, RandK, TopK
from fl_lightning.compression.powersgd import PowerSGD

__all__ = ["CODECS", "Codec", "EDEN", "EFSign", "PowerSGD", "QSGD", "RandK", "TopK"]
