"""A fit's rounds, set up once training starts (``FederatedModule.on_train_start``): the client-state store,
the round loop with its local-training settings, the system simulator (``model.system``) and the
per-client evaluation (``data.personal_fraction``), each restored from the checkpoint where resumed."""
from __future__ import annotations

from typing import Optional

import torch

from fl_lightning.callbacks.base import FLCallback
from fl_lightning.federation.client_state import open_store
from fl_lightning.federation.loop import FederatedLoop, LocalConfig
from fl_lightning.personalization.evaluation import PersonalEvaluation, new_client_ids
from fl_lightning.systems import RoundPolicy, RoundSimulator
from fl_lightning.systems.fedbuff import FedBuff


def simulator(module, num_clients: int):
    """The round simulator or, with model.asynchronous, FedBuff's event queue (restored on resume); None when
    model.system is unset."""
    if module.system is None:
        return None
    population = module.system.population(num_clients)
    if module.asynchronous is not None:  # FedBuff: the event queue replaces the rounds
        simulated = FedBuff(module.asynchronous, population, module.hparams.batch_size)
    else:
        simulated = RoundSimulator(population, module.round_policy or RoundPolicy(), module.hparams.batch_size)
    if (module._restored or {}).get("clock") is not None:
        simulated.load_state_dict(module._restored["clock"])
    return simulated


def poisson_rate(privacy, cohort: int, population: int) -> Optional[float]:
    """q = M/K when model.privacy samples clients by Poisson sampling (issue 31), else None (a fixed cohort)."""
    if privacy is None or privacy.sampling != "poisson":
        return None
    return cohort / population


def start_rounds(module) -> None:
    """Sets ``module.client_state``, ``module.loop`` and ``module.personal`` for this fit."""
    trainer, hp = module.trainer, module.hparams
    fl_callbacks = [cb for cb in trainer.callbacks if isinstance(cb, FLCallback)]
    grad_clip = hp.grad_clip if hp.grad_clip is not None else module.algorithm.default_grad_clip()
    new = new_client_ids(trainer.datamodule.num_clients, hp.get("personal_new_clients"))  # never trained (pval_new/*)
    config = LocalConfig(hp.clients_per_round, hp.local_epochs, hp.batch_size, hp.weighted_aggregation,
                         grad_clip, hp.client_dropout, hp.parallel_clients, module.local_trainer,
                         poisson_rate(module.privacy, hp.clients_per_round, trainer.datamodule.num_clients),
                         tuple(new), hp.get("client_runner", "serial"), hp.get("cohort_size"))
    module.global_vector.copy_(module.flat.vector)  # x^r: the network holds it (restored on resume)
    server, local = module.optimizers()
    clients = trainer.datamodule.clients.to(module.device)
    restored = module._restored or {}
    module.client_state = open_store(trainer, len(clients), restored.get("client_state"))
    module.loop = FederatedLoop(module.flat, clients, module.local_loss, local.optimizer, config, fl_callbacks,
                                module.global_vector, server, module.client_state,
                                trainer.precision_plugin.forward_context, module.blocks, module.collective,
                                module._train_logs, simulator(module, len(clients)))
    if module.loop.pool is not None and trainer.is_global_zero:
        print(f"fl-lightning: {hp.parallel_clients} clients at a time, {module.loop.pool.threads_each} intra-op "
              f"thread(s) each, of {torch.get_num_threads()}")
    if module._restored is not None:
        module.loop.comm.load_state_dict(module._restored["comm"])
    held_out = getattr(trainer.datamodule, "personal", None)
    module.personal = None if held_out is None else PersonalEvaluation(  # pval/*
        module.flat, module.local_loss, held_out.to(module.device), clients, module.client_state, fl_callbacks,
        trainer.datamodule.eval_transform, hp.batch_size, hp.lr, hp.personal_eval_every, hp.personal_eval_clients,
        new, hp.local_epochs)
