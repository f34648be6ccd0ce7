"""Your own data: map-style Datasets and DataLoaders through from_datasets, natural client ids,
and any torchvision classification data set by class path from the CLI."""
import csv
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from sklearn.datasets import load_digits

from fl_lightning import FederatedDataModule, FederatedModule
from fl_lightning.cli import main
from fl_lightning.errors import ConfigError
from fl_lightning.models import MLP
from tests.conftest import SHARED_DATA, make_trainer, requires_shared_data

DIGITS = load_digits()


class Digits(torch.utils.data.Dataset):
    """A user's Dataset as found in the wild: PIL images (8×8 grey, uint8) or float vectors, and labels."""

    def __init__(self, rows, images: bool):
        self.rows, self.images = rows, images

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        row = self.rows[i]
        if self.images:
            return Image.fromarray((DIGITS.images[row] * 16).clip(0, 255).astype(np.uint8), mode="L"), int(DIGITS.target[row])
        return torch.tensor(DIGITS.data[row], dtype=torch.float32) / 16, torch.tensor(DIGITS.target[row])


def DigitImages(rows):
    return Digits(rows, images=True)


def DigitVectors(rows):
    return Digits(rows, images=False)


def test_pil_dataset_stored_as_uint8_images_and_trains():
    train, test = DigitImages(range(0, 1500)), DigitImages(range(1500, 1797))
    data = FederatedDataModule.from_datasets(train_dataset=train, test_dataset=test, num_clients=6, augment=False,
                                             val_fraction=0.0)
    data.setup()
    assert data.split.train_x.dtype == torch.uint8 and data.split.train_x.shape == (1500, 1, 8, 8)
    assert torch.equal(data.split.train_y, torch.tensor(DIGITS.target[:1500]))  # labels read once, in order
    assert data.num_classes == 10 and len(data.clients) == 6
    module = FederatedModule(MLP(64, 10, hidden=[32]), clients_per_round=3, batch_size=16, lr=0.1)
    trainer = make_trainer(3)
    trainer.fit(module, data)
    assert trainer.callback_metrics["val/acc"] > 0.5


def test_dataloader_and_natural_client_ids():
    ids = [row % 7 for row in range(1500)]  # e.g. the writer of each sample
    loader = torch.utils.data.DataLoader(DigitVectors(range(1500)), batch_size=32)
    data = FederatedDataModule.from_datasets(train_dataset=loader, test_dataset=DigitVectors(range(1500, 1797)),
                                             client_ids=ids, val_fraction=0.0)
    data.setup()
    assert data.num_clients == 7 and data.split.train_x.dtype == torch.float32
    for client in range(7):
        x, _ = data.clients.of(client)
        expected = torch.tensor(DIGITS.data[[r for r in range(1500) if r % 7 == client]], dtype=torch.float32) / 16
        assert torch.equal(x, expected)


def test_from_datasets_needs_a_test_set():
    with pytest.raises(ConfigError, match="test_dataset"):
        FederatedDataModule.from_datasets(train_dataset=DigitVectors(range(10)))
    with pytest.raises(ConfigError, match="client_ids: needs one client id per training sample"):
        FederatedDataModule.from_datasets(train_dataset=DigitVectors(range(10)), test_dataset=DigitVectors(range(5)),
                                          client_ids=[0, 1])


@requires_shared_data
def test_torchvision_class_path_from_the_cli():
    args = ["fit", "--data.dataset", "torchvision.datasets.MNIST", "--data.root", str(SHARED_DATA),
            "--data.num_clients", "100", "--data.samples_per_client", "50", "--data.augment", "false",
            "--model.network", "fl_lightning.models.MLP", "--model.network.in_features", "784",
            "--model.network.hidden", "[32]", "--model.clients_per_round", "5", "--trainer.max_epochs", "2",
            "--trainer.enable_progress_bar", "false", "--trainer.logger.init_args.name", "kmnist_style"]
    assert main(args) == 0
    (metrics,) = Path("runs/kmnist_style").glob("*/version_0/metrics.csv")  # runs/<name>/<label>/version_0
    with open(metrics) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 and float(rows[-1]["val/acc"]) > 0.3


def test_bad_class_path_is_one_line(capsys):
    code = main(["fit", "--data.dataset", "torchvision.datasets.KMNISTT", "--model.network", "fl_lightning.models.MLP"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("fl-lightning: error: data.dataset: cannot import 'torchvision.datasets.KMNISTT'")
