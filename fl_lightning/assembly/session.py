"""A fit's rounds, set up once training starts (``FederatedModule.on_train_start``): the client-state store,
the round loop with its local-training settings and its parts (sampler, client runner, schedule:
fl_lightning.federation.seams, as fl_lightning.assembly.connector chose them) and the per-client evaluation (``data.personal_fraction``), each restored from
the checkpoint where resumed."""
from __future__ import annotations

import os

import torch

from fl_lightning.callbacks.base import FLCallback
from fl_lightning.federation.client_state import open_store
from fl_lightning.federation.loop import FederatedLoop, LocalConfig
from fl_lightning.assembly.connector import chosen_runner, received_for, round_parts
from fl_lightning.runs.files import run_folder
from fl_lightning.personalization.evaluation import PersonalEvaluation


def restored_parts(restored: dict) -> dict:
    """The parts' states in a checkpoint (one written before the parts: the simulator's clock)."""
    if "parts" in restored:
        return restored["parts"]
    return {"schedule": restored["clock"]} if restored.get("clock") is not None else {}


def state_dir(trainer) -> str:
    """``<run folder>/client_state`` (fl_lightning.runs.files): beside the run's checkpoints, for every
    logger; the same on every rank."""
    folder = run_folder(trainer.loggers[0]) if trainer.loggers else trainer.default_root_dir
    return os.path.join(trainer.strategy.broadcast(folder), "client_state")


def start_rounds(module) -> None:
    """Sets ``module.client_state``, ``module.loop`` and ``module.round_evaluations`` for this fit."""
    trainer, hp = module.trainer, module.hparams
    fl_callbacks = [cb for cb in trainer.callbacks if isinstance(cb, FLCallback)]
    grad_clip = hp.grad_clip if hp.grad_clip is not None else module.algorithm.default_grad_clip()
    fit = module.fit  # described and checked at the fit's start (fl_lightning.assembly.connector)
    new = list(fit.held_out)  # never trained (pval_new/*)
    config = LocalConfig(hp.clients_per_round, hp.local_epochs, hp.batch_size, hp.weighted_aggregation,
                         grad_clip, hp.parallel_clients, module.local_trainer)
    module.global_vector.copy_(module.flat.vector)  # x^r: the network holds it (restored on resume)
    server, local = module.optimizers()
    clients = trainer.datamodule.clients.to(module.device)
    restored = module._restored or {}
    module.client_state = open_store(trainer, len(clients), restored.get("client_state"), state_dir(trainer))
    sampler, schedule = round_parts(module.parts, fit)
    runner = chosen_runner(module, fit)
    module.loop = FederatedLoop(module.flat, clients, module.local_loss, local.optimizer, config, fl_callbacks,
                                module.global_vector, server, module.client_state,
                                trainer.precision_plugin.forward_context, module.blocks, module.collective,
                                module._train_logs, sampler, runner, schedule, received_for(module))
    threads_each = module.loop.runner.threads_each
    if threads_each is not None and trainer.is_global_zero:
        print(f"fl-lightning: {hp.parallel_clients} clients at a time, {threads_each} intra-op "
              f"thread(s) each, of {torch.get_num_threads()}")
    if module._restored is not None:
        module.loop.comm.load_state_dict(module._restored["comm"])
        module.loop.load_state_dict(restored_parts(module._restored))
    loader_batch = getattr(trainer.datamodule, "loader_batch_size", None)
    if loader_batch is not None and loader_batch != hp.batch_size and trainer.is_global_zero:
        print(f"fl-lightning: clients train on minibatches of model.batch_size {hp.batch_size}, not your DataLoader's "
              f"batch_size {loader_batch}; set --model.batch_size {loader_batch} (model.batch_size) to keep yours")
    held_out = getattr(trainer.datamodule, "personal", None)
    if held_out is None and trainer.is_global_zero and any(hasattr(cb, "personalize") for cb in fl_callbacks):
        print(f"fl-lightning: {module.algorithm.name} keeps a personal model on each client, but no client holds "
              "data out: no personal metric (pval/*) will be logged; set data.personal_fraction (e.g. 0.2) for it")
    module.round_evaluations = [] if held_out is None else [PersonalEvaluation(  # pval/*
        module.flat, module.local_loss, held_out.to(module.device), clients, module.client_state, fl_callbacks,
        trainer.datamodule.eval_transform, hp.batch_size, hp.lr, hp.personal_eval_every, hp.personal_eval_clients,
        new, hp.local_epochs)]
