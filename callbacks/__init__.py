"""Federated-learning callbacks, importable as ``fl_lightning.callbacks``."""
from fl_lightning.callbacks.base import FLCallback
from fl_lightning.callbacks.server_momentum import ServerMomentum

__all__ = ["FLCallback", "ServerMomentum"]
