"""An existing Lightning training script as one federated client, for every algorithm (docs/callbacks_outside_fl_lightning.md).

``FederatedClient`` is an ordinary Lightning callback for the user's own ``Trainer`` (either namespace: its hooks
are called by name), built from one ``ClientJob`` — the server's message to one client for one round: x^r, the
client's task (its upload ranges: FedBCGD's block and the shared one), the round's plan and the algorithm's
hooks with their server state (c, h, the codec's options). One ``Trainer.fit`` is the client's round:

    on_fit_start        the user's module becomes the working model (its parameters views of one flat vector,
                        fl_lightning.federation.flat), loaded with x^r
    on_train_start      on_client_start (c_i, h_i, ∇f_i(x^r) for SVRG), the client's dropout stream
    each optimizer step the same ``ClientHooks`` as our loop's user-Trainer path (fl_lightning.federation.trainer_path):
                        the algorithm's grad clip and on_local_gradient (proximal and control-variate corrections,
                        FedDyn's terms, SVRG) before it, on_local_step_end (freezing) and the step count after it
    on_train_end        Δ = y − x^r over the upload ranges, on_client_end, on_upload (a codec): the upload as our
                        loop's ``ClientContext`` holds it (exact byte count: ``upload.nbytes``), handed to the job

The user's optimizer, precision, gradient clipping, accumulation, loggers and callbacks stay theirs; the local loss
is their ``training_step``. The server side is fl_lightning.assembly.outside (``InProcessServer``) or a Flower
strategy (fl_lightning.deploy.strategy); either runs the same ``FederatedLoop`` hooks as ``fl-lightning fit``.
"""
from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Callable, Optional

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Sampler

from fl_lightning.errors import ConfigError, refuse_in_one_line
from fl_lightning.federation.contexts import ClientContext, ClientTask, RoundContext
from fl_lightning.federation.flat import FlatModel
from fl_lightning.federation.local_training import LocalConfig, LocalTrainer, call_hook
from fl_lightning.federation.namespaces import lightning_base
from fl_lightning.federation.seeding import (Stream, generator, global_rng_state, isolated_rng, seed_global_rng,
                                             stream_seed)
from fl_lightning.federation.trainer_path import ClientHooks
from fl_lightning.federation.user_module import RecordedLogs, logging_into

FIELD = "FederatedClient"


@dataclass(eq=False)
class ClientJob:
    """The server's message to one client for one round (what crosses the network in a deployment)."""

    run_id: str
    round: int
    task: ClientTask
    plan: RoundContext
    callbacks: list  # the algorithm's FLCallbacks, holding the server's state (c, h, ...)
    global_vector: torch.Tensor  # x^r: parameters, then floating buffers
    segments: tuple  # (name, shape) of each tensor in the flat layout (the block division's order)
    algorithm: str  # the algorithm's registry name and options, as the server runs it
    grad_clip: Optional[float] = None
    weighted: bool = False
    local_epochs: Optional[int] = None  # None: the Trainer's own max_epochs
    refuse_accumulation: Optional[str] = None  # why this algorithm cannot count accumulated micro-batches as steps
    deliver: Optional[Callable[["ClientJob"], None]] = None  # called once the fit ended with ``result`` set
    check: Optional[Callable[["ClientJob"], None]] = None  # refuses a stale job (another run or round) before the fit
    result: Optional[tuple] = None  # (ClientContext, loss sum, RecordedLogs) once trained
    extra: dict = field(default_factory=dict)

    @property
    def client_id(self) -> int:
        return self.task.client_id

    @property
    def epochs(self) -> int:
        """The local epochs the server planned for this client (``Trainer(max_epochs=job.epochs)``)."""
        return self.task.local_epochs

    @property
    def callback(self) -> "FederatedClient":
        """The Lightning callback that trains this job in the user's Trainer."""
        return FederatedClient(self)

    def sampler(self, dataset) -> "RoundOrder":
        """The order ``fl-lightning fit`` draws this client's minibatches in (``DataLoader(..., sampler=...)``):
        with it a plain script gives the fit's numbers; with the user's own shuffle, their order."""
        return RoundOrder(self.task.seed, len(dataset))


class RoundOrder(Sampler):
    """A new permutation per epoch from the client's round seed (the fit's ``ClientBatches``: one generator)."""

    def __init__(self, seed: int, size: int):
        self.size, self.order = size, generator(seed)

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        return iter(torch.randperm(self.size, generator=self.order).tolist())


def user_loss(net, batch) -> torch.Tensor:
    """The user's ``training_step`` loss on ``batch``; what it logs is discarded (a replayed or extra pass)."""
    with logging_into(net, RecordedLogs()):
        out = net.training_step(batch, 0)
    return out["loss"] if isinstance(out, dict) else out


