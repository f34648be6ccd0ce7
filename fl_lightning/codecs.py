"""The codecs by the name ``--model.compression NAME`` gives them (fl_lightning.compression,
fl_lightning.powersgd)."""
from __future__ import annotations

from fl_lightning.compression import EDEN, QSGD, EFSign, RandK, TopK
from fl_lightning.powersgd import PowerSGD

CODECS = {codec.name: codec for codec in (TopK, RandK, QSGD, EFSign, EDEN, PowerSGD)}
