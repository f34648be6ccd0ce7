"""fl-lightning: federated learning on PyTorch Lightning (FedAvg ... FedBCGD+, exact communication accounting).

The public names are imported on first use, so that the command line answers ``--help`` fast.
"""
__all__ = ["FederatedDataModule", "FederatedLoop", "FederatedModule", "ClientTask", "ClientContext", "RoundContext",
           "ServerContext", "ToyFederation"]
import importlib

__version__ = "0.1.0"

_HOMES = {"FederatedDataModule": "fl_lightning.data.datamodule", "FederatedLoop": "fl_lightning.federation.loop",
          "ClientTask": "fl_lightning.federation.contexts", "ClientContext": "fl_lightning.federation.contexts",
          "RoundContext": "fl_lightning.federation.contexts", "ServerContext": "fl_lightning.federation.contexts",
          "ToyFederation": "fl_lightning.assembly.toy", "FederatedModule": "fl_lightning.module"}


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'fl_lightning' has no attribute {name!r}")
