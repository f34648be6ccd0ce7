"""A client's part of a round on one working model (spec, "FedAvg": client_init, client_step,
client_final): y ← x^r, E local epochs of minibatch SGD, the upload Δ = y − x^r over its ranges.

A ``LocalTrainer`` owns a working model (a ``FlatModel``), its local optimizer and its work
buffers. The loop trains with the module's own; clients trained in parallel each get one of a few
copies (fl_lightning.federation.parallel). Every random draw comes from the client's own streams, so a client
trains the same on any of them.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, ContextManager, Iterator, Optional, Protocol, Sequence

import torch

from fl_lightning.federation.hooks import FLCallback
from fl_lightning.federation.contexts import ClientContext, ClientTask, RoundContext
from fl_lightning.federation.flat import FlatModel
from fl_lightning.federation.user_module import RecordedLogs, logging_into
from fl_lightning.federation.trainer_path import train_in_trainer
from fl_lightning.federation.seeding import (Stream, generator, global_rng_state, isolated_rng, seed_global_rng,
                                  set_global_rng_state, stream_seed)


class ClientData(Protocol):
    """What the engine reads of the clients' data (fl_lightning.data.datamodule.ClientData is one): all samples
    ``x``, ``y`` concatenated client by client, client i's at ``offsets[i]:offsets[i + 1]``."""

    x: torch.Tensor
    y: torch.Tensor
    offsets: list[int]

    def __len__(self) -> int: ...

    def num_samples(self, client: int) -> int: ...

    def of(self, client: int) -> tuple[torch.Tensor, torch.Tensor]: ...

    def pooled(self) -> tuple[torch.Tensor, torch.Tensor]: ...

    def prepare(self, x: torch.Tensor, generator: Optional[torch.Generator] = None) -> torch.Tensor: ...


@dataclass
class LocalConfig:
    clients_per_round: int
    local_epochs: int = 1
    batch_size: int = 50
    weighted_aggregation: bool = False
    grad_clip: Optional[float] = None  # clip each local gradient's norm (the authors' code: 10)
    parallel_clients: int = 1  # K: clients trained at the same time in this process
    local_trainer: Optional[dict] = None  # Trainer options: local epochs in a user-configured pl.Trainer


def call_hook(callbacks: Sequence[FLCallback], hook: str, context) -> None:
    for cb in callbacks:
        getattr(cb, hook)(context)


def clip_gradient_(grad: torch.Tensor, clip: float) -> None:
    """Scales ``grad`` in place to norm ≤ ``clip`` (the authors' clip_grad_norm)."""
    grad.mul_(torch.clamp(clip / (grad.norm() + 1e-6), max=1.0))


def overriding(callbacks: Sequence[FLCallback], hook: str) -> list[FLCallback]:
    return [cb for cb in callbacks if getattr(type(cb), hook) is not getattr(FLCallback, hook)]


def plain_sgd_step(optimizer: torch.optim.Optimizer) -> Optional[Callable[[], None]]:
    """``optimizer.step()`` without its Python wrapper, for the local optimizer the loop builds (plain SGD on one
    flat CPU tensor, no momentum, no hooks): the two ops torch's own single-tensor SGD runs, in its order, so the
    numbers are the same bit for bit; about 25 µs less Python a step, which threads training side by side
    otherwise wait on. None for any other optimizer: then ``optimizer.step()`` runs."""
    from torch.optim import optimizer as optim_module

    groups = optimizer.param_groups
    if type(optimizer) is not torch.optim.SGD or len(groups) != 1 or len(groups[0]["params"]) != 1:
        return None
    group, param = groups[0], groups[0]["params"][0]
    if (group["momentum"] != 0 or group["nesterov"] or group["maximize"] or group["differentiable"]
            or group["foreach"] or group["fused"] or param.device.type != "cpu" or param.is_sparse
            or getattr(optimizer, "grad_scale", None) is not None or getattr(optimizer, "found_inf", None) is not None
            or optimizer._optimizer_step_pre_hooks or optimizer._optimizer_step_post_hooks
            or optim_module._global_optimizer_pre_hooks or optim_module._global_optimizer_post_hooks):
        return None

    def step() -> None:
        grad, lr, weight_decay = param.grad, group["lr"], group["weight_decay"]
        if grad is None or isinstance(lr, torch.Tensor) or isinstance(weight_decay, torch.Tensor):
            optimizer.step()  # what the fast path does not cover: torch's own step
            return
        with torch.no_grad():
            if weight_decay != 0:
                grad = grad.add(param, alpha=weight_decay)
            param.add_(grad, alpha=-lr)

    return step


