"""What an algorithm's hooks see (docs/algorithms.md, "Writing an algorithm"; docs/write_your_own_algorithm.md).

Three typed contexts instead of the loop object:

- ``RoundContext``: the server's view before and after a round — its clients (``ClientTask``), the
  round's lr, the upload channels, the block partition, sizes, the client-state store.
- ``ClientContext``: one client while it trains — its id, the round, the round's lr (the one
  source: the local optimizer's lr schedule), weight decay and momentum, the working model as a flat vector and its
  gradient, x^r, the current minibatch, its upload, and its full gradient / minibatch gradient at x^r.
- ``ServerContext``: the aggregation — the received sums, the aggregated update, M, the blocks.

Each is built by ``fl_lightning.federation.loop.FederatedLoop``, or by hand in a test (``fl_lightning.assembly.toy``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from fl_lightning.federation.blocks import BlockPartition
from fl_lightning.federation.client_state import ClientStateStore
from fl_lightning.federation.messages import Payload, ReceivedSums

Ranges = list[tuple[int, int]]


@dataclass
class ClientTask:
    """One sampled client in one round, as the server planned it (``configure_round`` may change
    ``upload_ranges``, ``local_epochs``, ``lost``)."""

    client_id: int
    position: int  # index in this round's sample
    seed: int
    num_samples: int
    upload_ranges: Ranges  # slices [start, stop) of the flat model it sends
    local_epochs: int = 1
    pooled: bool = False  # centralised SGD: all clients' data in one place, nothing crosses a network
    lost: bool = False  # fails to report: it downloads and trains, but its upload never arrives
    max_steps: Optional[int] = None  # stop after this many local steps (partial work by a deadline)


@dataclass
class RoundContext:
    """The server's view of round ``round`` (0-based) before any client trains and after the update."""

    round: int
    lr: float  # the round's local lr
    clients: list[ClientTask]
    channels: dict[str, int]  # the server's sums this round: name → size (declare new ones here)
    num_clients: int  # M
    num_params: int  # d
    numel: int  # parameters and floating buffers: the size of the "delta" channel
    blocks: Optional[BlockPartition]
    client_state: ClientStateStore  # declare per-client tables here: client_state.table(name, size)
    device: torch.device
    total_samples: int  # Σ n_i over all M clients
    segments: tuple = ()  # fl_lightning.federation.flat.Segment of every tensor: where it lies in the flat vector
    poisson_rate: Optional[float] = None  # q when each client joined independently with probability q, else None
    # with poisson_rate: the upload ranges a joining client is given, each with equal probability, independently
    # of every other client (set by a block mask; None: the whole model). privacy reads it for expected counts.
    upload_choices: Optional[list] = None


@dataclass
class RoundPlanner:
    """The one constructor of ``RoundContext``: what every round's plan shares (the working model ``flat``, the
    clients' data, the block partition, the client-state store), for the loop, every schedule and a node."""

    flat: Any  # fl_lightning.federation.flat.FlatModel
    clients: Any  # fl_lightning.data.datamodule.ClientData
    blocks: Optional[BlockPartition]
    client_state: ClientStateStore

    def plan(self, round_idx: int, lr: float, tasks: list["ClientTask"],
             channels: Optional[dict[str, int]] = None, poisson_rate: Optional[float] = None) -> RoundContext:
        """Round ``round_idx``'s context; channels default to "delta" (model updates: parameters and buffers)
        and "control" (control-variate updates: parameters); ``poisson_rate``: the sampler's (RoundContext)."""
        flat = self.flat
        if channels is None:
            channels = {"delta": flat.numel, "control": flat.num_params}
        return RoundContext(round_idx, lr, tasks, channels, len(self.clients), flat.num_params, flat.numel,
                            self.blocks, self.client_state, flat.device, self.clients.offsets[-1],
                            tuple(flat.segments), poisson_rate)


