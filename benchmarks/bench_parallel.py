"""Clients in parallel inside one process (``model.parallel_clients``), timed against plain loops
(``make bench``).

Two settings, each on random tensors of the real shapes:
  cross-device: 1,000 clients × 50 images (3×32×32), 50 per round, batch 10, 1 epoch, a small 2-conv
                CNN (conv 5×5 16 → pool → conv 5×5 32 → pool → fc 10, as bench_distributed.py);
  paper:        100 clients × 500 images (3×32×32), 10 per round, batch 50, 1 epoch, LeNet-5.
Six ways to train a round, interleaved (``--repeats`` × 3 rounds each; ``--ways`` picks some), medians:
  plain loop          one model, the process's threads, clients one after the other;
  plain thread pool   two clients at once, each on its own model copy with one intra-op thread, the
                      updates summed in client order (the strategy BlazeFL's trainer uses);
  pool, channels_last the plain thread pool with its batches laid out channels-last, as fl-lightning
                      does by default for conv networks on the CPU (the layout's share of the gain);
  fl-lightning K=1    real rounds through a Lightning Trainer (validation off; a fit's second round);
  fl-lightning K=2    the same with model.parallel_clients 2;
  K=1 + evaluation    K=1 with the global model evaluated on 10,000 test images in the round, as
                      a CLI fit does every round by default (what a side-by-side of whole runs sees).
Target (both settings): K=2 ≥ 1.2× the plain thread pool's samples/s; peak PSS (``--memory``, each way
in a fresh process) ≤ the plain thread pool's + 200 MiB.

    .venv/bin/python benchmarks/bench_parallel.py --repeats 3 [--settings cross-device] [--memory]
        [--ways "plain thread pool" "pool, channels_last" "fl-lightning K=2"]
"""
from __future__ import annotations

import argparse
import logging
import statistics
import subprocess
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn

from fl_lightning import FederatedDataModule, FederatedModule
from fl_lightning.data import DataSplit
from fl_lightning.models import LeNet5

LR, WD = 0.05, 1e-3


def CNN() -> nn.Module:
    """The small 2-conv CNN of bench_distributed.py: conv 5×5 16 → pool → conv 5×5 32 → pool → fc 10."""
    return nn.Sequential(nn.Conv2d(3, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 5 * 5, 10))


SETTINGS = {  # name: (network, clients, per client, per round, batch, image shape)
    "cross-device": (CNN, 1000, 50, 50, 10, (3, 32, 32)),
    "paper": (LeNet5, 100, 500, 10, 50, (3, 32, 32)),
}


class Setting:
    def __init__(self, name: str):
        self.name = name
        self.network, self.clients, self.per_client, self.per_round, self.batch, shape = SETTINGS[name]
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(self.clients * self.per_client, *shape, generator=g)
        self.y = torch.randint(0, 10, (self.clients * self.per_client,), generator=g)
        self.rounds_done = 0

    def round_clients(self) -> list[int]:
        self.rounds_done += 1
        g = torch.Generator().manual_seed(self.rounds_done)
        return sorted(torch.randperm(self.clients, generator=g)[:self.per_round].tolist())

    def data_of(self, client: int):
        a = client * self.per_client
        return self.x[a:a + self.per_client], self.y[a:a + self.per_client]


def train_client(model, optimizer, setting: Setting, client: int, generator, channels_last: bool = False) -> None:
    x, y = setting.data_of(client)
    perm = torch.randperm(len(y), generator=generator)
    xs, ys = x[perm], y[perm]
    for b in range(0, len(y), setting.batch):
        batch = xs[b:b + setting.batch]
        if channels_last:
            batch = batch.contiguous(memory_format=torch.channels_last)
        loss = F.cross_entropy(model(batch), ys[b:b + setting.batch])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


