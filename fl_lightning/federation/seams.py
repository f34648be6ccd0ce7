"""The round's three seams (docs/architecture.md, "The round's seams"): who is asked, who trains them, when the
server steps. The loop (fl_lightning.federation.loop) asks its parts and names no feature; the assembly
(fl_lightning.assembly.session) chooses them.

- ``Sampler.sample(round_idx, rng)``: the round's client ids, sorted (uniform; Poisson; availability-aware in
  fl_lightning.systems).
- ``ClientRunner.run(positions, plan)``: (position, (client, loss sum, logs)) for each position, in plan order;
  ``reported(client)`` once the client's upload arrived (serial; K threads in fl_lightning.federation.parallel;
  remote nodes in fl_lightning.deploy.remote).
- ``RoundSchedule``: ``planned(plan)`` after the hooks' ``configure_round``, ``arrived(trained, plan)`` over the
  trained clients (both identity here), or ``run(engine, round_idx)`` replacing the synchronous round
  altogether (deadline/over-selection and FedBuff in fl_lightning.systems).

Every part has ``state_dict()``/``load_state_dict()`` (in the checkpoint, for an exact resume), ``metrics()``
(added to the round's row), ``files()`` (rows appended to the run folder's CSV files) and ``close()``.
"""
from __future__ import annotations

from typing import Iterable, Iterator, Optional

import numpy as np
import torch

from fl_lightning.federation.contexts import RoundContext
from fl_lightning.federation.local_training import LocalTrainer, call_hook
from fl_lightning.errors import ConfigError
from fl_lightning.registry import Registry

Trained = tuple[int, tuple]  # (position, (ClientContext, loss sum, RecordedLogs))
RUNNERS = Registry("client runner")  # model.client_runner: name → ClientRunner class (``@RUNNERS.register(name)``)
SAMPLERS = Registry("sampler")  # model.sampler: name → Sampler class (``@SAMPLERS.register(name)``)
SCHEDULES = Registry("round schedule")  # model.schedule: name → RoundSchedule class (``@SCHEDULES.register(name)``)


class Part:
    """What every seam shares; each default is "nothing"."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def metrics(self) -> dict[str, float]:
        return {}

    def files(self) -> list[tuple[str, tuple, list[dict]]]:
        """(file name, columns, rows) to append to the run folder's CSV files after each round."""
        return []

    def close(self) -> None:
        pass


class Sampler(Part):
    """Who is asked this round. ``poisson_rate``: q when each client joins independently with probability q (it
    reaches the round's plan), else None. ``releases_every_round``: the server steps every round on every
    coordinate, even when no upload arrived (a noised release must not reveal that nobody joined)."""

    poisson_rate: Optional[float] = None
    releases_every_round = False

    def sample(self, round_idx: int, rng: np.random.Generator) -> list[int]:
        raise NotImplementedError

    @classmethod
    def from_fit(cls, fit, **options) -> "Sampler":
        """The sampler ``model.sampler NAME`` (or a class path, with ``init_args`` as ``options``) builds: by default
        ``cls(M, S, held_out, **options)`` — M clients, S = ``model.clients_per_round``, never one of the clients held
        out of training. Override it to read more of the fit (``fit.samples``, ``fit.label_counts``)."""
        return cls(fit.num_clients, fit.per_round, fit.held_out, **options)

    @classmethod
    def refuse(cls, fit) -> Optional[ConfigError]:
        """A fit this sampler cannot serve, as one ConfigError (default: none)."""
        return None


@SAMPLERS.register("uniform")
class UniformSampler(Sampler):
    """S of M clients without replacement, never one of ``excluded`` (clients held out of training)."""

    def __init__(self, num_clients: int, per_round: int, excluded: Iterable[int] = ()):
        self.num_clients, self.per_round, self.excluded = num_clients, per_round, tuple(excluded)

    def sample(self, round_idx: int, rng: np.random.Generator) -> list[int]:
        if self.excluded:
            eligible = np.setdiff1d(np.arange(self.num_clients), self.excluded)
            return sorted(rng.choice(eligible, self.per_round, replace=False).tolist())
        return sorted(rng.choice(self.num_clients, self.per_round, replace=False).tolist())


