"""The server of a federation whose clients are the user's own ``Trainer.fit`` calls (docs/callbacks_outside_fl_lightning.md).

``InProcessServer`` runs the same ``FederatedLoop`` as ``fl-lightning fit`` — its sampler (seeded by the run seed and
the round), the algorithm's ``configure_round`` (FedBCGD's blocks, the client-state tables), the server hooks, the
received sums and the server optimizer (server momentum, FedAdam, FedDyn's h, ...) — on a copy of the user's model;
only who trains the clients differs: each sampled client is a ``ClientJob`` (fl_lightning.federation.lightning_client)
the user's script trains with ``Trainer(callbacks=[job.callback]).fit(...)``. So on the same data, order and local
settings it ends with the fit's global model::

    server = InProcessServer(model, algorithm="fedbcgd", clients=8, per_round=4, seed=0)
    for _ in range(rounds):
        for job in server.round():                # the round's sampled clients, in plan order
            shard = shards[job.client_id]
            Trainer(max_epochs=1, callbacks=[job.callback]).fit(model, DataLoader(shard, 50, sampler=job.sampler(shard)))
    model.load_state_dict(server.global_state(), strict=False)

Its parts — the algorithm, codec, sampler, aggregator and attack, taken as fit takes them — are chosen and refused
by the connector (fl_lightning.assembly.connector's ``outside_parts``: the parts' own ``refuse(fit)``, at construction).
Per-client state (c_i, h_i, residuals) lives in the client-state store in ``directory``; ``save(path)`` between
rounds and ``load(path)`` in a new process (same options, same ``directory``) resume exactly.
"""
from __future__ import annotations

import copy
import math
import os
import tempfile
import uuid
from typing import Callable, Iterator, Optional, Sequence

import torch
from torch import nn

from fl_lightning.aggregation import spec_of
from fl_lightning.assembly.connector import accumulation_refusal, choose_algorithm, client_hooks, outside_parts
from fl_lightning.assembly.fit import Fit, hook_traits
from fl_lightning.errors import ConfigError, refuse_in_one_line
from fl_lightning.federation.blocks import partition_for
from fl_lightning.federation.client_state import ClientStateStore
from fl_lightning.federation.contexts import ClientContext
from fl_lightning.federation.flat import FlatModel
from fl_lightning.federation.lightning_client import ClientJob
from fl_lightning.federation.loop import FederatedLoop, LocalConfig
from fl_lightning.federation.messages import ReceivedSums
from fl_lightning.federation.seams import ClientRunner, SerialRunner
from fl_lightning.federation.seeding import run_seed_set
from fl_lightning.runs.files import save_atomically

FIELD = "InProcessServer"
FORMAT = 1


class ClientSizes:
    """What the loop reads of the clients' data when it holds none: M and, if given, each client's n_i."""

    def __init__(self, num_clients: int, num_samples: Optional[Sequence[int]]):
        self.sizes = list(num_samples) if num_samples is not None else [0] * num_clients
        self.offsets = [0]
        for n in self.sizes:
            self.offsets.append(self.offsets[-1] + int(n))

    def __len__(self) -> int:
        return len(self.sizes)

    def num_samples(self, client: int) -> int:
        return int(self.sizes[client])


