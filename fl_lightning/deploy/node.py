"""A SuperNode's side of one run: its partition, the working model, its clients' state on its disk.

A ``NodeSession`` is built from the run's configuration (the server's resolved config; a node that was
started with its own ``config`` must have the same run id), exactly as a simulation builds its clients: the
same data set, the same partitioner (partition i is the simulation's client i), the same network, local
optimizer and algorithm hooks. ``train`` runs the task the server planned with the same
``LocalTrainer.run_client`` as the simulation, so its numbers are the simulation's. The hooks that the
simulation runs once an upload arrived (``on_client_reported``: c_i, codec residuals) run here, right
after training; what they derive for the server (``add_sum``) goes back in the reply. Their rows
(fl_lightning.deploy.rows, as ``fit_reply``'s) are committed only once the server says it aggregated that upload,
and live in ``<state dir>/<run id>/rows.pt``, so a node that restarts goes on with its client's state.
"""
from __future__ import annotations

import os
import time
from contextlib import nullcontext
from typing import Optional

import torch
from flwr.app import RecordDict

from fl_lightning.assembly.connector import data_parts
from fl_lightning.callbacks.base import FLCallback
from fl_lightning.deploy import protocol
from fl_lightning.errors import ConfigError
from fl_lightning.federation.contexts import RoundPlanner
from fl_lightning.federation.local_training import LocalConfig, LocalTrainer
from fl_lightning.federation.memory_format import set_channels_last
from fl_lightning.deploy.rows import NodeRows, client_store, written_rows
from fl_lightning.deploy.run_config import RunObjects, build_run
from fl_lightning.runs.identity import run_id

ROWS_FILE = "rows.pt"  # the node's client rows (fl_lightning.deploy.rows)


def data_summary(run: RunObjects, client: Optional[int] = None) -> dict:
    """Input shape and classes of the data (of one client's partition if given): checked between node and server.
    ``run``: anything with the run's ``datamodule`` (the node's RunObjects, the server's command line)."""
    data = run.datamodule
    data.setup("fit")
    x, y = data.clients.of(client) if client is not None else (data.clients.x, data.clients.y)
    return {"shape": list(x.shape[1:]), "num_classes": int(data.num_classes), "max_label": int(y.max()) if len(y) else -1,
            "num_clients": len(data.clients)}


class NodeSession:
    """Trains partition ``partition_id`` of the run configured in ``<directory>/config.yaml``.

    Args:
        directory: this run's folder on the node (config.yaml, rows.pt).
        fresh: a new run: the client state a previous run of the same config left is removed.
    """

    def __init__(self, directory: str, partition_id: int, fresh: bool):
        self.directory, self.partition_id = directory, partition_id
        run = build_run(os.path.join(directory, "config.yaml"))  # the server's config, without the command line
        self.run_id = run_id(run.config.as_dict())
        self.summary = data_summary(run, None)
        num_clients = self.summary["num_clients"]
        if not 0 <= partition_id < num_clients:
            raise ConfigError("partition-id", f"{partition_id} is outside this run's clients 0..{num_clients - 1} "
                              f"(data.num_clients {num_clients}); start the SuperNode with --node-config "
                              f"'partition-id=N' for 0 ≤ N < {num_clients}")
        self.summary.update(data_summary(run, partition_id), num_clients=num_clients)
        module, data = run.model, run.datamodule
        hp = module.hparams
        set_channels_last(module.net, hp.channels_last if hp.channels_last is not None else
                          any(isinstance(m, torch.nn.Conv2d) for m in module.net.modules()))
        module.net.train()
        (_, local), _ = module.configure_optimizers()
        self.module, self.optimizer, self.clients = module, local, data.clients
        for part in data_parts(module):  # a data attack relabels the malicious clients here, where the data is
            part.poison(data, hp.clients_per_round)
        self.callbacks = [cb for cb in module.configure_callbacks() if isinstance(cb, FLCallback)]
        grad_clip = hp.grad_clip if hp.grad_clip is not None else module.algorithm.default_grad_clip()
        config = LocalConfig(hp.clients_per_round, hp.local_epochs, hp.batch_size, hp.weighted_aggregation, grad_clip,
                             1, module.local_trainer)
        self.trainer = LocalTrainer(module.flat, local, module.local_loss, self.clients, config, self.callbacks,
                                    module.global_vector, nullcontext)
        self.num_clients, self.blocks = num_clients, module.blocks
        self.rows_path = os.path.join(directory, ROWS_FILE)
        if fresh and os.path.exists(self.rows_path):
            os.remove(self.rows_path)
        elif os.path.exists(os.path.join(directory, "store.pt")) and not os.path.exists(self.rows_path):
            raise ConfigError("state-dir", f"{directory} holds this run's client rows in the form before the row "
                              "ledger (store.pt): resume it with the fl-lightning that started it, or start it afresh")

    def train(self, job: protocol.Job) -> RecordDict:
        """One client's round: the reply to the server (fl_lightning.deploy.protocol)."""
        started = time.perf_counter()
        self.module.global_vector.copy_(job.global_vector)
        protocol.load_states(self.callbacks, job)
        self.optimizer.param_groups[0]["lr"] = job.lr
        if job.client_id != self.partition_id:
            raise ConfigError("partition-id", f"the server sent client {job.client_id}'s task to the node holding "
                              f"partition {self.partition_id}")
        rows = NodeRows.load(self.rows_path, job.run_id)
        rows.refuse_replay("partition-id", job.round)
        with client_store(self.num_clients, job.client_id, job.round, rows.committed(job.aggregated_round)) as store:
            planner = RoundPlanner(self.module.flat, self.clients, self.blocks, store)
            plan = protocol.replay_round(planner.plan(job.round, job.lr, job.tasks()), self.callbacks, job)
            store.begin_round(plan.round, [job.client_id])
            client, loss_sum, logs = self.trainer.run_client(plan.clients[job.position], plan)
            derived = protocol.report_on_node(self.callbacks, client)
            rows.trained(plan.round, written_rows(store, job.client_id) if derived is not None else {})
        rows.save()
        return protocol.reply_content(job, client, loss_sum, derived, logs, time.perf_counter() - started)
