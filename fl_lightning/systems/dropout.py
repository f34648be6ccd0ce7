"""``model.client_dropout p``: each sampled client's upload never arrives with probability p — a schedule around the
fit's own, so the loop names no such feature. The draws are seeded by the run and the round
(``Purpose.FAILURE``), made once the round is planned and before the wrapped schedule's own ``planned``, so a
dropped client is trained (its compute is spent) and left out of the aggregate and the client state (spec,
"Client failures")."""
from __future__ import annotations

from typing import Iterator, Optional

import numpy as np
import torch

from fl_lightning.federation.contexts import RoundContext
from fl_lightning.federation.seams import RoundSchedule, Sampler, Trained
from fl_lightning.federation.seeding import Purpose, derive_seed


class ClientDropout(RoundSchedule):
    """``schedule`` with each planned client marked lost with probability ``rate``; everything else is the
    wrapped schedule's (its sampler, epoch, state, metrics and files)."""

    def __init__(self, schedule: RoundSchedule, rate: float):
        self.schedule, self.rate = schedule, rate
        self.times_clients, self.epoch = schedule.times_clients, schedule.epoch

    def sampler(self, chosen: Sampler) -> Sampler:
        return self.schedule.sampler(chosen)

    def run(self, engine, round_idx: int) -> Optional[torch.Tensor]:
        return self.schedule.run(engine, round_idx)

    def planned(self, plan: RoundContext) -> None:
        draws = np.random.default_rng(derive_seed(plan.round, Purpose.FAILURE)).random(len(plan.clients))
        for task, draw in zip(plan.clients, draws):
            task.lost = task.lost or bool(draw < self.rate)
        self.schedule.planned(plan)

    def arrived(self, trained: Iterator[Trained], plan: RoundContext) -> Iterator[Trained]:
        return self.schedule.arrived(trained, plan)

    def state_dict(self) -> dict:
        return self.schedule.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.schedule.load_state_dict(state)

    def metrics(self) -> dict[str, float]:
        return self.schedule.metrics()

    def files(self) -> list[tuple[str, tuple, list[dict]]]:
        return self.schedule.files()

    def close(self) -> None:
        self.schedule.close()