class ClientContext:
    """One client of one round while it trains. ``params``/``grad`` are the working model's flat
    parameter vector and its gradient (views: change them in place), ``vector`` the parameters and
    floating buffers, ``global_vector`` x^r (read only), ``weight`` the weight of its update in Δ̄
    (n_i with weighted aggregation, else 1). In ``on_client_reported``, ``received`` holds the
    round's sums: ``received.add_sum(channel, values)`` adds what the server derives from this upload
    (the channel declared in ``round.channels``).

    ``scratch`` holds each callback's per-client values for this round, keyed by the callback itself
    (``client.scratch[self] = ClientControls(...)``): they live exactly as long as the client's round."""

    def __init__(self, task: ClientTask, round_idx: int, lr: float, weight_decay: float, momentum: float,
                 weight: float, vector: torch.Tensor, grad: torch.Tensor, global_vector: torch.Tensor,
                 full_gradient: Optional[Callable[["ClientContext"], torch.Tensor]] = None,
                 gradient_at_global: Optional[Callable[["ClientContext"], torch.Tensor]] = None):
        self.task = task
        self.round, self.lr, self.weight_decay, self.momentum = round_idx, lr, weight_decay, momentum
        self.weight = weight
        self.vector, self.grad, self.global_vector = vector, grad, global_vector
        self.num_params = grad.numel()
        self.params = vector[:self.num_params]
        self.global_params = global_vector[:self.num_params]
        self.upload, self.download = Payload(), Payload()
        self.batch: tuple = ()  # the current local minibatch (x, y), augmented
        self.batch_rng_state: Optional[torch.Tensor] = None  # the global RNG before the batch's forward
        self.steps = 0  # local steps taken so far (T once training ended)
        self.received: Optional[ReceivedSums] = None  # the round's sums, set once the upload arrived
        self.scratch: dict[object, Any] = {}
        self.full_gradient_value: Optional[torch.Tensor] = None  # ∇f_i(x^r), once computed
        self._full_gradient, self._gradient_at_global = full_gradient, gradient_at_global

    # One classmethod per way a context arises (the constructor's positional form is theirs only).
    @classmethod
    def on_trainer(cls, task: ClientTask, plan: "RoundContext", trainer, weight: float,
                   **functions) -> "ClientContext":
        """A client of ``plan`` on a ``LocalTrainer``'s working model (trained there, or rebuilt there from a node's
        reply): the local optimizer's weight decay and momentum, the flat vectors, x^r."""
        return cls.with_optimizer(task, plan.round, plan.lr, trainer.optimizer.param_groups[0], weight,
                                  trainer.flat.vector, trainer.flat.grad, trainer.global_vector, **functions)

    @classmethod
    def with_optimizer(cls, task: ClientTask, round_idx: int, lr: float, group: dict, weight: float,
                       vector: torch.Tensor, grad: torch.Tensor, global_vector: torch.Tensor,
                       **functions) -> "ClientContext":
        """A client trained by an optimizer whose param group ``group`` gives weight decay and momentum: a row of
        the batched runner's stack, or the user's own Trainer (its optimizer's lr)."""
        return cls(task, round_idx, lr, group.get("weight_decay", 0.0), group.get("momentum", 0.0), weight, vector,
                   grad, global_vector, **functions)

    @classmethod
    def lost(cls, task: ClientTask, round_idx: int, vector: torch.Tensor, grad: torch.Tensor,
             global_vector: torch.Tensor) -> "ClientContext":
        """A sampled client whose training never happened or never reached the server: its task is lost (it counts
        as not reported), and nothing it downloaded is counted (an empty ``download``)."""
        task.lost = True
        return cls(task, round_idx, float("nan"), 0.0, 0.0, 1.0, vector, grad, global_vector)

    def keep_final_model(self) -> None:
        """Once trained, ``vector``/``params`` become a copy of the working model y, so
        ``on_client_reported`` reads this client's y while the working model trains another client
        (fl_lightning.federation.parallel); ``grad`` is then no longer this client's."""
        self.vector = self.vector.clone()
        self.params = self.vector[:self.num_params]

    @property
    def client_id(self) -> int:
        return self.task.client_id

    @property
    def num_samples(self) -> int:
        return self.task.num_samples

    @property
    def upload_ranges(self) -> Ranges:
        return self.task.upload_ranges

    def full_gradient(self) -> torch.Tensor:
        """∇f_i(x^r) over all the client's data, computed once per round: call it first in
        ``on_client_start``, while the working model is still x^r."""
        if self.full_gradient_value is None:
            if self._full_gradient is None:
                raise RuntimeError("this ClientContext was built without a full_gradient function")
            self.full_gradient_value = self._full_gradient(self)
        return self.full_gradient_value

    def gradient_at_global(self) -> torch.Tensor:
        """∇f_i(x^r; ζ) for the current minibatch ζ (same inputs, same dropout mask); needs
        ``replays_minibatch = True`` on the calling callback."""
        if self._gradient_at_global is None:
            raise RuntimeError("this ClientContext was built without a gradient_at_global function")
        return self._gradient_at_global(self)


@dataclass
class ServerContext:
    """The server step of round ``round``: ``update`` (Δ̄ over the parameters, applied as
    x ← x + η_g·update by the server optimizer) may be changed in place."""

    round: int
    update: torch.Tensor
    received: ReceivedSums
    global_params: torch.Tensor  # x^r's parameters (before the step)
    num_clients: int  # M
    blocks: Optional[BlockPartition]