class LocalTrainer:
    """Trains one client at a time on its working model.

    Args:
        flat: the working model y (its network's parameters and floating buffers are views of ``flat.vector``).
        optimizer: the local optimizer over ``flat.params``; its first param group's lr and weight_decay
            are the round's.
        loss_fn: ``loss_fn(network, x, y)``, the minibatch loss of ``network`` (``flat.net``).
        global_vector: x^r, read only while clients train.
    """

    def __init__(self, flat: FlatModel, optimizer: torch.optim.Optimizer, loss_fn: Callable, clients: ClientData,
                 config: LocalConfig, callbacks: Sequence[FLCallback], global_vector: torch.Tensor,
                 forward_context: Callable[[], ContextManager] = nullcontext):
        self.flat, self.optimizer, self.loss_fn = flat, optimizer, loss_fn
        self.clients, self.config, self.callbacks = clients, config, list(callbacks)
        self.global_vector, self.forward_context = global_vector, forward_context
        self._gradient_hooks = overriding(self.callbacks, "on_local_gradient")
        self._step_hooks = overriding(self.callbacks, "on_local_step_end")
        self._replays_minibatch = any(cb.replays_minibatch for cb in self._gradient_hooks)
        self._work: dict[str, torch.Tensor] = {}

    def run_client(self, task: ClientTask, plan: RoundContext, isolate_rng: bool = True
                   ) -> tuple[ClientContext, torch.Tensor, RecordedLogs]:
        """y ← x^r, local training, upload: the client's context, its summed local loss and what the
        network logged (replayed into the round's logs in plan order). ``isolate_rng``: save and
        restore torch's global generators around the client (the pool does it once per round)."""
        self.flat.load(self.global_vector)  # y ← x^r
        weight = task.num_samples if self.config.weighted_aggregation else 1.0
        client = ClientContext.on_trainer(task, plan, self, weight, full_gradient=self.full_gradient,
                                          gradient_at_global=self.gradient_at_global)
        client.download.add("model", 0, self.global_vector)
        self.optimizer.state.clear()  # a fresh local optimizer for every client
        logs = RecordedLogs()
        with isolated_rng(self.flat.device) if isolate_rng else nullcontext(), logging_into(self.flat.net, logs):
            call_hook(self.callbacks, "on_client_start", client)  # dropout: the client's own streams only
            loss_sum = self.train_local(client)
            self.end_client(client)
        return client, loss_sum, logs

    def data_of(self, task: ClientTask) -> tuple[torch.Tensor, torch.Tensor]:
        return self.clients.pooled() if task.pooled else self.clients.of(task.client_id)

    def train_local(self, client: ClientContext) -> torch.Tensor:
        """E local epochs of minibatch SGD on the client's own data (client_step); the summed loss."""
        if self.config.local_trainer is not None:
            return train_in_trainer(self, client)
        device = self.data_of(client.task)[0].device
        seed_global_rng(stream_seed(client.task.seed, Stream.DROPOUT), device)
        loss_sum = torch.zeros((), device=device)
        flat, clip, net = self.flat, self.config.grad_clip, self.flat.net
        step = plain_sgd_step(self.optimizer) or self.optimizer.step  # checked per client: hooks may come and go
        for client.batch in self.minibatches(client.task):
            if self._replays_minibatch:
                client.batch_rng_state = global_rng_state(device)
            with self.forward_context():
                loss = self.loss_fn(net, *client.batch)
            flat.backward(loss)
            if clip is not None:
                clip_gradient_(flat.grad, clip)
            for cb in self._gradient_hooks:
                cb.on_local_gradient(client)
            step()
            for cb in self._step_hooks:
                cb.on_local_step_end(client)
            loss_sum += loss.detach()
            client.steps += 1
        client.batch, client.batch_rng_state = (), None
        return loss_sum

    def minibatches(self, task: ClientTask) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The client's E epochs of minibatches (x augmented, y) in its own seeded order (``task.seed``, its
        augmentation stream), at most ``task.max_steps`` of them (partial work)."""
        x, y = self.data_of(task)
        n, batch = len(y), self.config.batch_size
        batch_order = generator(task.seed)
        augmentation = generator(stream_seed(task.seed, Stream.AUGMENTATION), x.device)
        budget = task.max_steps if task.max_steps is not None else -1
        steps = 0
        for _ in range(task.local_epochs):
            perm = torch.randperm(n, generator=batch_order).to(x.device)
            xs, ys = x[perm], y[perm]
            for start in range(0, n, batch):
                if steps == budget:
                    return
                steps += 1
                yield self.clients.prepare(xs[start:start + batch], augmentation), ys[start:start + batch]

    def full_batches(self, task: ClientTask) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One pass over the client's data in order, in minibatches, with its full-gradient augmentation stream."""
        x, y = self.data_of(task)
        augmentation = generator(stream_seed(task.seed, Stream.FULL_GRADIENT_AUGMENTATION), x.device)
        for start in range(0, len(y), self.config.batch_size):
            yield self.clients.prepare(x[start:start + self.config.batch_size], augmentation), \
                y[start:start + self.config.batch_size]

    def end_client(self, client: ClientContext) -> None:
        """Upload Δ = y − x^r over the client's upload ranges, then ``on_client_end`` and ``on_upload``."""
        delta = client.vector - client.global_vector
        for start, stop in client.task.upload_ranges:
            client.upload.add("delta", start, delta[start:stop])
        call_hook(self.callbacks, "on_client_end", client)
        call_hook(self.callbacks, "on_upload", client)

    # -- gradients at the downloaded model (SVRG, control-variate option I) ---------------
    def full_gradient(self, client: ClientContext) -> torch.Tensor:
        """∇f_i(x^r): the mean loss gradient over all of the client's data, at the downloaded
        model; one pass (``ClientContext.full_gradient`` keeps it for the round). Call it while the
        working model is still x^r (``on_client_start``)."""
        x, y = self.data_of(client.task)
        seed_global_rng(stream_seed(client.task.seed, Stream.FULL_GRADIENT_DROPOUT), x.device)
        total = torch.zeros_like(self.flat.grad)
        for xb, yb in self.full_batches(client.task):
            with self.forward_context():
                loss = self.loss_fn(self.flat.net, xb, yb)
            total.add_(self.flat.backward(loss, out=self._scratch_grad()), alpha=len(yb) / len(y))
        self.flat.load(self.global_vector)  # undo what the pass did to BatchNorm statistics
        return total

    def gradient_at_global(self, client: ClientContext) -> torch.Tensor:
        """∇f_i(x^r; ζ) for the current minibatch ζ — the same augmented inputs and the same dropout
        mask as ∇f_i(y; ζ); the working model y and the RNG are left as they were."""
        if client.batch_rng_state is None:
            raise RuntimeError("gradient_at_global needs the minibatch's RNG state: set replays_minibatch = True "
                               "on the FLCallback that calls it")
        device = self.flat.device
        saved, rng_after = self._buffer("saved_vector", self.flat.vector), global_rng_state(device)
        saved.copy_(self.flat.vector)
        self.flat.load(self.global_vector)
        set_global_rng_state(client.batch_rng_state, device)
        with self.forward_context():
            loss = self.loss_fn(self.flat.net, *client.batch)
        grad = self.flat.backward(loss, out=self._scratch_grad())
        set_global_rng_state(rng_after, device)
        self.flat.load(saved)
        return grad

    def _scratch_grad(self) -> torch.Tensor:
        return self._buffer("scratch_grad", self.flat.grad)

    def _buffer(self, name: str, like: torch.Tensor) -> torch.Tensor:
        """A reusable work tensor shaped like ``like`` (allocated once, not per step)."""
        buffer = self._work.get(name)
        if buffer is None or buffer.shape != like.shape or buffer.device != like.device:
            buffer = self._work[name] = torch.empty_like(like)
        return buffer
