"""Asynchronous training, FedBuff (Nguyen et al., AISTATS 2022: buffered asynchronous
aggregation). ``--model.asynchronous fedbuff --model.asynchronous.buffer_size K
--model.asynchronous.concurrency C`` (needs ``--model.system``: the clients' simulated times).

* C clients are in flight over simulated time. A client starts from the current global model, trains
  at once (its update depends only on its start model, its data and its seeds) and is put in an event
  queue at its finishing time: download + compute + upload + latency from the exact bytes, as in
  synchronous rounds (fl_lightning.systems.profiles). The queue is ordered by (finishing time, launch
  number): ties go to the client launched first.
* Whenever a client finishes, a new one starts from the current global model: sampled (seeded by its
  launch number) among the clients available then and not in flight; if there is none, the launch is
  retried at the next arrival (and the clock waits for the first one online if nothing is in flight).
  At the arrival that fills the buffer the server steps first and the new client launches after, with
  the stepped model (τ = 0 for it): FedBuff's server updates as soon as K updates are buffered and a
  client downloads the model current when it starts (Nguyen et al. 2022, Algorithm 1).
* After every K arrived updates the server steps its optimizer on Δ̄ = Σ_i w_i s(τ_i) Δ_i / Σ_i w_i
  per coordinate (w_i: n_i with weighted aggregation, else 1; a FedBCGD block update carries its block,
  so each coordinate is averaged over the arrivals that sent it, as FedBCGD's synchronous averaging
  does), with the staleness weight s(τ) = (1 + τ)^(−a) (default a = 1/2: 1/√(1+τ)); τ is the number of
  server steps since the client's start model.
* One Lightning epoch is one server step (one logged row): ``time/sim_s`` is the simulated time of its
  K-th arrival; ``sys/staleness_mean``/``_max`` the buffer's τ, ``sys/in_flight`` the clients in flight, ``sys/available``
  the clients online. No client waits for others here, so there are no stragglers and no idle time to log:
  slow clients show as staleness instead. timeline.csv has the step's K arrivals (start, segments, arrival).
* Memory: the in-flight clients' uploads are held (at most C × d floats), not their start models; they
  go into the checkpoint with the queue, the clock, the launch and step counters (every draw is derived
  from the launch number, so no RNG state is needed): a resume is exact mid-run.

FedBCGD's blocks: the k-th launched client uploads block π_{⌊k/N⌋}(k mod N) (a seeded shuffle of the N
blocks per cycle of N launches), so every block is sent equally often. Algorithms with per-client state
or other hooks (control variates, FedProx, FedNova, ...), codecs with per-client state (error feedback,
PowerSGD), privacy, client_dropout, round policies and DDP are refused in one line; a stateless codec (TopK,
RandK, QSGD) compresses each upload as in synchronous rounds, and its smaller upload arrives sooner.
"""
from __future__ import annotations

import heapq
import time
from typing import Optional

import numpy as np
import torch

from fl_lightning.federation.messages import Part, Payload
from fl_lightning.errors import ConfigError
from fl_lightning.resolve import resolve_part
from fl_lightning.federation.seams import SCHEDULES, RoundSchedule
from fl_lightning.federation.seeding import Purpose, derive_seed
from fl_lightning.systems.clock import TIMELINE_COLUMNS, TIMELINE_FILE, VirtualClock, timeline_rows
from fl_lightning.systems.profiles import samples_processed, total_seconds

ASYNC_STREAM = 0xA5C  # derive_seed(ASYNC_STREAM, launch, ...): the launches' draws


class Asynchronous:
    """Args:
        kind: fedbuff (the only one).
        buffer_size: K, arrived updates per server step.
        concurrency: C, clients in flight.
        staleness_exponent: a in s(τ) = (1 + τ)^(−a); 0.5 (default): 1/√(1+τ); 0: no discount.
    """

    def __init__(self, kind: str = "fedbuff", buffer_size: int = 10, concurrency: int = 20,
                 staleness_exponent: float = 0.5):
        if kind != "fedbuff":
            raise ConfigError("model.asynchronous", f"unknown kind {kind!r}; choose fedbuff")
        for name, value in (("buffer_size", buffer_size), ("concurrency", concurrency)):
            if not (isinstance(value, int) and value >= 1):
                raise ConfigError(f"model.asynchronous.{name}", f"must be an integer ≥ 1, got {value}")
        if buffer_size > concurrency:
            raise ConfigError("model.asynchronous.buffer_size", f"K={buffer_size} exceeds concurrency C={concurrency}: "
                              "a server step waits for K of the C clients in flight; choose K ≤ C")
        if not staleness_exponent >= 0:
            raise ConfigError("model.asynchronous.staleness_exponent", f"must be ≥ 0, got {staleness_exponent}")
        self.kind, self.buffer_size, self.concurrency = kind, buffer_size, concurrency
        self.staleness_exponent = float(staleness_exponent)

    def spec(self) -> dict:
        return {"class_path": f"{__name__}.Asynchronous",
                "init_args": {"kind": self.kind, "buffer_size": self.buffer_size, "concurrency": self.concurrency,
                              "staleness_exponent": self.staleness_exponent}}

    def staleness(self, tau: int) -> float:
        return (1.0 + tau) ** -self.staleness_exponent


