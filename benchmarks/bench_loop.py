"""Throughput of local training through the FL loop vs a plain PyTorch loop (``make bench``).

LeNet-5 on CIFAR-shaped random tensors, 10 clients × 500 samples, 1 local epoch, batch 50,
SGD (lr 0.05, weight decay 1e-3). The FL side runs real rounds through a Lightning Trainer
(validation off); the plain side trains one model on the same samples with the same batch
size and optimizer. Rounds of the two are interleaved and the median round time of each is
compared, so machine noise hits both alike. Target: ratio ≥ 0.90.

Compressed uploads are timed the same way: FedAvg rounds with Top-k (10 %, error
feedback), QSGD (s = 255, buckets of 512), EF-signSGD, DRIVE/EDEN (Hadamard rotation of the upload
padded to 2^20) and PowerSGD (rank 2) against uncompressed FedAvg rounds.
Target: at most 1.2× the uncompressed round.
"""
from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
import warnings

import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from fl_lightning import FederatedDataModule, FederatedModule
from fl_lightning.data import DataSplit
from fl_lightning.models import LeNet5

CLIENTS, PER_CLIENT, BATCH, LR, WD = 10, 500, 50, 0.05, 1e-3
CODECS = ("topk", "fedpaq", "signsgd", "eden", "powersgd")  # presets: FedAvg with each upload codec


class RoundTimer(pl.Callback):
    def __init__(self):
        self.times = []

    def on_train_epoch_start(self, trainer, module):
        synchronize(module.device)
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer, module):
        synchronize(module.device)
        self.times.append(time.perf_counter() - self._start)


def synchronize(device: torch.device) -> None:
    """A GPU runs asynchronously: wait for its queued work before reading the clock."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def quiet() -> None:
    """A benchmark's fits: no warnings or Lightning info lines, torch seeded (0)."""
    warnings.filterwarnings("ignore")
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    pl.seed_everything(0, verbose=False)


def make_data(clients: int = CLIENTS, per_client: int = PER_CLIENT):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(clients * per_client, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (clients * per_client,), generator=g)
    return x, y


def plain_round(model, optimizer, x, y, generator, channels_last=False, clients: int = CLIENTS) -> float:
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    start = time.perf_counter()
    for c in range(clients):
        xc, yc = x[c * PER_CLIENT:(c + 1) * PER_CLIENT], y[c * PER_CLIENT:(c + 1) * PER_CLIENT]
        perm = torch.randperm(PER_CLIENT, generator=generator).to(x.device)
        xs, ys = xc[perm], yc[perm]
        for b in range(0, PER_CLIENT, BATCH):
            loss = F.cross_entropy(model(xs[b:b + BATCH]), ys[b:b + BATCH])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    synchronize(x.device)
    return time.perf_counter() - start


def fl_rounds(x, y, rounds: int, algorithm: str = "fedavg", channels_last=None, precision="32-true",
              accelerator: str = "cpu", parallel_clients: int = 1, local_epochs: int = 1, client_runner: str = "serial",
              cohort_size=None, per_round=None, callbacks=(), network=LeNet5, per_client: int = PER_CLIENT,
              batch: int = BATCH) -> list[float]:
    """Round times of ``rounds`` rounds in one fit over the clients of ``x`` (``per_client`` samples each)."""
    split = DataSplit(x, y, x[:batch], y[:batch], 10)
    clients = [torch.arange(c * per_client, (c + 1) * per_client) for c in range(len(y) // per_client)]
    data = FederatedDataModule.from_tensors(split, clients)
    module = FederatedModule(network(), algorithm=algorithm, clients_per_round=per_round or len(clients),
                             local_epochs=local_epochs, batch_size=batch, lr=LR, weight_decay=WD,
                             channels_last=channels_last, parallel_clients=parallel_clients,
                             client_runner=client_runner, cohort_size=cohort_size)
    module.prints_summary = False  # a timed round, not a run to report
    timer = RoundTimer()
    with tempfile.TemporaryDirectory() as scratch:  # the client-state store (residuals, Q) lives under the root dir
        trainer = pl.Trainer(max_epochs=rounds, accelerator=accelerator, devices=1, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                             limit_val_batches=0, num_sanity_val_steps=0, callbacks=[timer, *callbacks],
                             precision=precision,
                             default_root_dir=scratch)
        trainer.fit(module, data)
    return timer.times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="interleaved measurements of each side")
    parser.add_argument("--codecs", nargs="*", default=list(CODECS), choices=CODECS,
                        help="the compressed-upload presets timed (default: all)")
    args = parser.parse_args()
    quiet()
    x, y = make_data()
    model = LeNet5()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, weight_decay=WD)
    generator = torch.Generator().manual_seed(0)
    plain_round(model, optimizer, x, y, generator)  # warm-up
    fl_rounds(x, y, 1)  # warm-up
    plain, fl, compressed = [], [], {name: [] for name in args.codecs}
    for _ in range(args.repeats):
        plain.append(plain_round(model, optimizer, x, y, generator))
        fl.extend(fl_rounds(x, y, 1))
        for algorithm, times in compressed.items():
            times.extend(fl_rounds(x, y, 1, algorithm))
    samples = CLIENTS * PER_CLIENT
    plain_rate, fl_rate = samples / statistics.median(plain), samples / statistics.median(fl)
    print(f"threads: {torch.get_num_threads()}, samples per round: {samples}, rounds measured: {args.repeats} each")
    print(f"plain PyTorch loop : {plain_rate:8.1f} samples/s  (round times {', '.join(f'{t:.2f}s' for t in plain)})")
    print(f"fl-lightning loop  : {fl_rate:8.1f} samples/s  (round times {', '.join(f'{t:.2f}s' for t in fl)})")
    print(f"ratio fl/plain     : {fl_rate / plain_rate:.3f}  (target ≥ 0.90)")
    for algorithm, times in compressed.items():
        ratio = statistics.median(times) / statistics.median(fl)
        print(f"{algorithm:8s} round / fedavg round: {ratio:.3f}  (target ≤ 1.2; round times "
              f"{', '.join(f'{t:.2f}s' for t in times)})")


if __name__ == "__main__":
    main()
