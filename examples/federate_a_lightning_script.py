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
    python examples/federate_a_lightning_script.py --aggregator median --attack sign_flip --attack.fraction 0.5

Every registered algorithm runs with its defaults: 4 clients a round, or one per block where a block algorithm has
more blocks (FedBCGD's default 5: 5 clients, said on the first line). The clients' Trainers print nothing of their
own (``--verbose`` shows Lightning's lines).
"""
import argparse
import ast
import contextlib
import json
import logging
import os
import sys
import warnings

import lightning.pytorch as L
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fl_lightning import FederatedDataModule  # + FL: the clients' shards (fl-lightning's partition of digits)
from fl_lightning.assembly.connector import choose_algorithm  # + FL
from fl_lightning.assembly.outside import InProcessServer  # + FL
from fl_lightning.errors import FLUserError
from fl_lightning.federation.blocks import partition_for

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


def trainer(epochs=1, **kwargs):
    return L.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, **kwargs)


def cohort(algorithm: str, options: dict) -> tuple[int, int]:
    """(clients, clients a round): 4 and 4, or one client a round per block where the algorithm has more blocks."""
    chosen = choose_algorithm({"name": algorithm, **options}, None, "InProcessServer")[0]
    division = partition_for(LitClassifier(), chosen)  # FedBCGD's blocks
    per_round = max(PER_ROUND, division.num_blocks if division is not None else 0)
    return max(NUM_CLIENTS, per_round), per_round


def part_flags(kind: str, name, options: dict) -> str:
    """``--model.attack sign_flip --model.attack.fraction 0.5``: a part as fit's command line names it."""
    shown = {k: json.dumps(v, separators=(",", ":")) if isinstance(v, (list, dict)) else v for k, v in options.items()}
    return " ".join([f"--model.{kind} {name}"] + [f"--model.{kind}.{k} {v}" for k, v in shown.items()]) if name else ""


def fit_command(algorithm: str, options: dict, rounds: int, seed: int, clients: int, per_round: int,
                robust: str = "") -> str:
    """The ``fl-lightning fit`` that trains the same clients on the same batches to the same global model."""
    chosen = " ".join(f"--model.algorithm.{key} {value}" for key, value in options.items())
    return (f"PYTHONPATH=examples fl-lightning fit --seed_everything {seed} --trainer.max_epochs {rounds} "
            f"--data.dataset digits --data.num_clients {clients} "
            f"--model.network federate_a_lightning_script.LitClassifier --model.local_optimizer network "
            f"--model.algorithm {algorithm} {chosen} --model.clients_per_round {per_round} --model.local_epochs 1 "
            f"--model.batch_size {BATCH} --model.lr_decay 1 {robust}".strip().replace("  ", " "))


@contextlib.contextmanager
def quiet(verbose: bool):
    """The clients' Trainers print nothing of their own (Lightning's info lines, a client fit's missing validation
    data, Lightning's deprecation on a newer torch) unless ``verbose``; the logging levels are restored after."""
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "pytorch_lightning")]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        if not verbose:
            for logger in loggers:
                logger.setLevel(logging.WARNING)
            warnings.filterwarnings("ignore", message=r"You defined a `validation_step` but have no `val_dataloader`")
            warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels):
                logger.setLevel(level)


def main(plain=False, rounds=5, algorithm="fedavg", options=None, save=None, seed=0, verbose=False, aggregator=None,
         attack=None, parts=None) -> float:
    with quiet(verbose):
        return train_and_validate(plain, rounds, algorithm, options, save, seed, aggregator, attack, parts)


