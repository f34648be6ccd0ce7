"""The virtual clock and the round simulator: the synchronous rounds' schedule under simulated time
(a ``RoundSchedule``, fl_lightning.federation.seams) and its sampler (``AvailableSampler``).

A round starts at the clock's time t. Only clients available at t can be sampled (if none is, the
clock first moves to the earliest time one comes online). Each sampled client's simulated time is

    download bytes / downlink + samples processed / speed + upload bytes / uplink + latency

with the exact bytes the loop counted (codecs and block uploads included) and the samples its local
steps went through (``samples_processed``: a partial last batch of an epoch counts its own samples). The round policy
(fl_lightning.systems.policies) picks the aggregated clients and the round's duration; the clock
advances by it. Logged per round: ``time/sim_s`` (cumulative), ``time/sim_round_s``,
``sys/stragglers`` (sampled clients that finished but were not aggregated), ``sys/idle_s`` (mean
over aggregated clients of the time they waited for the round to end), ``sys/available`` (clients
online at the round's start). ``timeline``: the round's clients, one row each (TIMELINE_COLUMNS), which
the module appends to the run folder's timeline.csv (``fl-lightning timeline RUN`` plots a round).
"""
from __future__ import annotations

import time
from typing import Iterable, Iterator

import numpy as np

from fl_lightning.federation.seams import SCHEDULES, RoundSchedule, Sampler
from fl_lightning.systems.policies import RoundPolicy
from fl_lightning.systems.profiles import Population, samples_processed, steps_within, total_seconds


# timeline.csv: one row per client per round (FedBuff: per arrival, ``round`` = the server step it joined);
# status: aggregated, straggler (finished, not aggregated) or dropped (its upload never arrives / no step fitted)
TIMELINE_FILE = "timeline.csv"
TIMELINE_COLUMNS = ("round", "client_id", "start_s", "download_s", "compute_s", "upload_s", "latency_s", "end_s",
                    "steps", "status", "round_end_s")


def timeline_rows(round_idx: int, ids, starts, segments: np.ndarray, steps, status, round_end_s: float) -> list[dict]:
    """One TIMELINE_COLUMNS row per client: its start, its four segments (``Population.client_segments``), end."""
    starts = np.asarray(starts, dtype=np.float64)
    ends = (starts + total_seconds(segments)).tolist()
    return [dict(zip(TIMELINE_COLUMNS, (round_idx + 1, int(cid), start, *seg, end, int(n), state, round_end_s)))
            for cid, start, seg, end, n, state in zip(ids, starts.tolist(), segments.tolist(), ends, steps, status)]


class VirtualClock:
    """Cumulative simulated seconds; saved in checkpoints (the population is re-drawn from the seed)."""

    def __init__(self):
        self.now_s = 0.0

    def state_dict(self) -> dict:
        return {"now_s": self.now_s}

    def load_state_dict(self, state: dict) -> None:
        self.now_s = float(state["now_s"])


