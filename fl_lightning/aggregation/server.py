"""``RobustServer``: the FLCallback that brings a robust aggregator and/or an attack into a fit
(docs/robustness.md). The assembly hands the loop its ``received_sums`` (where a round's uploads go: a
``ReceivedUploads``), which it attacks (channel ``delta`` only, the malicious clients' rows of each group, from the
honest rows of the same round and group) and aggregates per group. It draws the malicious clients once per run
from the run seed, flips their labels for a data attack, logs ``attack/malicious_in_round`` and keeps a stateful
aggregator's previous output in the checkpoint."""
from __future__ import annotations

from typing import Optional

import torch

from fl_lightning.aggregation.base import Aggregator
from fl_lightning.aggregation.mean import Mean
from fl_lightning.aggregation.received import ReceivedUploads
from fl_lightning.attacks.base import MALICIOUS_STREAM, NOISE_STREAM, Attack
from fl_lightning.errors import ConfigError
from fl_lightning.federation.hooks import FLCallback
from fl_lightning.federation.seeding import derive_seed, generator


class RobustServer(FLCallback):
    """Args:
        aggregator: the rule (None: the weighted mean, for an attack without a defence).
        attack: the malicious clients and what they do (None: every client is honest).
        blocks: the model's block division (names a block in a refusal), or None."""

    thread_safe = True

    def __init__(self, aggregator: Optional[Aggregator], attack: Optional[Attack], blocks=None):
        self.aggregator = aggregator or Mean()
        self.attack = attack
        self.blocks = blocks
        self.malicious: set[int] = set()
        self.previous: dict[str, torch.Tensor] = {}  # a stateful aggregator's last output, per channel
        self._plan = None
        self._in_round = 0
        self._flipped = None  # (clients' data, its labels before the flip)

    # -- the run -----------------------------------------------------------------------------------------------
    def setup(self, trainer, pl_module, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if self.attack is not None and trainer.datamodule is not None:
            self.malicious = set(self.attack.malicious(trainer.datamodule.num_clients, derive_seed(MALICIOUS_STREAM)))

    def on_train_start(self, trainer, pl_module) -> None:
        if self.attack is None or self.attack.forges_uploads or self._flipped is not None:
            return
        clients = trainer.datamodule.clients
        original = clients.y.clone()
        classes = int(getattr(trainer.datamodule, "num_classes", 0) or int(original.max()) + 1)
        for cid in sorted(self.malicious):
            a, b = clients.offsets[cid], clients.offsets[cid + 1]
            clients.y[a:b] = self.attack.flipped(original[a:b], classes)
        self._flipped = (clients, original)

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if self._flipped is not None:
            clients, original = self._flipped
            clients.y.copy_(original)
            self._flipped = None

    # -- the round ---------------------------------------------------------------------------------------------
    def received_sums(self, sizes: dict[str, int], device: torch.device, ordered: bool = False) -> ReceivedUploads:
        """What the loop adds the round's uploads to (fl_lightning.federation.loop)."""
        return ReceivedUploads(sizes, device, ordered, server=self)

    def configure_round(self, round) -> None:
        self._plan, self._in_round = round, 0

    def client_id(self, position: int) -> int:
        if self._plan is None:
            raise ConfigError("model.attack", "needs synchronous rounds (the clients' ids of a round's plan); "
                              "leave model.asynchronous unset")
        return self._plan.clients[position].client_id

    def aggregate(self, channel: str, received: ReceivedUploads) -> torch.Tensor:
        """Δ̄ of ``channel``: per group, the malicious rows forged (channel delta), then the aggregator."""
        out = torch.zeros(received.sizes[channel], device=received.device)
        previous = self.previous.get(channel) if self.aggregator.stateful else None
        attacked = channel == "delta" and self.attack is not None and self.attack.forges_uploads
        counted = set()
        for uploads, slices, x, weights in received.groups(channel):
            index = torch.cat([torch.arange(a, b, device=out.device) for a, b in slices])
            if self.attack is not None and channel == "delta":
                ids = [self.client_id(u.position) for u in uploads]
                bad = [i for i, cid in enumerate(ids) if cid in self.malicious]
                counted.update(ids[i] for i in bad)
                if attacked and bad:
                    x = self._forge(x, bad, [ids[i] for i in bad])
            self.aggregator.check_group(x.shape[0], self._where(slices, x.shape[0]))
            start = previous[index] if previous is not None else None
            out[index] = self.aggregator.aggregate(x, weights, start).to(out.dtype)
        if channel == "delta" and self.attack is not None:
            self._in_round = len(counted)
        if self.aggregator.stateful:
            kept = self.previous.get(channel, torch.zeros_like(out))
            covered = received.weight(channel) > 0
            kept[covered] = out[covered]
            self.previous[channel] = kept
        return out

    def _forge(self, x: torch.Tensor, bad: list[int], ids: list[int]) -> torch.Tensor:
        good = [i for i in range(x.shape[0]) if i not in bad]
        round_idx = self._plan.round if self._plan is not None else 0
        generators = [generator(derive_seed(NOISE_STREAM, round_idx, cid)) for cid in ids]
        x = x.clone()
        x[bad] = self.attack.forge(x[bad], x[good], generators).to(x.dtype)
        return x

    def _where(self, slices, n: int) -> str:
        if self.blocks is not None:
            start = slices[0][0]
            for j, block in enumerate(self.blocks.blocks):
                if any(a <= start < b for a, b in block.ranges):
                    return f"block {j} ({n} uploads this round)"
            if self.blocks.shared is not None:
                return f"the shared block ({n} uploads this round)"
        return f"the round's group of {n} uploads"

    # -- logs and checkpoints ----------------------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        return {"attack/malicious_in_round": float(self._in_round)} if self.attack is not None else {}

    def state_dict(self) -> dict:
        return {"previous": {k: v.cpu() for k, v in self.previous.items()}} if self.previous else {}

    def load_state_dict(self, state_dict: dict) -> None:
        self.previous = dict(state_dict.get("previous", {}))
