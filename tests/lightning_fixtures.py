"""LightningModules written the way Lightning's docs write them (written here, not copied), in either
namespace: ``make_autoencoder(L)`` / ``make_classifier(L)`` with ``L`` pytorch_lightning or lightning.pytorch."""
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn


def digit_images() -> tuple[torch.utils.data.Dataset, torch.utils.data.Dataset]:
    """sklearn's 8×8 digits as 1×8×8 float images in [0, 1] (train: the first 1500, test: the rest)."""
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target)
    return (torch.utils.data.TensorDataset(x[:1500], y[:1500]), torch.utils.data.TensorDataset(x[1500:], y[1500:]))


def make_autoencoder(L):
    class AutoEncoder(L.LightningModule):
        """Reconstruction: training_step flattens its own image batch; forward returns the code, not logits."""

        def __init__(self, code: int = 6, lr: float = 3e-3):
            super().__init__()
            self.save_hyperparameters()
            self.encoder = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, code))
            self.decoder = nn.Sequential(nn.Linear(code, 32), nn.ReLU(), nn.Linear(32, 64))

        def forward(self, x):
            return self.encoder(x)

        def _loss(self, batch):
            x, _ = batch
            x = x.view(x.size(0), -1)
            return F.mse_loss(self.decoder(self.encoder(x)), x)

        def training_step(self, batch, batch_idx):
            loss = self._loss(batch)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", self._loss(batch))

        def test_step(self, batch, batch_idx):
            self.log("test_loss", self._loss(batch))

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)

    return AutoEncoder


def make_classifier(L):
    class Classifier(L.LightningModule):
        """Its own Adam, its own train/valid logs."""

        def __init__(self, lr: float = 1e-2):
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
            logits = self(x)
            self.log("valid_loss", F.cross_entropy(logits, y), on_epoch=True)
            self.log("valid_acc", (logits.argmax(1) == y).float().mean(), on_epoch=True)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)

    return Classifier


def regression_data(n_train: int = 400, n_test: int = 100) -> tuple[torch.utils.data.Dataset, torch.utils.data.Dataset]:
    """y = x·w + 0.1·noise with float targets, x ∈ R^5 (seeded)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n_train + n_test, 5, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 0.0, 3.0]) + 0.1 * torch.randn(n_train + n_test, generator=g)
    return (torch.utils.data.TensorDataset(x[:n_train], y[:n_train]),
            torch.utils.data.TensorDataset(x[n_train:], y[n_train:]))


def make_regressor(L):
    class Regressor(L.LightningModule):
        """Linear regression on float targets; logs its own mean squared error."""

        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(5, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.mse_loss(self.linear(x).squeeze(1), y)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_mse", F.mse_loss(self.linear(x).squeeze(1), y))

    return Regressor
