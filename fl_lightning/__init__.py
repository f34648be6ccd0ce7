"""fl-lightning: federated learning on PyTorch Lightning (FedAvg, FedAvgM; FedBCGD next)."""
from fl_lightning.data.datamodule import FederatedDataModule
from fl_lightning.loop import ClientTask, FederatedLoop, RoundPlan
from fl_lightning.module import FederatedModule

__all__ = ["FederatedDataModule", "FederatedLoop", "FederatedModule", "ClientTask", "RoundPlan"]
__version__ = "0.1.0"
