"""A plain Lightning training script, federated: the lines marked ``# + FL`` are all that changed.

Without them this is the script Lightning's docs show — a LightningModule, a DataLoader, ``Trainer.fit``,
``Trainer.validate``. With them, each of ``num_clients`` clients trains the same script on its own shard, and
the server side (FedAvg, simulated in this process by ``InProcessServer``) averages their updates each round.
On real nodes each client runs only its own loop body, with the server on the other end of the network.

    python examples/federate_a_lightning_script.py             # federated: 4 clients, 5 rounds
    python examples/federate_a_lightning_script.py --plain     # the original script, centralised
"""
import sys

import lightning.pytorch as L
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fl_lightning.federation.lightning_client import FederatedClient, InProcessServer  # + FL


class LitClassifier(L.LightningModule):
    def __init__(self, lr: float = 1e-2):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))

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
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def datasets():
    digits = load_digits()
    x, y = torch.tensor(digits.data, dtype=torch.float32) / 16.0, torch.tensor(digits.target)
    return TensorDataset(x[:1500], y[:1500]), TensorDataset(x[1500:], y[1500:])


def trainer(**kwargs):
    return L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, **kwargs)


def main(plain: bool = False, rounds: int = 5, num_clients: int = 4, seed: int = 0) -> float:
    L.seed_everything(seed, verbose=False)
    train, val = datasets()
    model = LitClassifier()
    if plain:
        trainer().fit(model, DataLoader(train, batch_size=32, shuffle=True))
    else:
        server = InProcessServer(model)  # + FL: the server (in this process here)
        for _ in range(rounds):  # + FL: rounds
            for client in range(num_clients):  # + FL: each client's shard (on its own node in a deployment)
                shard = torch.utils.data.Subset(train, range(client, len(train), num_clients))  # + FL
                trainer(callbacks=[FederatedClient(server)]).fit(model, DataLoader(shard, batch_size=32, shuffle=True))
            server.end_round()  # + FL: FedAvg
        model.load_state_dict(server.state)  # + FL: the global model
    (metrics,) = trainer().validate(model, DataLoader(val, batch_size=100), verbose=False)
    return metrics["val_acc"]


if __name__ == "__main__":
    print(f"val_acc {main(plain='--plain' in sys.argv):.4f}")
