"""``RobustServer``: the FLCallback that brings a robust aggregator and/or an attack into a fit
(docs/robustness.md). The assembly hands the loop its ``received_sums`` (where a round's uploads go: a
``ReceivedUploads``). Per channel and group of coordinates that the same clients uploaded, in this order: each
client's momentum over its own uploads (channel ``delta``, the rule's ``momentum``), the attack (channel ``delta``,
the malicious rows forged from the honest rows of the same round and group), bucketing (the rule's ``bucket``), the
rule. A group left by drops with fewer uploads than the rule serves keeps its coordinates for the round
(``aggregation/skipped_groups``). It draws the malicious clients once per run from the run seed (``malicious``: a data
attack relabels them through fl_lightning.attacks.poisoned_data), writes clients.csv (who was sampled, uploaded what, was malicious, dropped) and keeps a stateful
rule's previous output and the clients' momenta in the checkpoint."""
from __future__ import annotations

from typing import Optional

import torch

from fl_lightning.aggregation.base import Aggregator, bucket_means
from fl_lightning.aggregation.mean import Mean
from fl_lightning.aggregation.received import ReceivedUploads
from fl_lightning.attacks.base import MALICIOUS_STREAM, NOISE_STREAM, Attack
from fl_lightning.errors import ConfigError
from fl_lightning.federation.hooks import FLCallback
from fl_lightning.federation.seeding import derive_seed, generator

BUCKET_STREAM = 0xB0C  # derive_seed(BUCKET_STREAM, round, first coordinate): a group's bucket shuffle
CLIENTS_FILE = "clients.csv"
CLIENTS_COLUMNS = ("round", "client", "sampled", "uploaded", "malicious", "dropped")


