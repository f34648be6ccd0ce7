"""A plain Lightning training script, federated with any fl-lightning algorithm: the lines marked ``# + FL`` are
all that changed.

Without them this is the script Lightning's docs show — a LightningModule, a DataLoader, ``Trainer.fit``,
``Trainer.validate``. With them, each round the server (``InProcessServer``, in this process) samples clients and
hands each a job; each sampled client runs the same ``Trainer.fit`` on its own shard with ``job.callback``, which
applies the algorithm's client side (FedBCGD's block upload, SCAFFOLD's control variates, FedProx's term, ...);
the server then steps exactly as ``fl-lightning fit`` does, whose command for the same numbers is printed.

    python examples/federate_a_lightning_script.py                                  # FedAvg, 4 clients, 5 rounds
    python examples/federate_a_lightning_script.py --algorithm fedbcgd --algorithm.num_blocks 2 --rounds 3 \\
        --save global.pt
    python examples/federate_a_lightning_script.py --plain                          # the original, centralised
"""
import argparse
import ast
import sys

import lightning.pytorch as L
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fl_lightning import FederatedDataModule  # + FL: the clients' shards (fl-lightning's partition of digits)
from fl_lightning.assembly.outside import InProcessServer  # + FL
from fl_lightning.errors import FLUserError

NUM_CLIENTS, PER_ROUND, BATCH = 4, 4, 32


class LitClassifier(L.LightningModule):
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


def datasets():
    digits = load_digits()
    x, y = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0, torch.tensor(digits.target)
    return TensorDataset(x[:1500], y[:1500]), TensorDataset(x[1500:], y[1500:])


def trainer(**kwargs):
    return L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, **kwargs)


def fit_command(algorithm: str, options: dict, rounds: int, seed: int) -> str:
    """The ``fl-lightning fit`` that trains the same clients on the same batches to the same global model."""
    chosen = " ".join(f"--model.algorithm.{key} {value}" for key, value in options.items())
    return (f"PYTHONPATH=examples fl-lightning fit --seed_everything {seed} --trainer.max_epochs {rounds} "
            f"--data.dataset digits --data.num_clients {NUM_CLIENTS} "
            f"--model.network federate_a_lightning_script.LitClassifier --model.local_optimizer network "
            f"--model.algorithm {algorithm} {chosen} --model.clients_per_round {PER_ROUND} --model.local_epochs 1 "
            f"--model.batch_size {BATCH} --model.lr_decay 1".replace("  ", " "))


def main(plain=False, rounds=5, algorithm="fedavg", options=None, save=None, seed=0) -> float:
    L.seed_everything(seed, verbose=False)
    train, val = datasets()
    model = LitClassifier()
    if plain:
        trainer().fit(model, DataLoader(train, batch_size=BATCH, shuffle=True))
    else:
        data = FederatedDataModule("digits", num_clients=NUM_CLIENTS)  # + FL: client i's shard is its partition
        data.setup("fit")  # + FL
        shards = [TensorDataset(*data.clients.of(i)) for i in range(NUM_CLIENTS)]  # + FL
        server = InProcessServer(model, algorithm={"name": algorithm, **(options or {})}, clients=NUM_CLIENTS,  # + FL
                                 per_round=PER_ROUND, seed=seed)  # + FL
        for _ in range(rounds):  # + FL: communication rounds
            for job in server.round():  # + FL: the sampled clients (each on its own node in a deployment)
                shard = shards[job.client_id]  # + FL
                trainer(callbacks=[job.callback]).fit(model, DataLoader(shard, batch_size=BATCH,
                                                                        sampler=job.sampler(shard)))  # + FL
        model.load_state_dict(server.global_state())  # + FL: the global model
        torch.save(server.global_state(), save) if save else None  # + FL: --save PATH
        print("same numbers:", fit_command(algorithm, options or {}, rounds, seed))  # + FL
    (metrics,) = trainer().validate(model, DataLoader(val, batch_size=100), verbose=False)
    return metrics["val_acc"]


def parse(argv=None) -> dict:
    """``--algorithm NAME --algorithm.OPTION value`` as on fl-lightning's command line, ``--rounds``, ``--save``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plain", action="store_true")
    parser.add_argument("--algorithm", default="fedavg")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--save")
    parser.add_argument("--seed", type=int, default=0)
    known, rest = parser.parse_known_args(argv)
    options = {}
    for flag, value in zip(rest[::2], rest[1::2]):
        if not flag.startswith("--algorithm."):
            parser.error(f"unknown option {flag}")
        try:
            options[flag[len("--algorithm."):]] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            options[flag[len("--algorithm."):]] = value
    if len(rest) % 2:
        parser.error(f"{rest[-1]} needs a value")
    return dict(vars(known), options=options)


if __name__ == "__main__":
    try:
        print(f"val_acc {main(**parse()):.4f}")
    except FLUserError as error:  # a mistake in the options: one line, exit 2
        print(f"fl-lightning: error: {error}", file=sys.stderr)
        sys.exit(2)