class PlainLoop:
    """One model; each client starts from the global weights; the mean update is applied."""

    def __init__(self, setting: Setting, channels_last: bool = False):
        self.setting, self.model, self.channels_last = setting, setting.network(), channels_last
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=LR, weight_decay=WD)
        self.global_weights = [p.detach().clone() for p in self.model.parameters()]

    def client_update(self, model, optimizer, client: int) -> list[torch.Tensor]:
        with torch.no_grad():
            for p, g in zip(model.parameters(), self.global_weights):
                p.copy_(g)
        train_client(model, optimizer, self.setting, client, torch.Generator().manual_seed(client), self.channels_last)
        return [p.detach() - g for p, g in zip(model.parameters(), self.global_weights)]

    def apply(self, updates) -> None:
        with torch.no_grad():
            for i, g in enumerate(self.global_weights):
                g.add_(sum(update[i] for update in updates) / len(updates))

    def round(self) -> float:
        start = time.perf_counter()
        self.apply([self.client_update(self.model, self.optimizer, c) for c in self.setting.round_clients()])
        return time.perf_counter() - start


class PlainThreadPool(PlainLoop):
    """Two clients at once, one intra-op thread each, on two model copies; updates summed in order."""

    def __init__(self, setting: Setting, workers: int = 2, channels_last: bool = False):
        super().__init__(setting, channels_last)
        self.free = [(m, torch.optim.SGD(m.parameters(), lr=LR, weight_decay=WD))
                     for m in [setting.network() for _ in range(workers)]]
        self.pool = ThreadPoolExecutor(workers, initializer=torch.set_num_threads, initargs=(1,))

    def _job(self, client: int):
        model, optimizer = self.free.pop()
        try:
            return self.client_update(model, optimizer, client)
        finally:
            self.free.append((model, optimizer))

    def round(self) -> float:
        threads, start = torch.get_num_threads(), time.perf_counter()
        self.apply(list(self.pool.map(self._job, self.setting.round_clients())))
        elapsed = time.perf_counter() - start
        torch.set_num_threads(threads)
        return elapsed


class RoundTimer(pl.Callback):
    """Each round's seconds on ``clock`` (wall time; bench_sgd_step.py passes CPU time)."""

    def __init__(self, clock=time.perf_counter):
        self.times, self.clock = [], clock

    def on_train_epoch_start(self, trainer, module):
        self._start = self.clock()

    def on_train_epoch_end(self, trainer, module):
        self.times.append(self.clock() - self._start)


ROUNDS = 3  # timed rounds per measurement of each way


def fl_rounds(setting: Setting, parallel_clients: int, evaluate: bool = False, rounds: int = ROUNDS,
              clock=time.perf_counter) -> list[float]:
    """Rounds 2.. of a fit: the first pays the fit's one-off costs (threads, copies).
    ``evaluate``: the global model is evaluated on 10,000 test images in the round, as a CLI fit does."""
    test_x = torch.randn(10_000 if evaluate else setting.batch, *setting.x.shape[1:])
    split = DataSplit(setting.x, setting.y, test_x, torch.randint(0, 10, (len(test_x),)), 10)
    parts = [torch.arange(c * setting.per_client, (c + 1) * setting.per_client) for c in range(setting.clients)]
    data = FederatedDataModule.from_tensors(split, parts)
    module = FederatedModule(setting.network(), algorithm="fedavg", clients_per_round=setting.per_round,
                             local_epochs=1, batch_size=setting.batch, lr=LR, weight_decay=WD,
                             parallel_clients=parallel_clients)
    module.prints_summary = False
    timer = RoundTimer(clock)
    pl.Trainer(max_epochs=rounds + 1, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False, limit_val_batches=1.0 if evaluate else 0, num_sanity_val_steps=0,
               callbacks=[timer]).fit(module, data)
    return timer.times[1:]