def train_and_validate(plain, rounds, algorithm, options, save, seed, aggregator, attack, parts) -> float:
    L.seed_everything(seed, verbose=False)
    train, val = datasets()
    model = LitClassifier()
    if plain:
        trainer().fit(model, DataLoader(train, batch_size=BATCH, shuffle=True))
    else:
        options = options or {}
        clients, per_round = cohort(algorithm, options)
        if per_round != PER_ROUND:
            print(f"{algorithm}: {per_round} clients a round (one per block), {clients} clients")
        data = FederatedDataModule("digits", num_clients=clients)  # + FL: client i's shard is its partition
        data.setup("fit")  # + FL
        shards = [TensorDataset(*data.clients.of(i)) for i in range(clients)]  # + FL
        parts = parts or {"aggregator": {}, "attack": {}}  # their options (--aggregator.OPTION, --attack.OPTION)
        robust = {kind: {"class_path": name, "init_args": parts[kind]} if name else None
                  for kind, name in (("aggregator", aggregator), ("attack", attack))}
        server = InProcessServer(model, algorithm={"name": algorithm, **options}, clients=clients,  # + FL
                                 per_round=per_round, seed=seed, local_epochs=1, **robust)  # + FL
        for _ in range(rounds):  # + FL: communication rounds
            for job in server.round():  # + FL: the sampled clients (each on its own node in a deployment)
                shard = shards[job.client_id]  # + FL
                trainer(job.epochs, callbacks=[job.callback]).fit(model, DataLoader(shard, batch_size=BATCH,
                                                                                    sampler=job.sampler(shard)))  # + FL
        model.load_state_dict(server.global_state())  # + FL: the global model
        torch.save(server.global_state(), save) if save else None  # + FL: --save PATH
        flags = " ".join(part_flags(kind, name, parts[kind]) for kind, name in (("aggregator", aggregator),
                                                                                ("attack", attack)))
        print("same numbers:", fit_command(algorithm, options, rounds, seed, clients, per_round, flags))  # + FL
    (metrics,) = trainer().validate(model, DataLoader(val, batch_size=100), verbose=False)
    return metrics["val_acc"]


def parse(argv=None) -> dict:
    """``--algorithm NAME --algorithm.OPTION value`` as on fl-lightning's command line, ``--rounds``, ``--save``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plain", action="store_true")
    parser.add_argument("--algorithm", default="fedavg")
    parser.add_argument("--rounds", type=int, default=5, help="communication rounds, at least 1")
    parser.add_argument("--save", help="where the global model is saved (its folder must exist and be writable)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verbose", action="store_true", help="each client Trainer's own lines")
    parser.add_argument("--aggregator", help="a robust rule, as fit's --model.aggregator (docs/robustness.md)")
    parser.add_argument("--attack", help="malicious clients, as fit's --model.attack (an upload attack)")
    known, rest = parser.parse_known_args(argv)
    if known.rounds < 1:
        parser.error(f"--rounds: got {known.rounds}; needs at least 1 round")
    folder = os.path.dirname(os.path.abspath(known.save)) if known.save else None
    if folder is not None and not (os.path.isdir(folder) and os.access(folder, os.W_OK)):
        parser.error(f"--save: the folder {folder} {'is not writable' if os.path.isdir(folder) else 'does not exist'}; "
                     "give a path in a writable folder")
    options, parts = {}, {"aggregator": {}, "attack": {}}
    for flag, value in zip(rest[::2], rest[1::2]):
        kind, _, key = flag[2:].partition(".")
        if not flag.startswith("--") or kind not in ("algorithm", "aggregator", "attack") or not key:
            parser.error(f"unknown option {flag}")
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            pass
        (options if kind == "algorithm" else parts[kind])[key] = value
    if len(rest) % 2:
        parser.error(f"{rest[-1]} needs a value")
    for kind in ("aggregator", "attack"):
        if parts[kind] and getattr(known, kind) is None:
            parser.error(f"--{kind}.{next(iter(parts[kind]))}: an option of --{kind} NAME, which is not given")
    return dict(vars(known), options=options, parts=parts)


if __name__ == "__main__":
    try:
        print(f"val_acc {main(**parse()):.4f}")
    except FLUserError as error:  # a mistake in the options: one line, exit 2
        print(f"fl-lightning: error: {error}", file=sys.stderr)
        sys.exit(2)
