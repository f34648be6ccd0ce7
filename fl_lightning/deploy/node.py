"""A SuperNode's side of one run: its partition, the working model, its clients' state on its disk.

A ``NodeSession`` is built from the run's configuration (the server's resolved config; a node that was
started with its own ``config`` must have the same run id), exactly as a simulation builds its clients: the
same data set, the same partitioner (partition i is the simulation's client i), the same network, local
optimizer and algorithm hooks. ``train`` runs the task the server planned with the same
``LocalTrainer.run_client`` as the simulation, so its numbers are the simulation's. The hooks that the
simulation runs once an upload arrived (``on_client_reported``: c_i, codec residuals) run here, right
after training; what they derive for the server (``add_sum``) goes back in the reply. Their rows are
committed only once the server says it aggregated that upload (the next task's ``aggregated_round``), so a
reply lost on the way leaves the client's state as it was, as a dropped client's in a simulation. The
client-state store lives in ``<state dir>/<run id>/client_state`` and its slot table, with the rows waiting
for that word, in ``store.pt`` next to it, so a node that restarts goes on with its clients' state.
"""
from __future__ import annotations

import os
import time
from contextlib import nullcontext
from typing import Optional

import torch
from flwr.app import RecordDict

from fl_lightning.callbacks.base import FLCallback
from fl_lightning.deploy import protocol
from fl_lightning.errors import ConfigError
from fl_lightning.federation.client_state import ClientStateStore
from fl_lightning.federation.contexts import RoundPlanner
from fl_lightning.federation.local_training import LocalConfig, LocalTrainer
from fl_lightning.federation.memory_format import set_channels_last
from fl_lightning.deploy.run_config import RunObjects, build_run
from fl_lightning.runs.identity import run_id
from fl_lightning.runs.files import save_atomically

STORE_FILE = "store.pt"


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
        directory: this run's folder on the node (config.yaml, client_state/, store.pt, node.log's lines).
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
        self.callbacks = [cb for cb in module.configure_callbacks() if isinstance(cb, FLCallback)]
        grad_clip = hp.grad_clip if hp.grad_clip is not None else module.algorithm.default_grad_clip()
        config = LocalConfig(hp.clients_per_round, hp.local_epochs, hp.batch_size, hp.weighted_aggregation, grad_clip,
                             1, module.local_trainer)
        self.trainer = LocalTrainer(module.flat, local, module.local_loss, self.clients, config, self.callbacks,
                                    module.global_vector, nullcontext)
        self.store = ClientStateStore(num_clients, os.path.join(directory, "client_state"))
        self.planner = RoundPlanner(module.flat, self.clients, module.blocks, self.store)
        self.pending: Optional[dict] = None  # {"round", "rows": {table: [slot, tag]}}: written, not yet committed
        saved = os.path.join(directory, STORE_FILE)
        if fresh:
            self.store.start_fresh()
            if os.path.exists(saved):
                os.remove(saved)
        elif os.path.exists(saved):
            state = torch.load(saved, weights_only=True)
            self.store.load_state_dict(state["store"])
            self.pending = state["pending"]

    def _persist(self) -> None:
        """The slot table and the pending rows, atomically (rows are pwritten and synced by ``state_dict``)."""
        save_atomically({"store": self.store.state_dict(), "pending": self.pending},
                        os.path.join(self.directory, STORE_FILE))

    def _settle(self, aggregated_round: int) -> None:
        """Commits the rows of the last upload if the server aggregated it, else drops them."""
        if self.pending is None:
            return
        if self.pending["round"] == aggregated_round:
            for name, (slot, tag) in self.pending["rows"].items():
                table = self.store.tables[name]
                table.slot_of[self.partition_id], table.tag_of[self.partition_id] = slot, tag
        self.pending = None
        self._persist()

    def train(self, job: protocol.Job) -> RecordDict:
        """One client's round: the reply to the server (fl_lightning.deploy.protocol)."""
        started = time.perf_counter()
        self.module.global_vector.copy_(job.global_vector)
        protocol.load_states(self.callbacks, job)
        self.optimizer.param_groups[0]["lr"] = job.lr
        plan = protocol.replay_round(self.planner.plan(job.round, job.lr, job.tasks()), self.callbacks, job)
        task = plan.clients[job.position]
        if task.client_id != self.partition_id:
            raise ConfigError("partition-id", f"the server sent client {task.client_id}'s task to the node holding "
                              f"partition {self.partition_id}")
        self._settle(job.aggregated_round)
        self.store.begin_round(plan.round, [task.client_id])
        client, loss_sum, logs = self.trainer.run_client(task, plan)
        derived = protocol.report_on_node(self.callbacks, client)
        rows = {name: list(table.staged[task.client_id]) for name, table in self.store.tables.items()
                if derived is not None and task.client_id in table.written}
        self.store.end_round({})  # committed when the server says it aggregated this upload (``_settle``)
        if rows:
            self.pending = {"round": plan.round, "rows": rows}
            self._persist()
        return protocol.reply_content(job, client, loss_sum, derived, logs, time.perf_counter() - started)
