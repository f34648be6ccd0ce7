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
from typing import Iterator

import pytorch_lightning as pl
from flwr.app import Message
from pytorch_lightning.utilities import rank_zero_warn

from fl_lightning.deploy import protocol
from fl_lightning.deploy.join import Membership
from fl_lightning.federation.contexts import RoundContext
from fl_lightning.runs.files import run_folder

TRAIN = "train"
POLL_S = 0.1  # Grid.send_and_receive sleeps 3 s between pulls: this polls the replies more often
COLUMNS = ("round", "partition", "node_id", "sent_message_bytes", "received_message_bytes", "counted_download_bytes",
           "counted_upload_bytes", "node_train_s", "round_trip_s", "reported")


def exchange(grid, messages: list[Message], timeout: float) -> tuple[list[str], dict[str, Message]]:
    """Pushes ``messages``; returns their ids (in order) and {id: reply} for the replies within ``timeout`` s."""
    ids = list(grid.push_messages(messages))
    waiting, replies = set(ids), {}
    deadline = time.monotonic() + timeout
    while waiting and time.monotonic() < deadline:
        for message in grid.pull_messages(list(waiting)):
            replies[message.metadata.reply_to_message_id] = message
            waiting.discard(message.metadata.reply_to_message_id)
        if waiting:
            time.sleep(POLL_S)
    return ids, replies


class RemoteClients(protocol.NodeClients):
    """Sends the round's jobs to the nodes and rebuilds their clients (module docstring); ``attach`` (ClientRunner's)
    gives it the loop's LocalTrainer (the global model, the callbacks' states, the round's optimizer settings)."""

    def __init__(self, membership: Membership, round_timeout: float):
        super().__init__()
        self.membership, self.round_timeout = membership, round_timeout
        self.rows: list[dict] = []

    def run(self, positions: list[int], plan: RoundContext) -> Iterator[tuple[int, tuple]]:
        for problem in self.membership.refresh(strict=False):  # nodes that (re)joined since the last round
            rank_zero_warn(problem)
        sent, started = [], time.perf_counter()
        for position in positions:
            node = self.membership.node_of.get(plan.clients[position].client_id)
            if node is not None:
                content = self.job(self.membership.run_id, plan, position)
                sent.append((position, node, Message(content, dst_node_id=node, message_type=TRAIN)))
        ids, replies = exchange(self.membership.grid, [m for _, _, m in sent], self.round_timeout)
        round_trip = time.perf_counter() - started
        answered = {}
        for (position, node, message), message_id in zip(sent, ids):
            reply = replies.get(message_id)
            error = protocol.failure(reply) if reply is not None else "no reply"
            if error is not None:
                rank_zero_warn(f"round {plan.round + 1}: client {plan.clients[position].client_id} (node {node}) did "
                               f"not report: {error}")
            answered[position] = (node, message, reply, None if error is not None else protocol.read_reply(reply.content))
        for position in positions:
            node, message, reply, result = answered.get(position, (None, None, None, None))
            trained = self.client(plan, position, result)
            row = self.traffic(plan, position, node, protocol.wire_bytes(message) if message is not None else 0,
                               protocol.wire_bytes(reply) if reply is not None else 0, result, trained[0])
            self.rows.append({**row, "round_trip_s": round(round_trip, 4)})
            yield position, trained


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
