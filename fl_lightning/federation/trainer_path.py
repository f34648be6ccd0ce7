"""A client's local epochs in an ordinary ``pl.Trainer`` the user configures
(``model.local_trainer``: Trainer keyword arguments — callbacks, precision, accumulate_grad_batches,
gradient_clip_val, loggers), with the algorithm's client-side hooks attached as a Lightning callback
(``ClientHooks``: ``on_before_optimizer_step`` runs model.grad_clip and the algorithm's ``on_local_gradient``,
the step end its ``on_local_step_end``). Batches, their order and augmentation come from the client's own
streams, as on the fast path, so with no Trainer options of its own it trains to the same numbers.
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Optional

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities.rank_zero import rank_zero_module

from fl_lightning.federation.seeding import Stream, generator, global_rng_state, seed_global_rng, stream_seed


class ClientBatches:
    """The client's minibatches, a new permutation per epoch (the fast path's draws, in its order)."""

    def __init__(self, trainer, client):
        self.trainer, self.client = trainer, client
        self.x, self.y = trainer.data_of(client.task)
        self.batch = trainer.config.batch_size
        self.order = generator(client.task.seed)
        self.augmentation = generator(stream_seed(client.task.seed, Stream.AUGMENTATION), self.x.device)

    def __len__(self) -> int:
        return -(-len(self.y) // self.batch)

    def __iter__(self):
        perm = torch.randperm(len(self.y), generator=self.order).to(self.x.device)
        xs, ys = self.x[perm], self.y[perm]
        for start in range(0, len(ys), self.batch):
            yield self.trainer.clients.prepare(xs[start:start + self.batch], self.augmentation), ys[start:start + self.batch]


class ClientStep(pl.LightningModule):
    """The working model as the user's Trainer sees it: its loss is the module's local loss, its optimizer the
    round's local optimizer over the flat parameters; gradients go to the flat gradient (added, so
    accumulate_grad_batches sums micro-batches)."""

    def __init__(self, local, client):
        super().__init__()
        self.net = local.flat.net
        self.local, self.client = local, client
        self.loss_sum = torch.zeros((), device=local.flat.device)

    def training_step(self, batch, batch_idx):
        self.client.batch = batch
        if self.local._replays_minibatch:  # SVRG / control variates: ∇f_i(x^r; ζ) on the same draws
            self.client.batch_rng_state = global_rng_state(batch[0].device)
        loss = self.local.loss_fn(self.net, *batch)
        self.loss_sum += loss.detach()
        return loss

    def backward(self, loss, *args, **kwargs):
        flat = self.local.flat
        flat.grad.add_(flat.backward(loss, out=self.local._scratch_grad()))
        flat.params.grad = flat.grad

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        self.local.flat.grad.zero_()

    def configure_optimizers(self):
        return self.local.optimizer


class ClientHooks(pl.Callback):
    """The algorithm's client-side hooks, as an ordinary Lightning callback."""

    def __init__(self, local, client):
        self.local, self.client = local, client
        self._steps = 0

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        flat, clip = self.local.flat, self.local.config.grad_clip
        if clip is not None:
            flat.grad.mul_(torch.clamp(clip / (flat.grad.norm() + 1e-6), max=1.0))
        for cb in self.local._gradient_hooks:
            cb.on_local_gradient(self.client)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step > self._steps:  # an optimizer step happened (not an accumulated micro-batch)
            self._steps = trainer.global_step
            for cb in self.local._step_hooks:
                cb.on_local_step_end(self.client)
            self.client.steps += 1