@SAMPLERS.register("poisson")
class PoissonSampler(Sampler):
    """Each client independently with probability q (client-level DP's amplification by sampling); by name,
    q = S/M (S clients a round on average)."""

    releases_every_round = True

    def __init__(self, num_clients: int, rate: float):
        self.num_clients, self.poisson_rate = num_clients, rate

    @classmethod
    def from_fit(cls, fit, **options) -> Sampler:
        return cls(fit.num_clients, fit.per_round / fit.num_clients, **options)

    @classmethod
    def refuse(cls, fit) -> Optional[ConfigError]:
        if fit.held_out:  # the one place that refuses held-out clients under Poisson sampling
            field, other = ("model.privacy.sampling", "sampling fixed") if fit.privacy_sampling == "poisson" else \
                ("model.sampler", "model.sampler uniform")
            return ConfigError(field, "poisson may draw any client, so none can be held out of training; leave "
                               f"model.personal_new_clients unset, or use {other}")
        return None

    def sample(self, round_idx: int, rng: np.random.Generator) -> list[int]:
        return np.flatnonzero(rng.random(self.num_clients) < self.poisson_rate).tolist()


class ClientRunner(Part):
    """Who trains the round's clients, and how. Built from the loop's ``LocalTrainer``.

    ``run`` yields (position, (client, loss_sum, logs)) for each of ``positions``, in that order; ``reported``
    runs once a client's upload arrived and is finite (default: the callbacks' ``on_client_reported``).
    ``threads_each``: intra-op threads each client trains at (the global model is evaluated at as many);
    None: the process's."""

    threads_each: Optional[int] = None

    def __init__(self, trainer: LocalTrainer):
        self.trainer = trainer

    @classmethod
    def from_fit(cls, trainer: LocalTrainer, fit, **options) -> "ClientRunner":
        """The runner ``model.client_runner NAME`` (or a class path, ``init_args`` as ``options``) builds on the
        loop's trainer, reading what it needs of the fit (e.g. ``fit.parallel_clients``, ``fit.cohort_size``)."""
        return cls(trainer, **options)

    @classmethod
    def refuse(cls, fit) -> Optional[ConfigError]:
        """A fit this runner cannot train as the serial runner does, as one ConfigError naming
        ``model.client_runner`` (default: none); asked before the fit's first round."""
        return None

    def attach(self, trainer: LocalTrainer) -> "ClientRunner":
        """A runner given as an object (``model.client_runner`` from Python, or a callback's ``client_runner``) trains
        on the loop's trainer from here on."""
        self.trainer = trainer
        return self

    def run(self, positions: list[int], plan: RoundContext) -> Iterator[Trained]:
        raise NotImplementedError

    def reported(self, client) -> None:
        call_hook(self.trainer.callbacks, "on_client_reported", client)


@RUNNERS.register("serial")
class SerialRunner(ClientRunner):
    """One client at a time on the loop's working model."""

    def run(self, positions: list[int], plan: RoundContext) -> Iterator[Trained]:
        for position in positions:
            yield position, self.trainer.run_client(plan.clients[position], plan)


@SCHEDULES.register("synchronous")
class RoundSchedule(Part):
    """When the server steps. The default is the synchronous round: every planned client, then one step.
    ``times_clients``: it runs on a simulated system's clients (needs one; the others refuse one). ``epoch``: what
    one Lightning epoch is, ``"round"`` or ``"server step"`` (the progress bar and the summary say it)."""

    times_clients = False
    epoch = "round"

    @classmethod
    def from_fit(cls, fit, **options) -> "RoundSchedule":
        """The schedule ``model.schedule NAME`` (or a class path, ``init_args`` as ``options``) builds."""
        return cls(**options)

    @classmethod
    def refuse(cls, fit) -> Optional[ConfigError]:
        """A fit this schedule cannot run, as one ConfigError (default: none)."""
        return None

    def sampler(self, chosen: Sampler) -> Sampler:
        """Who is asked under this schedule; ``chosen`` is the one the options name (default: it)."""
        return chosen

    def run(self, engine, round_idx: int) -> Optional[torch.Tensor]:
        """One epoch of training: the reporting clients' mean loss, or None if nobody reported. ``engine`` is
        the loop; its schedule interface: ``synchronous_round``, ``task``, ``plan``, ``plan_one``, ``train``,
        ``new_sums``, ``count_traffic``, ``step_server``, ``num_samples``, ``restore_working_model``, ``blocks``
        (docs/architecture.md, "The round's seams")."""
        return engine.synchronous_round(round_idx)

    def planned(self, plan: RoundContext) -> None:
        """After the hooks' ``configure_round``: may set each task's ``max_steps`` or ``lost``."""

    def arrived(self, trained: Iterator[Trained], plan: RoundContext) -> Iterator[Trained]:
        """The trained clients, in plan order; a task marked ``lost`` here is not aggregated."""
        return trained
