"""Federating another project's LightningModule, unchanged, with the same loop and callbacks."""
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn

from fl_lightning import FederatedDataModule, FederatedModule
from fl_lightning.callbacks import FLCallback, Proximal
from tests.conftest import make_trainer


class DigitsClassifier(pl.LightningModule):
    """Written as a normal, centralised Lightning model: forward, training_step, optimizer."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 48), nn.Tanh(), nn.Linear(48, 10))

    def forward(self, x):
        return self.body(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y, label_smoothing=0.1)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters())


class CountClients(FLCallback):
    def __init__(self):
        self.clients_seen = []
        self.steps = 0

    def on_client_start(self, client):
        self.clients_seen.append(client.client_id)

    def on_local_step_end(self, client):
        self.steps += 1

    def state_dict(self):
        return {"clients_seen": list(self.clients_seen), "steps": self.steps}


def test_foreign_lightning_module_trains_federated():
    torch.manual_seed(0)
    foreign = DigitsClassifier()
    module = FederatedModule(foreign, algorithm="fedavg", clients_per_round=5, batch_size=20, lr=0.2,
                             local_epochs=2)
    data = FederatedDataModule("digits", num_clients=10, dirichlet_rho=1.0, val_fraction=0.0)
    counter = CountClients()
    trainer = make_trainer(8, callbacks=[Proximal(0.01), counter])
    trainer.fit(module, data)
    # Our FLCallbacks ran inside the foreign model's rounds ...
    assert len(counter.clients_seen) == 8 * 5 and set(counter.clients_seen) <= set(range(10))
    per_client = 2 * -(-143 // 20)  # 2 epochs × ⌈143/20⌉ batches
    assert counter.steps == 8 * 5 * per_client
    # ... the proximal term came from trainer.callbacks, the loss from the foreign training_step ...
    assert [type(cb) for cb in module.loop.callbacks if isinstance(cb, Proximal)] == [Proximal]
    # ... and the foreign module's own weights are the trained global model.
    acc = trainer.callback_metrics["val/acc"].item()
    x, y = data.split.test_x, data.split.test_y
    with torch.no_grad():
        own_acc = (foreign(x).argmax(1) == y).float().mean().item()
    assert abs(own_acc - acc) < 1e-6
    assert acc > 0.6