class RobustServer(FLCallback):
    """Args:
        aggregator: the rule (None: the weighted mean, for an attack without a defence).
        attack: the malicious clients and what they do (None: every client is honest).
        blocks: the model's block division (names a block in a refusal and in clients.csv), or None.
        per_round: S, the clients of a round (ALIE's z)."""

    thread_safe = True

    def __init__(self, aggregator: Optional[Aggregator], attack: Optional[Attack], blocks=None,
                 per_round: Optional[int] = None):
        self.configured = aggregator  # as given (None: the plain mean)
        self.aggregator = aggregator or Mean()
        self.attack = attack
        self.blocks = blocks
        self.per_round = per_round
        self.num_clients = 0
        self.malicious: set[int] = set()
        self.previous: dict[str, torch.Tensor] = {}  # a stateful aggregator's last output, per channel
        self.momenta: dict[int, torch.Tensor] = {}  # each client's momentum over its delta uploads
        self._plan = None
        self._received: Optional[ReceivedUploads] = None
        self._in_round, self._skipped = 0, 0
        self._rows: list[dict] = []

    # -- before the run ----------------------------------------------------------------------------------------
    def refuse(self, fit) -> Optional[ConfigError]:
        """What this rule and attack cannot serve in ``fit`` (fl_lightning.assembly.fit.Fit), as one line."""
        if (refusal := self.clash(fit.private, fit.asynchronous)) is not None:
            return refusal
        if self.attack is not None and (refusal := self.attack.refuse(fit)) is not None:
            return refusal
        buffer = getattr(fit.asynchronous, "buffer_size", None)  # FedBuff: the rule runs on each buffer of K
        return self.group_refusal(buffer or fit.per_round, fit.client_dropout, "K" if buffer else "S")

    def clash(self, private: bool, asynchronous) -> Optional[ConfigError]:
        """What the rule and attack cannot serve beside client-level DP or FedBuff's asynchronous options: known from
        the options alone, so the module refuses it when built, and ``refuse(fit)`` on every path."""
        if private:
            return ConfigError("model.aggregator" if self.configured is not None else "model.attack", "is not "
                               "combined with model.privacy: clipping and noise change what a robust aggregate or an "
                               "attack means; leave one of them unset")
        if asynchronous is not None and self.attack is not None:
            return ConfigError("model.attack", "needs synchronous rounds; leave model.asynchronous unset")
        if asynchronous is not None and (self.aggregator.momentum or self.aggregator.bucket):
            return ConfigError(f"model.aggregator.{'momentum' if self.aggregator.momentum else 'bucket'}", "needs "
                               "synchronous rounds (client momentum across rounds; a bucket shuffle per round); leave "
                               "model.asynchronous unset or the option unset")
        return None

    def group_refusal(self, per_round: int, dropout: float, letter: str = "S") -> Optional[ConfigError]:
        """The rule against the smallest group a round has (⌊S/N⌋ with N blocks; FedBuff: of a buffer of K), and
        the uploads it expects there with model.client_dropout p; known before any data."""
        blocks = self.blocks.num_blocks if self.blocks is not None else 1
        fewest = per_round // blocks
        where = (f"a block of {fewest} uploads ({letter}={per_round} over N={blocks} blocks)" if blocks > 1
                 else f"a {'round' if letter == 'S' else 'buffer'} of {letter}={per_round} uploads")
        refusal = self.aggregator.group_refusal(fewest, where)
        expected = fewest * (1.0 - dropout)
        if refusal is None and dropout > 0 and self.aggregator.min_clients() > 1 and \
                not self.aggregator.serves(int(expected)):
            refusal = ConfigError("model.aggregator", f"{self.aggregator.describe()} needs at least "
                                  f"{self.aggregator.min_clients()} inputs per group, but with model.client_dropout "
                                  f"{dropout} {where} expects {expected:g} uploads; lower model.client_dropout or "
                                  "raise model.clients_per_round")
        return refusal

    def setup(self, trainer, pl_module, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if trainer.datamodule is not None:
            self.start(trainer.datamodule.num_clients, self.per_round or pl_module.hparams.clients_per_round)

    def start(self, num_clients: int, per_round: int) -> None:
        """Once per run, before the first round: the malicious clients, drawn from the run seed, and the attack's
        constants (ALIE's z)."""
        self.num_clients = num_clients
        if self.attack is not None:
            self.malicious = set(self.attack.malicious(num_clients, derive_seed(MALICIOUS_STREAM)))
            self.attack.prepare(num_clients, per_round)

    # -- the round ---------------------------------------------------------------------------------------------
    def received_sums(self, sizes: dict[str, int], device: torch.device, ordered: bool = False) -> ReceivedUploads:
        """What the loop adds the round's uploads to (fl_lightning.federation.loop)."""
        self._received = ReceivedUploads(sizes, device, ordered, server=self)
        return self._received

    def configure_round(self, round) -> None:
        self._plan, self._in_round, self._skipped, self._received = round, 0, 0, None

    def client_id(self, position: int) -> int:
        if self._plan is None:
            raise ConfigError("model.attack", "needs synchronous rounds (the clients' ids of a round's plan); "
                              "leave model.asynchronous unset")
        return self._plan.clients[position].client_id

    def aggregate(self, channel: str, received: ReceivedUploads) -> torch.Tensor:
        """Δ̄ of ``channel`` per group: momentum, attack, buckets, rule (module docstring); a group the rule cannot
        serve is marked skipped in ``received`` and left at 0."""
        out = torch.zeros(received.sizes[channel], device=received.device)
        previous = self.previous.get(channel) if self.aggregator.stateful else None
        previous = previous.to(out.device) if previous is not None else None  # a checkpoint loads on the CPU
        round_idx = self._plan.round if self._plan is not None else 0
        counted, served = set(), torch.zeros(received.sizes[channel], dtype=torch.bool, device=out.device)
        for uploads, slices, x, weights in received.groups(channel):
            index = torch.cat([torch.arange(a, b, device=out.device) for a, b in slices])
            start = slices[0][0]
            if channel == "delta" and (self.aggregator.momentum or self.attack is not None):
                ids = [self.client_id(u.position) for u in uploads]
                x = self._with_momentum(x, ids, index, received.sizes[channel])
                bad = [i for i, cid in enumerate(ids) if cid in self.malicious]
                counted.update(ids[i] for i in bad)
                if bad and self.attack is not None and self.attack.forges_uploads:
                    x = self._forge(x, bad, [ids[i] for i in bad], round_idx, start)
            if not self.aggregator.serves(x.shape[0]):
                received.skip(channel, index)
                self._skipped += channel == "delta"  # a group, once (not per channel)
                continue
            if self.aggregator.bucket:
                order = torch.randperm(x.shape[0], generator=generator(derive_seed(BUCKET_STREAM, round_idx, start)))
                x, weights = bucket_means(x, weights, self.aggregator.bucket, order.to(x.device))
            begin = previous[index] if previous is not None else None
            out[index] = self.aggregator.aggregate(x, weights, begin).to(out.dtype)
            served[index] = True
        if channel == "delta" and self.attack is not None:
            self._in_round = len(counted)
        if self.aggregator.stateful:
            kept = self.previous.get(channel, torch.zeros_like(out)).to(out.device)
            kept[served] = out[served]
            self.previous[channel] = kept
        return out

    def _with_momentum(self, x: torch.Tensor, ids: list[int], index: torch.Tensor, size: int) -> torch.Tensor:
        """Each row as its client's momentum m_i ← β m_i + (1 − β) x_i over these coordinates (β = 0: x)."""
        beta = self.aggregator.momentum
        if not beta:
            return x
        rows = []
        for cid, row in zip(ids, x):
            kept = self.momenta.get(cid)
            kept = torch.zeros(size, dtype=x.dtype, device=x.device) if kept is None else kept.to(x.device)
            self.momenta[cid] = kept
            kept[index] = beta * kept[index] + (1.0 - beta) * row
            rows.append(kept[index])
        return torch.stack(rows)

    def _forge(self, x, bad: list[int], ids: list[int], round_idx: int, start: int) -> torch.Tensor:
        good = [i for i in range(x.shape[0]) if i not in bad]
        generators = [generator(derive_seed(NOISE_STREAM, round_idx, cid, start)) for cid in ids]
        x = x.clone()
        x[bad] = self.attack.forge(x[bad], x[good], generators).to(x.dtype)
        return x

    def on_round_end(self, round) -> None:
        """clients.csv's rows of the round: every client, whether sampled, what it uploaded, malicious, dropped."""
        reported = {u.position for u in self._received.uploads} if self._received is not None else set()
        tasks = {task.client_id: task for task in round.clients}
        self._rows = []
        for cid in range(round.num_clients):
            task = tasks.get(cid)
            dropped = "" if task is None else "lost" if task.lost else "" if task.position in reported else "non_finite"
            self._rows.append({"round": round.round + 1, "client": cid, "sampled": int(task is not None),
                               "uploaded": "" if task is None or dropped else self._uploaded(task.upload_ranges),
                               "malicious": int(cid in self.malicious), "dropped": dropped})

    def _uploaded(self, ranges) -> str:
        """``all``, or the blocks a client's ranges cover (``1+shared``)."""
        if self.blocks is None:
            return "all"
        names = [str(j) for j, block in enumerate(self.blocks.blocks) if set(block.ranges) <= set(ranges)]
        if self.blocks.shared is not None and set(self.blocks.shared.ranges) <= set(ranges):
            names.append("shared")
        return "+".join(names)

    # -- logs, files and checkpoints ---------------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        out = {"aggregation/skipped_groups": float(self._skipped)} if self.aggregator.min_clients() > 1 else {}
        self._skipped = 0  # once per row (FedBuff steps configure no round)
        if self.attack is not None:
            out.update({"attack/malicious_in_round": float(self._in_round), **self.attack.metrics()})
        return out

    def files(self) -> list[tuple[str, tuple, list[dict]]]:
        rows, self._rows = self._rows, []  # each round's rows once
        return [(CLIENTS_FILE, CLIENTS_COLUMNS, rows)]

    def summary(self, accuracy, loss, classes) -> str:
        if self.attack is None:
            return f", aggregator {self.aggregator.describe()}"
        total = self.num_clients or "?"
        return (f", attack {self.attack.name} on {len(self.malicious)} of {total} clients (clients.csv), aggregator "
                f"{self.aggregator.describe()}")

    def state_dict(self) -> dict:
        state = {"previous": {k: v.cpu() for k, v in self.previous.items()}} if self.previous else {}
        if self.momenta:
            state["momenta"] = {cid: v.cpu() for cid, v in self.momenta.items()}
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        self.previous = dict(state_dict.get("previous", {}))
        self.momenta = dict(state_dict.get("momenta", {}))
