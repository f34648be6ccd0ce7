"""The server's side of a round whose clients train on SuperNodes.

``RemoteClients`` is the loop's ``ClientRunner`` (fl_lightning.federation.seams): each sampled
client's task goes to the node holding its partition, all at once; the replies are rebuilt into the same
client contexts in plan order, so aggregation, the server hooks and the accounting run unchanged. A node
that does not answer within ``round_timeout`` (killed, disconnected) is a client that failed to report,
as with ``model.client_dropout``: the round goes on with those that did. ``FlowerClients`` (a plain
Lightning callback, so the run id is the simulation's) brings it (``client_runner``) and writes ``flower.csv`` in the run
folder: per round and node the bytes in Flower's messages, the counted bytes, and the seconds.
"""
from __future__ import annotations

import csv
import os
import time
from dataclasses import dataclass
from typing import Iterator

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_warn

from fl_lightning.deploy import messages, wire
from fl_lightning.deploy.join import Membership
from fl_lightning.federation.contexts import ClientContext, RoundContext
from fl_lightning.federation.seams import ClientRunner
from fl_lightning.federation.user_module import RecordedLogs
from fl_lightning.runs.files import run_folder

TRAIN = "train"
COLUMNS = ("round", "partition", "node_id", "sent_message_bytes", "received_message_bytes", "counted_download_bytes",
           "counted_upload_bytes", "node_train_s", "round_trip_s", "reported")


@dataclass
class SentBytes:
    """What a client downloaded, as the node counted it (``Payload.nbytes``)."""

    nbytes: int


class RemoteClients(ClientRunner):
    """Sends the round's tasks to the nodes and rebuilds their clients (module docstring); ``attach`` (ClientRunner's)
    gives it the loop's LocalTrainer (the global model, the callbacks' states, the round's optimizer settings)."""

    def __init__(self, membership: Membership, round_timeout: float):
        self.membership, self.round_timeout = membership, round_timeout
        self.trainer = None
        self.rows: list[dict] = []
        self.aggregated: dict[int, int] = {}  # client → the last round whose upload was aggregated (its node commits)

    def _request(self, plan: RoundContext, position: int) -> bytes:
        loop = self.trainer
        return wire.to_bytes({"run_id": self.membership.run_id, "round": plan.round, "lr": plan.lr,
                              "plan": [wire.task_record(t) for t in plan.clients], "position": position,
                              "aggregated_round": self.aggregated.get(plan.clients[position].client_id, -1),
                              "global_vector": loop.global_vector.detach().cpu(),
                              "callback_states": [cb.state_dict() for cb in loop.callbacks]})

    def run(self, positions: list[int], plan: RoundContext) -> Iterator[tuple[int, tuple]]:
        for problem in self.membership.refresh(strict=False):  # nodes that (re)joined since the last round
            rank_zero_warn(problem)
        sent, started = [], time.perf_counter()
        for position in positions:
            node = self.membership.node_of.get(plan.clients[position].client_id)
            if node is not None:
                sent.append((position, node, messages.make(node, TRAIN, self._request(plan, position))))
        ids, replies = messages.exchange(self.membership.grid, [m for _, _, m in sent], self.round_timeout)
        round_trip = time.perf_counter() - started
        answered = {}
        for (position, node, message), message_id in zip(sent, ids):
            reply = replies.get(message_id)
            data, error = messages.body(reply) if reply is not None else (None, "no reply")
            if error is not None:
                rank_zero_warn(f"round {plan.round + 1}: client {plan.clients[position].client_id} (node {node}) did "
                               f"not report: {error}")
            answered[position] = (node, message, reply, None if data is None else wire.from_bytes(data))
        for position in positions:
            yield position, self._client(plan, position, answered.get(position), round_trip)

    def _client(self, plan: RoundContext, position: int, answer, round_trip: float) -> tuple:
        loop, task = self.trainer, plan.clients[position]
        node, message, reply, result = answer if answer is not None else (None, None, None, None)
        group = loop.optimizer.param_groups[0]
        client = ClientContext(task, plan.round, plan.lr, group.get("weight_decay", 0.0), group.get("momentum", 0.0),
                               1.0 if result is None else result["weight"], loop.flat.vector, loop.flat.grad,
                               loop.global_vector)
        logs, loss_sum = RecordedLogs(), torch.zeros((), device=loop.global_vector.device)
        if result is None:  # the node never answered: lost, like a dropped client
            task.lost = True
            client.download = SentBytes(0)
        else:
            device = loop.global_vector.device
            client.upload = wire.payload_from(result["upload"])
            for part in client.upload.parts:
                if isinstance(part.message, torch.Tensor):
                    part.message = part.message.to(device)
            client.download = SentBytes(int(result["download_bytes"]))
            client.steps, loss_sum = int(result["steps"]), result["loss_sum"].to(device)
            logs.entries = [(name, value) for name, value in result["logs"]]
            client.scratch[self] = result["sums"]
        self.rows.append({"round": plan.round + 1, "partition": task.client_id, "node_id": node,
                          "sent_message_bytes": messages.wire_bytes(message) if message is not None else 0,
                          "received_message_bytes": messages.wire_bytes(reply) if reply is not None else 0,
                          "counted_download_bytes": client.download.nbytes,
                          "counted_upload_bytes": 0 if result is None or task.lost else client.upload.nbytes,
                          "node_train_s": None if result is None else round(float(result["seconds"]), 4),
                          "round_trip_s": round(round_trip, 4), "reported": int(result is not None and not task.lost)})
        return client, loss_sum, logs

    def reported(self, client: ClientContext) -> None:
        """The node's ``on_client_reported`` derived these sums; added here, in plan order."""
        self.aggregated[client.client_id] = client.round
        for channel, values in client.scratch.get(self, []):
            client.received.add_sum(channel, values.to(client.received.device))


class FlowerClients(pl.Callback):
    """Hands the fit its ClientRunner as an object (``client_runner``), the SuperNodes that joined (the ServerApp passes it to the fit:
    fl_lightning.deploy.server_app), and writes ``flower.csv``; its checkpointed state is which round of each
    client was aggregated, for the nodes' commits after a resume.
    ``deployment`` names the run's label (``...,seed=0,deployed=flower``): not the simulation's folder."""

    deployment = "flower"

    def __init__(self, clients: RemoteClients):
        self.clients = clients
        self.client_runner = clients  # handed over as an object (fl_lightning.assembly.connector.chosen_runner)

    def state_dict(self) -> dict:
        return {"aggregated": {str(k): v for k, v in self.clients.aggregated.items()}}

    def load_state_dict(self, state_dict: dict) -> None:
        self.clients.aggregated.update({int(k): int(v) for k, v in state_dict.get("aggregated", {}).items()})

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if not trainer.is_global_zero:
            return
        path = os.path.join(run_folder(trainer.loggers[0]) if trainer.loggers else trainer.default_root_dir,
                            "flower.csv")
        new = not os.path.exists(path)
        with open(path, "a", newline="") as f:
            writer = csv.DictWriter(f, COLUMNS)
            if new:
                writer.writeheader()
            writer.writerows(self.clients.rows)
        self.clients.rows = []