def resolve_asynchronous(value) -> Optional[Asynchronous]:
    """None, ``fedbuff``, a ``{class_path, init_args}`` dict (a checkpoint's hparams) or an Asynchronous."""
    return resolve_part(value, Asynchronous, "model.asynchronous", "fedbuff or an Asynchronous", Asynchronous,
                        off=())


@SCHEDULES.register("fedbuff")
class FedBuff(RoundSchedule):
    """The event queue and the server steps: a ``RoundSchedule`` whose ``run`` (one server step) replaces the
    loop's synchronous round; it uses the loop's schedule interface only (``task``, ``plan_one``, ``train``,
    ``new_sums``, ``count_traffic``, ``step_server``, ``num_samples``, ``restore_working_model``, ``blocks``)."""

    times_clients = True
    epoch = "server step"

    def __init__(self, options: Asynchronous, population, batch_size: int):
        self.options, self.population, self.batch_size = options, population, batch_size
        self.clock = VirtualClock()
        self.queue: list[tuple] = []  # (finish_s, launch, client_id, start_step, weight, steps, loss, down, up, parts)
        self.launched = 0  # launch counter: every launch's draws derive from it
        self.server_steps = 0
        self.last: dict[str, float] = {}
        self.timeline: list[dict] = []  # the last step's arrivals (fl_lightning.systems.clock.TIMELINE_COLUMNS)
        self.seconds = 0.0  # wall time in the simulation itself (not the clients' training)

    @classmethod
    def from_fit(cls, fit) -> "FedBuff":
        return cls(fit.asynchronous or Asynchronous(), fit.population, fit.batch_size)

    @classmethod
    def refuse(cls, fit) -> Optional[ConfigError]:
        """What FedBuff does not combine with, read from the fit's traits (fl_lightning.assembly.fit): hooks other
        than a block upload that trains the whole model, a codec with per-client state, DP, dropout, K > 1."""
        if fit.round_policy is not None:
            return ConfigError("model.round_policy", "is for synchronous rounds; leave it unset with model.asynchronous")
        hooks = fit.algorithm_hooks
        if not all(h.uploads_one_block and not h.changes_local_training and not h.keeps_client_state for h in hooks):
            return ConfigError("model.asynchronous", f"runs FedAvg-like algorithms and FedBCGD (server optimizer "
                               f"only); {fit.algorithm} has per-client hooks/state: choose fedavg, fedavgm or fedbcgd")
        if fit.codec_stateless is False:
            return ConfigError("model.compression", "keeps per-client state (error feedback, PowerSGD's Q) that "
                               "FedBuff's clients do not carry; use a stateless codec (topk, randk, qsgd without "
                               "error_feedback)")
        for name, off in (("privacy", not fit.private), ("client_dropout", fit.client_dropout == 0),
                          ("parallel_clients", fit.parallel_clients == 1)):
            if not off:
                return ConfigError(f"model.{name}", "is not supported with model.asynchronous; leave it unset")
        return None

    # -- launches ---------------------------------------------------------------------------------
    def _candidate(self) -> Optional[int]:
        busy = np.zeros(len(self.population), dtype=bool)
        busy[[entry[2] for entry in self.queue]] = True
        ids = np.flatnonzero(self.population.available(self.clock.now_s) & ~busy)
        if not len(ids):
            return None
        return int(np.random.default_rng(derive_seed(ASYNC_STREAM, self.launched, Purpose.SAMPLING)).choice(ids))

    def _launch(self, loop, client_id: int) -> None:
        k, blocks, ranges = self.launched, loop.blocks, None
        if blocks is not None:
            n = blocks.num_blocks
            order = np.random.default_rng(derive_seed(ASYNC_STREAM, k // n, Purpose.BLOCK_ORDER)).permutation(n)
            ranges = blocks.upload_ranges(int(order[k % n]))
        task = loop.task(client_id, derive_seed(ASYNC_STREAM, k, client_id), ranges)
        plan = loop.plan_one(self.server_steps, task)  # a stateless codec sizes it; no other hook runs
        client, loss_sum, _ = loop.train(task, plan)
        parts = [(p.channel, list(p.ranges), p.values().detach().clone()) for p in client.upload.parts]
        started = time.perf_counter()
        up, down = client.upload.nbytes, client.download.nbytes
        samples = samples_processed([client.steps], [task.num_samples], self.batch_size)
        duration = float(self.population.client_times([client_id], [down], [up], samples)[0])
        heapq.heappush(self.queue, (self.clock.now_s + duration, k, client_id, self.server_steps, float(client.weight),
                                    client.steps, float(loss_sum), down, up, parts))
        self.launched += 1
        self.seconds += time.perf_counter() - started

    def _fill(self, loop) -> None:
        """Launches clients until C are in flight or none is available now."""
        while len(self.queue) < self.options.concurrency:
            candidate = self._candidate()
            if candidate is None:
                if self.queue:
                    return
                self.clock.now_s = self.population.next_online(self.clock.now_s)  # nothing in flight: wait
                continue
            self._launch(loop, candidate)

    # -- one server step ----------------------------------------------------------------------------
    def run(self, loop, step_idx: int) -> Optional[torch.Tensor]:
        """K arrivals (launching a new client after each), then one server step; the arrivals' mean local loss."""
        started_s = self.clock.now_s
        self._fill(loop)
        received = loop.new_sums()
        loss = torch.zeros((), dtype=torch.float32)
        steps = torch.zeros((), dtype=torch.float32)
        uploads, downloads, taus, arrivals = [], [], [], []
        while len(taus) < self.options.buffer_size:
            finish, _, client_id, start_step, weight, n_steps, loss_sum, down, up, parts = heapq.heappop(self.queue)
            self.clock.now_s = finish
            arrivals.append((client_id, finish, n_steps, down, up))
            tau = self.server_steps - start_step
            scale = self.options.staleness(tau)
            payload = Payload([Part(channel, ranges, values if scale == 1.0 else values * scale)
                               for channel, ranges, values in parts])
            received.add(payload, delta_weight=weight)
            loss += torch.tensor(loss_sum, dtype=torch.float32)
            steps += float(n_steps)
            uploads.append(up)
            downloads.append(down)
            taus.append(tau)
            if len(taus) < self.options.buffer_size:
                self._fill(loop)
        loop.count_traffic(uploads, downloads)
        loop.step_server(step_idx, received)
        self.server_steps += 1
        self._fill(loop)  # the client launched at the K-th arrival starts from the model after this step
        loop.restore_working_model()
        self.timeline = self._timeline(step_idx, arrivals, loop.num_samples)
        self.last = {"time/sim_s": self.clock.now_s, "time/sim_round_s": self.clock.now_s - started_s,
                     "sys/staleness_mean": float(np.mean(taus)), "sys/staleness_max": float(max(taus)),
                     "sys/in_flight": float(len(self.queue)),
                     "sys/available": float(self.population.available(self.clock.now_s).sum())}
        return loss / steps

    def _timeline(self, step_idx: int, arrivals: list[tuple], num_samples) -> list[dict]:
        """The step's K arrivals as timeline rows: each started at its arrival minus its simulated time."""
        ids, finish, steps, down, up = (list(column) for column in zip(*arrivals))
        samples = samples_processed(steps, [num_samples(cid) for cid in ids], self.batch_size)
        segments = self.population.client_segments(ids, down, up, samples)
        starts = np.asarray(finish) - total_seconds(segments)
        return timeline_rows(step_idx, ids, starts, segments, steps, ["aggregated"] * len(ids), self.clock.now_s)

    def files(self) -> list[tuple[str, tuple, list[dict]]]:
        return [(TIMELINE_FILE, TIMELINE_COLUMNS, self.timeline)]

    def metrics(self) -> dict[str, float]:
        return dict(self.last) if self.last else {"time/sim_s": self.clock.now_s}

    # -- checkpoint -------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"now_s": self.clock.now_s, "launched": self.launched, "server_steps": self.server_steps,
                "queue": [list(entry) for entry in self.queue]}

    def load_state_dict(self, state: dict) -> None:
        self.clock.now_s, self.launched = float(state["now_s"]), int(state["launched"])
        self.server_steps = int(state["server_steps"])
        self.queue = [tuple(entry) for entry in state["queue"]]
        heapq.heapify(self.queue)
