"""``ToyFederation`` lives in ``fl_lightning.assembly.toy``; this import path is kept for existing code."""
from fl_lightning.assembly.toy import ToyFederation

__all__ = ["ToyFederation"]