def batch_size_of(batch) -> int:
    while isinstance(batch, (list, tuple, dict)):
        batch = next(iter(batch.values())) if isinstance(batch, dict) else batch[0]
    return len(batch)


class TrainerClient(LocalTrainer):
    """Our ``LocalTrainer`` over the user's module: its upload (``end_client``), its ∇f_i(x^r; ζ) replay
    (``gradient_at_global``) and the hooks' lists are the loop's own; ∇f_i(x^r) is one in-order pass over the
    user's training data with their ``training_step``."""

    def __init__(self, flat: FlatModel, job: ClientJob, global_vector: torch.Tensor, forward_context, loader):
        config = LocalConfig(1, grad_clip=job.grad_clip)
        super().__init__(flat, None, lambda net, *parts: user_loss(net, self.batch), None, config, job.callbacks,
                         global_vector, forward_context)
        self.loader = loader
        self.batch = None  # the minibatch as the user's DataLoader gave it (client.batch: its parts, as (x, y))

    def full_gradient(self, client: ClientContext) -> torch.Tensor:
        from pytorch_lightning.utilities import move_data_to_device

        loader = self.loader
        if getattr(loader, "batch_size", None) is not None:  # in order, as the fit's full pass
            loader = DataLoader(loader.dataset, batch_size=loader.batch_size, collate_fn=loader.collate_fn)
        device, total_size = self.flat.device, len(loader.dataset)
        seed_global_rng(stream_seed(client.task.seed, Stream.FULL_GRADIENT_DROPOUT), device)
        total = torch.zeros_like(self.flat.grad)
        for batch in loader:
            batch = move_data_to_device(batch, device)
            with self.forward_context():
                loss = user_loss(self.flat.net, batch)
            total.add_(self.flat.backward(loss, out=self._scratch_grad()), alpha=batch_size_of(batch) / total_size)
        self.flat.load(self.global_vector)  # undo what the pass did to BatchNorm statistics
        return total


class UserStepHooks(ClientHooks):
    """trainer_path's ``ClientHooks`` on the user's own backward: their per-parameter gradients are gathered into
    the flat gradient first (zeros for unused parameters, as the fit's), and the parameters then step on views of it."""

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        flat = self.local.flat
        for segment, param in zip(flat.segments, flat._param_list):
            view = flat.grad[segment.start:segment.stop]
            if param.grad is None:
                view.zero_()
            else:
                view.copy_(param.grad.reshape(-1))
            param.grad = view.view(segment.shape)
        super().on_before_optimizer_step(trainer, pl_module, optimizer)