class InProcessServer:
    """Args:
        model: the user's model (a LightningModule; a copy holds x^r).
        algorithm: a registry name (``fl-lightning algorithms``), an ``Algorithm`` or its options as a mapping.
        clients: M; per_round: S (default M); seed: the run seed (``fl-lightning fit --seed_everything``).
        compression: a codec name or ``Codec`` (``--model.compression``), None: the one the name implies.
        local_epochs: checked against each client's ``Trainer(max_epochs=...)`` (None: not checked).
        num_samples: n_i per client (needed by weighted_aggregation and FedDC's size scaling; checked per fit).
        weighted_aggregation, grad_clip, server_optimizer: as ``--model.*`` (server_optimizer: a callable of the
            parameter list, e.g. ``lambda p: torch.optim.Adam(p, lr=0.01)``).
        directory: the client-state store (default: a new temporary folder).
        field: what its refusals name (``AlgorithmStrategy`` builds one and gives its own name).
        aggregator, attack, sampler: as ``--model.aggregator``, ``--model.attack``, ``--model.sampler`` (a name, a class
            path, ``{class_path, init_args}`` or an object), refused at construction in one line as ``fit`` refuses
            them; ``privacy``: refused (client-level DP would clip inside your Trainers: use ``fl-lightning fit``).
    """

    def __init__(self, model: nn.Module, algorithm="fedavg", clients: int = 1, per_round: Optional[int] = None,
                 seed: int = 0, compression=None, local_epochs: Optional[int] = None,
                 num_samples: Optional[Sequence[int]] = None, weighted_aggregation: bool = False,
                 grad_clip: Optional[float] = None, server_optimizer: Optional[Callable] = None,
                 directory: Optional[str] = None, aggregator=None, attack=None, sampler=None, privacy=None,
                 runner: type[ClientRunner] = SerialRunner, field: str = FIELD):
        self.field = field  # what its refusals name (AlgorithmStrategy builds one)
        self.algorithm, self.codec = choose_algorithm(algorithm, compression, self.field)
        if clients < 1 or not 1 <= (clients if per_round is None else per_round) <= clients:  # 0 is not "all"
            raise refuse_in_one_line(ConfigError(f"{self.field}(per_round=...)", f"needs 1 ≤ per_round ≤ clients "
                                                 f"= {clients}, got {per_round}"))
        if num_samples is not None and len(num_samples) != clients:
            raise refuse_in_one_line(ConfigError(f"{self.field}(num_samples=...)", f"gives {len(num_samples)} sizes "
                                                 f"for {clients} clients: one per client, in client order"))
        self.algorithm.check_with(weighted_aggregation, self.codec)
        self.net = copy.deepcopy(model).cpu()
        if not any(p.requires_grad for p in self.net.parameters()):
            raise refuse_in_one_line(ConfigError(f"{self.field}(model=...)", f"{type(model).__name__} has no trainable "
                                                 "parameters, so there is nothing to federate: give the network "
                                                 "your Trainers fit"))
        self.algorithm.check_network(self.net)  # before callbacks(): e.g. FedPer, FedBN find their layers here
        algorithm_hooks, codec_hooks = client_hooks(self.algorithm, self.codec)
        callbacks = algorithm_hooks + codec_hooks
        if num_samples is None and (weighted_aggregation or getattr(self.algorithm, "scale_alpha_by_size", False)):
            raise refuse_in_one_line(ConfigError(f"{self.field}(num_samples=...)", "weights clients by their sizes "
                                                 "n_i: give num_samples=[n_0, ..., n_{M-1}]"))
        self.seed, self.per_round, self.num_clients = int(seed), clients if per_round is None else per_round, clients
        self.num_samples = list(num_samples) if num_samples is not None else None
        blocks = partition_for(self.net, self.algorithm)
        fit = Fit(num_clients=clients, per_round=self.per_round, samples=tuple(num_samples or ()),
                  algorithm=self.algorithm.name, algorithm_hooks=tuple(hook_traits(cb) for cb in algorithm_hooks),
                  hooks=tuple(hook_traits(cb) for cb in callbacks),
                  codec_stateless=None if self.codec is None else self.codec.stateless,
                  codec_deployable=None if self.codec is None else self.codec.deployable)
        parts = outside_parts(self.field, fit, blocks, self.seed, aggregator, attack, sampler, privacy,
                              runner)  # refused here
        self.robust, self.sampler, self.sampler_spec = parts.robust, parts.sampler, parts.sampler_spec
        self.flat = FlatModel(self.net, order=blocks.order if blocks else None)
        self.global_vector = self.flat.vector.detach().clone()
        params = [self.global_vector[:self.flat.num_params]]
        self.server_optimizer = (server_optimizer or self.algorithm.server_optimizer)(params)
        placeholder = torch.optim.SGD([self.flat.params], lr=math.nan)  # the clients' own optimizers train
        self.directory = directory or tempfile.mkdtemp(prefix="fl_lightning_server_")
        os.makedirs(self.directory, exist_ok=True)
        self.client_state = ClientStateStore(clients, self.directory)
        self.grad_clip = grad_clip if grad_clip is not None else self.algorithm.default_grad_clip()
        self.local_epochs, self.weighted = local_epochs, weighted_aggregation
        config = LocalConfig(self.per_round, local_epochs or 1, 1, weighted_aggregation, self.grad_clip)
        callbacks += [self.robust] if self.robust is not None else []
        self.loop = FederatedLoop(self.flat, ClientSizes(clients, num_samples), None, placeholder, config, callbacks,
                                  self.global_vector, self.server_optimizer, self.client_state, blocks=blocks,
                                  received=self.robust.received_sums if self.robust is not None else ReceivedSums,
                                  runner=runner, sampler=self.sampler)
        self.runner = self.loop.runner  # who trains the clients: the user's Trainers here (AlgorithmStrategy: nodes)
        self.callbacks = self.loop.callbacks
        self.run_id = uuid.uuid4().hex
        self.round_idx = 0
        self.jobs: Optional[list[ClientJob]] = None
        self._plan = None

    # -- a round ---------------------------------------------------------------------------------
    def start_round(self) -> list[ClientJob]:
        """The round's sampled clients, in plan order, each a job for one ``Trainer.fit``."""
        if self.jobs is not None:
            raise refuse_in_one_line(ConfigError(self.field, f"round {self.round_idx + 1} is still open: end_round() "
                                                 "first (or iterate server.round() to its end)"))
        with run_seed_set(self.seed):
            self._plan = plan = self.loop.configure_round(self.round_idx)
        if self.local_epochs is None and any(task.local_epochs != 1 for task in plan.clients):
            raise refuse_in_one_line(ConfigError(f"{self.field}(local_epochs=...)", f"{self.algorithm.name} sets each "
                                                 "client's local epochs itself (e.g. adds personal epochs): give "
                                                 "the epochs you train, local_epochs=E, and fit each job for "
                                                 "Trainer(max_epochs=job.epochs)"))
        segments = tuple((s.name, s.shape) for s in self.flat.segments)
        refusal = accumulation_refusal(self.algorithm, self.callbacks)
        self.jobs = [ClientJob(self.run_id, self.round_idx, task, plan, self.callbacks, self.global_vector, segments,
                               self.algorithm.name, self.grad_clip, self.weighted,
                               None if self.local_epochs is None else task.local_epochs, refusal,
                               deliver=None, check=self._check) for task in plan.clients]
        return list(self.jobs)

    def _check(self, job: ClientJob) -> None:
        if job.run_id != self.run_id or self.jobs is None or job.round != self.round_idx or \
                not any(job is mine for mine in self.jobs):
            raise refuse_in_one_line(ConfigError("ClientJob", f"this job is round {job.round + 1}'s of run "
                                                 f"{job.run_id[:8]}, the server is at round {self.round_idx + 1} "
                                                 f"of run {self.run_id[:8]}: train the jobs of the current round"))

    def end_round(self) -> Optional[torch.Tensor]:
        """Aggregates the jobs that were trained (a job never trained is a client that failed to report), the
        server steps as in ``fl-lightning fit``; the reporting clients' mean local loss, or None."""
        if self.jobs is None:
            raise refuse_in_one_line(ConfigError(self.field, "no round is open: call start_round() (or iterate "
                                                 "server.round()) first"))
        plan, jobs = self._plan, self.jobs
        trained = [(position, job.result if job.result is not None else
                    (ClientContext.lost(job.task, job.round, self.flat.vector, self.flat.grad, self.global_vector),
                     torch.zeros(()), None))
                   for position, job in enumerate(jobs)]
        with run_seed_set(self.seed):
            loss = self.loop.finish_round(self.round_idx, plan, iter(trained))
        self.jobs, self._plan = None, None
        self.round_idx += 1
        return loss

    def round(self) -> Iterator[ClientJob]:
        """``start_round()``, each job, then ``end_round()`` once the loop over them ends."""
        yield from self.start_round()
        self.last_loss = self.end_round()

    def run_round(self, fit: Callable[[ClientJob], None]) -> Optional[torch.Tensor]:
        """One round: ``fit(job)`` trains each sampled client (the user's ``Trainer.fit`` with ``job.callback``)."""
        for job in self.start_round():
            fit(job)
        return self.end_round()

    # -- the global model, the traffic, the state ----------------------------------------------------
    def global_state(self) -> dict[str, torch.Tensor]:
        """x^r as a state dict of the user's model (integer buffers: the model's initial ones)."""
        self.flat.load(self.global_vector)
        return {name: value.detach().clone() for name, value in self.net.state_dict().items()}

    @property
    def comm(self):
        """Bytes and floats each way so far (fl_lightning.federation.messages.CommMeter: ``upload_d``, ...)."""
        return self.loop.comm

    def state_dict(self) -> dict:
        if self.jobs is not None:
            raise refuse_in_one_line(ConfigError(self.field, f"round {self.round_idx + 1} is open: save between "
                                                 "rounds"))
        return {"format": FORMAT, "run_id": self.run_id, "round": self.round_idx, "seed": self.seed,
                "algorithm": self.algorithm.spec(), **self._robust_specs(), "num_clients": self.num_clients,
                "per_round": self.per_round, "global_vector": self.global_vector.clone(),
                "server_optimizer": self.server_optimizer.state_dict(),
                "callbacks": [cb.state_dict() for cb in self.callbacks], "client_state": self.client_state.state_dict(),
                "comm": self.loop.comm.state_dict(), "parts": self.loop.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if not isinstance(state, dict) or state.get("format") != FORMAT or "global_vector" not in state:
            raise refuse_in_one_line(ConfigError(f"{self.field}.load", "is not a saved InProcessServer: give the file "
                                                 "its save(path) wrote"))
        saved, now = state["global_vector"].numel(), self.global_vector.numel()
        if saved != now:
            raise refuse_in_one_line(ConfigError(f"{self.field}.load", f"the saved server's model has {saved} values, "
                                                 f"this one {now}: load a save of the same network"))
        for name, now in (("seed", self.seed), ("algorithm", self.algorithm.spec()), *self._robust_specs().items(),
                          ("num_clients", self.num_clients), ("per_round", self.per_round)):
            if state.get(name) != now:
                raise refuse_in_one_line(ConfigError(f"{self.field}({name}=...)", f"is {now!r} now but "
                                                     f"{state.get(name)!r} in the saved server: resume with the "
                                                     "same options"))
        self.run_id, self.round_idx = state["run_id"], int(state["round"])
        self.global_vector.copy_(state["global_vector"])
        self.flat.load(self.global_vector)
        self.server_optimizer.load_state_dict(state["server_optimizer"])
        for callback, saved in zip(self.callbacks, state["callbacks"]):
            if saved:
                callback.load_state_dict(saved)
        self.client_state.load_state_dict(state["client_state"], self.directory)
        self.loop.comm.load_state_dict(state["comm"])
        self.loop.load_state_dict(state["parts"])

    def _robust_specs(self) -> dict:
        """The parts beside the algorithm that decide the numbers, as recorded (checked at a load)."""
        if self.robust is None:
            return {"aggregator": None, "attack": None, "sampler": self.sampler_spec}
        return {"aggregator": spec_of(self.robust.configured), "attack": spec_of(self.robust.attack),
                "sampler": self.sampler_spec}

    def save(self, path: str) -> None:
        """The server's state between rounds, written atomically (the client rows stay in ``directory``)."""
        save_atomically(self.state_dict(), path)

    def load(self, path: str) -> "InProcessServer":
        self.load_state_dict(torch.load(path, weights_only=True))
        return self
