"""``FLCallback``, the hooks an algorithm is written in, lives in ``fl_lightning.federation.hooks`` (the loop
calls them); re-exported here, where algorithms and callbacks import it."""
from fl_lightning.federation.hooks import FLCallback

__all__ = ["FLCallback"]