def train_in_trainer(local, client) -> torch.Tensor:
    """E local epochs of the client in a fresh user-configured Trainer; the summed loss."""
    options = dict(local.config.local_trainer)
    callbacks = list(options.pop("callbacks", None) or [])
    defaults = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                    accelerator=local.flat.device.type, devices=1, num_sanity_val_steps=0)
    budget = client.task.max_steps  # partial work by a deadline
    with lightning_info_quiet():
        trainer = pl.Trainer(**{**defaults, **options}, max_epochs=client.task.local_epochs,
                             max_steps=budget if budget is not None else -1,
                             callbacks=[*callbacks, ClientHooks(local, client)])
        batches = ClientBatches(local, client)
        seed_global_rng(stream_seed(client.task.seed, Stream.DROPOUT), batches.x.device)
        step = ClientStep(local, client)
        local.flat.grad.zero_()
        trainer.fit(step, batches)
    client.batch, client.batch_rng_state = (), None
    return step.loss_sum


@contextmanager
def lightning_info_quiet():
    """Lightning's info lines ("GPU available", "`Trainer.fit` stopped", its tips) silenced for a client's
    Trainer: a fresh one per client per round would repeat them S times a round; warnings still show."""
    log = rank_zero_module.log  # the logger of whichever namespace was imported last (both rebind it)
    level = log.level
    log.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        log.setLevel(level)


def local_trainer_options(options, parallel_clients: int) -> Optional[dict]:
    """``model.local_trainer`` checked, its callbacks/logger/plugins given as ``{class_path, init_args}`` dicts
    (the command line's and config.yaml's form) built once; or one line for options the round decides itself."""
    from fl_lightning.errors import ConfigError

    if options is None:
        return None
    if not isinstance(options, dict):
        raise ConfigError("model.local_trainer", f"needs a dict of pl.Trainer options, got {type(options).__name__}")
    decided = sorted(set(options) & {"max_epochs", "min_epochs", "max_steps", "devices", "strategy", "num_nodes"})
    if decided:
        raise ConfigError("model.local_trainer", f"{', '.join(decided)}: decided by the round (model.local_epochs, "
                          "the run's own trainer); leave them out")
    if parallel_clients > 1:
        raise ConfigError("model.local_trainer", "trains one client at a time: set model.parallel_clients 1")
    resolved = dict(options)
    for key in ("callbacks", "logger", "plugins"):
        value = resolved.get(key)
        if isinstance(value, (list, tuple)):
            resolved[key] = [built(item, f"model.local_trainer.{key}") for item in value]
        elif value is not None:
            resolved[key] = built(value, f"model.local_trainer.{key}")
    if resolved.get("logger") in (None, False) and any(needs_logger(cb) for cb in resolved.get("callbacks") or []):
        raise ConfigError("model.local_trainer.callbacks", "LearningRateMonitor logs to the local Trainer's logger, "
                          "and it has none (the default: logger false): add one, e.g. \"logger\": {\"class_path\": "
                          "\"pytorch_lightning.loggers.CSVLogger\", \"init_args\": {\"save_dir\": \"local_logs\"}}")
    return resolved


def needs_logger(callback) -> bool:
    """A LearningRateMonitor of either namespace (Lightning refuses it in a Trainer without a logger)."""
    import sys

    from fl_lightning.federation.namespaces import PACKAGES

    monitors = tuple(getattr(sys.modules.get(f"{name}.callbacks"), "LearningRateMonitor", None) for name in PACKAGES)
    return isinstance(callback, tuple(m for m in monitors if m is not None))


def built(spec, field: str):
    """An object from ``{"class_path": "pkg.Class", "init_args": {...}}`` (anything else as it is)."""
    from fl_lightning.class_paths import imported
    from fl_lightning.errors import ConfigError

    if not isinstance(spec, dict):
        return spec
    path, init_args = spec.get("class_path"), spec.get("init_args") or {}
    if not isinstance(path, str) or set(spec) - {"class_path", "init_args"}:
        raise ConfigError(field, f"give each entry as {{class_path: pkg.Class, init_args: {{...}}}}, got {spec!r}")
    cls = imported(path, field, "pytorch_lightning.callbacks.LearningRateMonitor")
    try:
        return cls(**init_args)
    except TypeError as err:
        raise ConfigError(field, f"{path}({', '.join(map(str, init_args))}) failed: {err}") from None