class FederatedClient(pl.Callback):
    """The client side of one job in the user's own Trainer (module docstring). Built by ``job.callback``;
    ``algorithm``: the registry name this client expects (refused in one line if the server runs another)."""

    def __init__(self, job: ClientJob, algorithm: Optional[str] = None):
        if not isinstance(job, ClientJob):
            raise refuse_in_one_line(ConfigError(FIELD, f"takes the server's ClientJob (for job in server.round(): "
                                                 f"... callbacks=[job.callback]), got {type(job).__name__}"))
        if algorithm is not None and algorithm != job.algorithm:
            raise refuse_in_one_line(ConfigError(f"{FIELD}(algorithm=...)", f"this client runs {algorithm} but the "
                                                 f"server runs {job.algorithm}: give both the same algorithm"))
        self.job = job
        self.client: Optional[ClientContext] = None
        self.num_samples = 0
        self._stack = ExitStack()
        self._hooks: Optional[UserStepHooks] = None
        self._loss = None

    def on_fit_start(self, trainer, pl_module) -> None:
        job = self.job
        if job.check is not None:
            job.check(job)
        if job.result is not None:
            raise refuse_in_one_line(ConfigError(FIELD, f"client {job.client_id}'s job of round {job.round + 1} was "
                                                 "trained already: use each round's new jobs (server.round())"))
        if job.local_epochs is not None and trainer.max_epochs != job.local_epochs:
            raise refuse_in_one_line(ConfigError("Trainer(max_epochs=...)", f"the server plans {job.local_epochs} "
                                                 f"local epoch(s) per client, this Trainer runs {trainer.max_epochs}: "
                                                 f"set max_epochs=job.epochs"))
        if job.refuse_accumulation and trainer.accumulate_grad_batches != 1:
            raise refuse_in_one_line(ConfigError("Trainer(accumulate_grad_batches=...)", job.refuse_accumulation))
        check_module(pl_module, job.segments)
        order = [name for name, _ in job.segments]
        flat = FlatModel(pl_module, order=order)
        global_vector = job.global_vector.to(flat.device, copy=True)
        flat.load(global_vector)  # y ← x^r
        self.local = TrainerClient(flat, job, global_vector, trainer.precision_plugin.forward_context, None)

    def on_train_start(self, trainer, pl_module) -> None:
        job, local = self.job, self.local
        loader = trainer.train_dataloader
        self.local.loader = loader
        self.num_samples = len(loader.dataset) if hasattr(loader, "dataset") else 0
        if job.task.num_samples and self.num_samples and self.num_samples != job.task.num_samples:
            raise refuse_in_one_line(ConfigError(FIELD, f"client {job.client_id} trains on {self.num_samples} "
                                                 f"samples but the server was told {job.task.num_samples}: give it "
                                                 "the client's own data (num_samples=[...] in client order)"))
        optimizer = trainer.optimizers[0]
        group = optimizer.param_groups[0]
        weight = float(self.num_samples if job.weighted else 1.0)
        if not job.task.num_samples:  # the server did not know n_i: the client says (weights, Ditto's phases)
            job.task.num_samples = self.num_samples
        flat = local.flat
        self.client = ClientContext.with_optimizer(job.task, job.round, group["lr"], group, weight, flat.vector,
                                                   flat.grad, local.global_vector, full_gradient=local.full_gradient,
                                                   gradient_at_global=local.gradient_at_global)
        self.client.download.add("model", 0, local.global_vector)
        self._hooks = UserStepHooks(local, self.client)
        self._hooks._steps = trainer.global_step
        self._stack.enter_context(isolated_rng(flat.device))
        call_hook(local.callbacks, "on_client_start", self.client)
        seed_global_rng(stream_seed(job.task.seed, Stream.DROPOUT), flat.device)
        self._loss = torch.zeros((), device=flat.device)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.local.batch = batch
        self.client.batch = tuple(batch) if isinstance(batch, (list, tuple)) else (batch,)
        if self.local._replays_minibatch:  # SVRG: ∇f_i(x^r; ζ) replays ζ's dropout mask
            self.client.batch_rng_state = global_rng_state(self.local.flat.device)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self._hooks.on_before_optimizer_step(trainer, pl_module, optimizer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):
            self._loss += loss.detach().float()
        self._hooks.on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def on_train_end(self, trainer, pl_module) -> None:
        client = self.client
        client.batch, client.batch_rng_state = (), None
        if client.steps == 0:
            self._stack.close()
            return  # refused in on_fit_end
        self.local.end_client(client)  # Δ over the upload ranges, on_client_end, on_upload
        self._stack.close()
        client.keep_final_model()  # y, kept while the module trains the next client
        self.job.result = (client, self._loss, RecordedLogs())
        if self.job.deliver is not None:
            self.job.deliver(self.job)

    def on_fit_end(self, trainer, pl_module) -> None:
        if self.job.result is None:
            raise refuse_in_one_line(ConfigError(FIELD, f"client {self.job.client_id} trained no optimizer step "
                                                 "(an empty DataLoader, max_steps 0 or limit_train_batches 0): give "
                                                 "it data; a client that cannot train should not be sent its job"))

    def on_exception(self, trainer, pl_module, exception) -> None:
        self._stack.close()


def check_module(pl_module, segments: tuple) -> None:
    """The module trained is the server's model: the same tensors, shapes and fp32 (one line otherwise)."""
    if lightning_base(pl_module) is None:
        raise refuse_in_one_line(ConfigError(FIELD, f"trains a LightningModule, got {type(pl_module).__name__}"))
    named = dict(pl_module.named_parameters())
    named.update({n: b for n, b in pl_module.named_buffers() if b is not None and b.is_floating_point()})
    for name, shape in segments:
        tensor = named.get(name)
        if tensor is None or tuple(tensor.shape) != tuple(shape):
            found = "no such tensor" if tensor is None else f"shape {tuple(tensor.shape)}"
            raise refuse_in_one_line(ConfigError(FIELD, f"the module trained is not the server's model: {name} "
                                                 f"{tuple(shape)} on the server, {found} here; give both the same "
                                                 "LightningModule"))
        if tensor.dtype != torch.float32:
            raise refuse_in_one_line(ConfigError("Trainer(precision=...)", f"{name} is {tensor.dtype}: federated "
                                                 "clients keep fp32 weights; use precision '16-mixed' or "
                                                 "'bf16-mixed' instead of a true half precision"))
    extra = sorted(set(named) - {name for name, _ in segments})
    if extra:
        raise refuse_in_one_line(ConfigError(FIELD, f"the module trained has {extra[0]}, which the server's model "
                                             "has not; give both the same LightningModule"))

