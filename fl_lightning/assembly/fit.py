"""``Fit``: what one fit is, described once before its first round, and the only thing its parts read to decide
whether they can serve it (``refuse(fit)``) and how to build themselves (``from_fit(fit)``): the clients, the
round's and the local training's settings, the system's options, and the traits of the fit's other parts — never
their classes (docs/architecture.md, "Choosing a fit's parts"). Built by fl_lightning.assembly.connector; the parts of the round's core (fl_lightning.federation) take it as
an argument and never import it."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Optional

from fl_lightning.errors import ConfigError
from fl_lightning.federation.hooks import FLCallback
from fl_lightning.federation.parallel import global_rng_draw
from fl_lightning.federation.user_module import is_lightning

CLIENT_SIDE_HOOKS = ("on_client_start", "on_local_gradient", "on_local_step_end", "on_client_end", "on_upload",
                     "on_client_reported")


@dataclass(frozen=True)
class HookTraits:
    """What a fit's parts need to know of one FLCallback (fl_lightning.federation.hooks)."""

    name: str  # its class name, for messages only
    keeps_client_state: bool  # per-client vectors across rounds in the client-state store (c_i, h_i, residuals)
    thread_safe: bool  # its client hooks may run for two clients at once
    uploads_one_block: bool  # each client uploads one block of the division and the shared block (FedBCGD)
    changes_local_training: bool  # its client hooks change what a client computes or sends
    configures_messages: bool  # its configure_round only sizes the round's messages (a codec)
    pools_clients_data: bool = False  # it trains on every client's data pooled in one place (centralised SGD)
    counts_local_steps: bool = False  # it reads each client's local optimizer steps τ_i (FedNova)
    uploads_control_variates: bool = False  # its clients upload Δc_i beside the update (SCAFFOLD, FedBCGD+)


def hook_traits(callback) -> HookTraits:
    """The traits ``callback`` declares (``keeps_client_state``, ``uploads_one_block``, ``changes_local_training``,
    ``thread_safe``, ``configures_messages``, ``pools_clients_data``, ``counts_local_steps``,
    ``uploads_control_variates``);
    ``changes_local_training`` undeclared (None) is True for a callback that overrides a client-side hook."""
    changes = getattr(callback, "changes_local_training", None)
    if changes is None:
        changes = any(getattr(type(callback), hook, None) is not getattr(FLCallback, hook)
                      for hook in CLIENT_SIDE_HOOKS)
    return HookTraits(type(callback).__name__, bool(getattr(callback, "keeps_client_state", False)),
                      bool(getattr(callback, "thread_safe", True)), bool(getattr(callback, "uploads_one_block", False)),
                      bool(changes), bool(getattr(callback, "configures_messages", False)),
                      bool(getattr(callback, "pools_clients_data", False)),
                      bool(getattr(callback, "counts_local_steps", False)),
                      bool(getattr(callback, "uploads_control_variates", False)))


@dataclass(frozen=True)
class NetworkTraits:
    """What the parts need to know of the network. ``global_rng_draw`` runs one training forward the first time it is
    read (only a part that trains clients at once asks): the layer whose forward draws from torch's global
    generator, as ``"Dropout at 'features.3'"``, or None."""

    is_lightning: bool  # a LightningModule (its training_step is the loss)
    floating_buffers: bool  # floating-point buffers, e.g. BatchNorm running statistics
    batchnorm_statistics: bool  # BatchNorm layers that track running statistics
    dropout_layers: tuple[str, ...]  # names of its nn.Dropout* modules
    probe_global_rng: Callable[[], Optional[str]] = field(default=lambda: None, repr=False, compare=False)

    @cached_property
    def global_rng_draw(self) -> Optional[str]:
        return self.probe_global_rng()


def network_traits(flat, loss_fn: Callable, clients, batch_size: int) -> NetworkTraits:
    """The traits of the network ``flat`` holds; its global-generator probe runs one minibatch of client 0 when
    first asked (fl_lightning.federation.parallel.global_rng_draw)."""
    from torch import nn

    net = flat.net
    return NetworkTraits(is_lightning(net), flat.numel != flat.num_params,
                         any(isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats
                             for m in net.modules()),
                         tuple(name for name, m in net.named_modules() if isinstance(m, nn.modules.dropout._DropoutNd)),
                         lambda: global_rng_draw(flat, loss_fn, clients, batch_size))


@dataclass(frozen=True)
class Fit:
    """One fit, frozen before its first round. ``samples``: each client's training samples; ``label_counts``: each
    client's samples per class (None when the task has no classes); ``held_out``: clients never trained
    (pval_new/*). ``schedule_epoch``: what one Lightning epoch is under the chosen schedule, ``"round"`` or
    ``"server step"``. Every field has a default so that a test or a part's author can describe a fit in a line."""

    num_clients: int  # M
    per_round: int  # S = model.clients_per_round
    samples: tuple[int, ...] = ()
    label_counts: Optional[tuple[tuple[int, ...], ...]] = None
    held_out: tuple[int, ...] = ()
    batch_size: int = 50
    local_epochs: int = 1
    local_optimizer: str = "sgd"  # or "network": the network's own configure_optimizers
    local_trainer: bool = False  # clients train in their own pl.Trainer (model.local_trainer)
    parallel_clients: int = 1  # K
    cohort_size: Optional[int] = None  # B, clients per batched step
    client_dropout: float = 0.0
    privacy_sampling: Optional[str] = None  # model.privacy.sampling ("fixed", "poisson"); None without model.privacy
    population: Any = None  # model.system's simulated clients (None without model.system)
    round_policy: Any = None  # model.round_policy (None: the default, or no model.system)
    asynchronous: Any = None  # model.asynchronous's options (None: synchronous rounds)
    schedule_epoch: str = "round"
    algorithm: str = "fedavg"  # its registry name, for messages
    algorithm_hooks: tuple[HookTraits, ...] = ()  # the algorithm's own FLCallbacks
    hooks: tuple[HookTraits, ...] = ()  # every FLCallback of the fit, in the order they run
    codec_stateless: Optional[bool] = None  # the codec keeps no per-client state (None: no codec)
    codec_deployable: Optional[bool] = None  # the codec's messages travel as Flower records (None: no codec)
    processes: int = 1  # the Lightning processes that train the fit (trainer.world_size)
    network: NetworkTraits = NetworkTraits(False, False, False, ())

    @property
    def private(self) -> bool:
        return self.privacy_sampling is not None


def first_refusal(*refusals: Optional[ConfigError]) -> None:
    """Raises the first refusal that is not None."""
    for refusal in refusals:
        if refusal is not None:
            raise refusal