@SCHEDULES.register("simulated")
class RoundSimulator(RoundSchedule):
    """Synchronous rounds on the virtual clock: each client's step budget by the deadline (``planned``), the
    policy's choice of the trained clients (``arrived``); ``per_round``: S, the clients the policy needs. Only
    clients online at the round's start are asked (``sampler``)."""

    times_clients = True

    @classmethod
    def from_fit(cls, fit) -> "RoundSimulator":
        return cls(fit.population, fit.round_policy or RoundPolicy(), fit.batch_size, fit.per_round)

    def sampler(self, chosen: Sampler) -> Sampler:
        return AvailableSampler(self, self.per_round)

    def __init__(self, population: Population, policy: RoundPolicy, batch_size: int, per_round: int = 0):
        self.population, self.policy, self.batch_size, self.per_round = population, policy, batch_size, per_round
        self.clock = VirtualClock()
        self.last: dict[str, float] = {}
        self.timeline: list[dict] = []  # the last round's clients (TIMELINE_COLUMNS), in plan order
        self.seconds = 0.0  # wall time spent in the simulation itself (benchmarks/bench_systems.py)

    def sample(self, rng: np.random.Generator, per_round: int) -> list[int]:
        """Hook 1: the round's clients, among those available at its start."""
        started = time.perf_counter()
        available = self.population.available(self.clock.now_s)
        if not available.any():
            self.clock.now_s = self.population.next_online(self.clock.now_s)
            available = self.population.available(self.clock.now_s)
        ids = np.flatnonzero(available)
        self._available = len(ids)
        count = min(self.policy.num_sampled(per_round), len(ids))
        chosen = sorted(rng.choice(ids, count, replace=False).tolist())
        self.seconds += time.perf_counter() - started
        return chosen

    def budget_steps(self, plan, numel: int) -> None:
        """Hook 1b, with ``partial_work``: each planned client's step budget ``task.max_steps``, the local
        steps that fit before the deadline (fl_lightning.systems.policies); 0 steps: it is a straggler."""
        if not self.policy.partial_work:
            return
        tasks = plan.clients
        ids = np.array([task.client_id for task in tasks], dtype=np.int64)
        upload = [4 * sum(stop - start for start, stop in task.upload_ranges) for task in tasks]
        transfer = self.population.client_times(ids, [4 * numel] * len(tasks), upload, [0] * len(tasks))
        spare = np.maximum(self.policy.deadline_s - transfer, 0.0)
        sizes = [task.num_samples for task in tasks]
        steps = steps_within(spare * self.population.speed[ids] * (1 - 1e-12), sizes, self.batch_size)
        for task, budget in zip(tasks, steps.tolist()):
            task.max_steps = int(budget)
            task.lost = task.lost or task.max_steps == 0

    def planned(self, plan) -> None:
        self.budget_steps(plan, plan.numel)

    def arrived(self, trained, plan):
        return self.admit(trained, plan, self.per_round)

    def files(self) -> list[tuple[str, tuple, list[dict]]]:
        return [(TIMELINE_FILE, TIMELINE_COLUMNS, self.timeline)]

    def admit(self, trained: Iterable[tuple[int, tuple]], plan, per_round: int) -> Iterator[tuple[int, tuple]]:
        """Hook 2: holds the round's trained clients, times them, marks the ones the policy does not
        aggregate as lost (stragglers), advances the clock, then yields them in plan order."""
        held = []
        for position, result in trained:
            started = time.perf_counter()
            result[0].keep_final_model()  # on_client_reported still reads this client's y later
            held.append((position, result))
            self.seconds += time.perf_counter() - started
        started = time.perf_counter()
        clients = [result[0] for _, result in held]
        tasks = [plan.clients[position] for position, _ in held]
        ids = [t.client_id for t in tasks]
        segments = self.population.client_segments(ids, [c.download.nbytes for c in clients],
                                                   [c.upload.nbytes for c in clients],
                                                   samples_processed([c.steps for c in clients],
                                                                     [t.num_samples for t in tasks], self.batch_size))
        times = total_seconds(segments)  # = Population.client_times
        arrived = np.array([not t.lost for t in tasks], dtype=bool)
        accepted, duration = self.policy.select(times, arrived, per_round)
        for task, ok in zip(tasks, accepted):
            task.lost = task.lost or not ok
        idle = duration - times[accepted]
        status = ["aggregated" if ok else "straggler" if came else "dropped" for ok, came in zip(accepted, arrived)]
        start = self.clock.now_s
        self.clock.now_s += duration
        self.timeline = timeline_rows(plan.round, ids, [start] * len(ids), segments, [c.steps for c in clients],
                                      status, self.clock.now_s)
        self.last = {"time/sim_s": self.clock.now_s, "time/sim_round_s": duration,
                     "sys/stragglers": float((arrived & ~accepted).sum()),
                     "sys/idle_s": float(idle.mean()) if len(idle) else 0.0,
                     "sys/available": float(getattr(self, "_available", len(self.population)))}
        self.seconds += time.perf_counter() - started
        yield from held

    def state_dict(self) -> dict:
        return self.clock.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.clock.load_state_dict(state)

    def metrics(self) -> dict[str, float]:
        return dict(self.last) if self.last else {"time/sim_s": self.clock.now_s}


class AvailableSampler(Sampler):
    """S of the clients online at the round's start (the round simulator's clock; the policy's count)."""

    def __init__(self, simulator: RoundSimulator, per_round: int):
        self.simulator, self.per_round = simulator, per_round

    def sample(self, round_idx: int, rng: np.random.Generator) -> list[int]:
        return self.simulator.sample(rng, self.per_round)
