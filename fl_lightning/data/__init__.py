from fl_lightning.data.datamodule import ClientData, FederatedDataModule
from fl_lightning.data.datasets import DATASETS
from fl_lightning.data.split import DataSplit
from fl_lightning.data.partition import class_histogram, dirichlet_partition, iid_partition, label_skew

__all__ = ["ClientData", "FederatedDataModule", "DATASETS", "DataSplit", "class_histogram",
           "dirichlet_partition", "iid_partition", "label_skew"]
