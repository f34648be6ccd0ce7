"""The user's model and data: a LightningModule on scikit-learn's digits (embedded, no download)."""
import lightning.pytorch as L
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

from fl_lightning import FederatedDataModule  # + FL: fl-lightning's partition of digits (that of fl-lightning fit)

BATCH = 32


class LitDigits(L.LightningModule):
    def __init__(self, lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_acc", (self(x).argmax(1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def trainer(**kwargs) -> L.Trainer:
    return L.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, **kwargs)


def load_partition(partition_id: int, num_partitions: int) -> TensorDataset:
    """This node's training shard: client ``partition_id`` of ``num_partitions``."""
    data = FederatedDataModule("digits", num_clients=num_partitions)  # + FL
    data.setup("fit")  # + FL
    return TensorDataset(*data.clients.of(partition_id))  # + FL


def test_set() -> TensorDataset:
    digits = load_digits()
    x, y = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0, torch.tensor(digits.target)
    return TensorDataset(x[1500:], y[1500:])