def ways_of(setting: Setting) -> dict:
    """label → a function that times ROUNDS rounds of that way (each way's objects made on its first call)."""
    made: dict = {}

    def rounds_of(label, make):
        def run():
            if label not in made:
                made[label] = make()
            return [made[label].round() for _ in range(ROUNDS)]
        return run

    return {"plain loop": rounds_of("plain loop", lambda: PlainLoop(setting)),
            "plain thread pool": rounds_of("plain thread pool", lambda: PlainThreadPool(setting)),
            "pool, channels_last": rounds_of("pool, channels_last", lambda: PlainThreadPool(setting,
                                                                                             channels_last=True)),
            "fl-lightning K=1": lambda: fl_rounds(setting, 1), "fl-lightning K=2": lambda: fl_rounds(setting, 2),
            "K=1 + evaluation": lambda: fl_rounds(setting, 1, evaluate=True)}


def measure(name: str, repeats: int, only=None) -> dict[str, list[float]]:
    ways = {label: way for label, way in ways_of(Setting(name)).items() if not only or label in only}
    for way in ways.values():  # warm-up
        way()
    times = {label: [] for label in ways}
    for _ in range(repeats):
        for label, way in ways.items():
            times[label].extend(way())
    return times


def pss_mib() -> float:
    """This process's proportional set size (shared pages split among the processes sharing them), MiB."""
    with open("/proc/self/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Pss:")) / 1024


def peak_pss(name: str, label: str) -> float:
    """The peak PSS of one way (ROUNDS rounds; a fit's ROUNDS + 1) in this process, sampled every 20 ms."""
    peak, done = [pss_mib()], threading.Event()

    def sample():
        while not done.wait(0.02):
            peak.append(pss_mib())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    ways_of(Setting(name))[label]()
    done.set()
    sampler.join()
    return max(peak + [pss_mib()])


def memory(name: str, labels) -> dict[str, float]:
    """Each way's peak PSS, each in a fresh process (``--pss-of``)."""
    return {label: float(subprocess.run([sys.executable, __file__, "--settings", name, "--pss-of", label],
                                        check=True, capture_output=True, text=True).stdout.split()[-1])
            for label in labels}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="interleaved measurements (3 rounds) of each way")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--ways", nargs="+", help="time only these ways (labels as printed; default: all)")
    parser.add_argument("--memory", action="store_true", help="also each way's peak PSS, each in a fresh process")
    parser.add_argument("--pss-of", help=argparse.SUPPRESS)  # one way's peak PSS, in this process (for --memory)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    pl.seed_everything(0, verbose=False)
    if args.pss_of:
        print(f"{peak_pss(args.settings[0], args.pss_of):.1f}")
        return
    print(f"threads: {torch.get_num_threads()}, {args.repeats} interleaved measurements of {ROUNDS} rounds of each "
          "way, medians")
    for name in args.settings:
        times = measure(name, args.repeats, args.ways)
        network, _, per_client, per_round, batch, _ = SETTINGS[name]
        samples = per_client * per_round
        median = {label: statistics.median(t) for label, t in times.items()}
        print(f"\n{name}: {per_round} clients × {per_client} samples per round, batch {batch}, {network.__name__}")
        base = median.get("plain thread pool")
        for label, t in times.items():
            print(f"  {label:19s} {samples / median[label]:8.0f} samples/s  "
                  + (f"(×{base / median[label]:.2f} the plain thread pool; " if base else "(")
                  + f"rounds {', '.join(f'{s:.2f}s' for s in t)})")
        ratios = [(f"{a} / {b}", median[b] / median[a], target) for a, b, target in (
            ("fl-lightning K=2", "plain thread pool", "target ≥ 1.2"), ("fl-lightning K=2", "pool, channels_last", ""),
            ("fl-lightning K=2", "fl-lightning K=1", "")) if a in median and b in median]
        print("  " + "   ".join(f"{label}: {ratio:.3f}" + (f" ({target})" if target else "")
                                for label, ratio, target in ratios))
        if args.memory:
            pss = memory(name, [label for label in ("plain loop", "plain thread pool", "fl-lightning K=1",
                                                    "fl-lightning K=2") if not args.ways or label in args.ways])
            print("  peak PSS (MiB, each way in a fresh process): " + ", ".join(f"{label} {mib:,.0f}"
                                                                              for label, mib in pss.items()))


if __name__ == "__main__":
    main()
