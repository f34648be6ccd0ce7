"""Which SuperNode holds which partition, checked before any run file is written (issue 34, item 5).

Every node that connects is asked once (a ``query`` message carrying the run's resolved config and run
id); it answers with its partition id and its data's shape and classes, or with one line saying what is
wrong (a partition id outside the config, its own config a different run). A node that restarts joins
again under a new node id and takes its partition back.
"""
from __future__ import annotations

import time
from typing import Optional

from fl_lightning.deploy import messages, wire
from fl_lightning.errors import FLUserError

JOIN = "query"


def mismatch(node: dict, server: dict) -> Optional[str]:
    """The one line for a node whose data cannot train this run's network, else None."""
    where = f"SuperNode with partition-id {node['partition_id']}"
    if node["shape"] != server["shape"]:
        return (f"{where}: its samples have shape {tuple(node['shape'])}, the run's network takes "
                f"{tuple(server['shape'])}; give the node data of the configured data set")
    if node["num_classes"] != server["num_classes"] or node["max_label"] >= server["num_classes"]:
        return (f"{where}: its data has {node['num_classes']} classes (largest label {node['max_label']}), the run "
                f"has {server['num_classes']}; give the node data of the configured data set")
    return None


class Membership:
    """partition id → node id of the nodes that joined this run."""

    def __init__(self, grid, run_id: str, config_yaml: str, summary: dict, fresh: bool, reply_timeout: float):
        self.grid, self.run_id, self.summary, self.reply_timeout = grid, run_id, summary, reply_timeout
        self.request = wire.to_bytes({"run_id": run_id, "config": config_yaml, "fresh": fresh})
        self.node_of: dict[int, int] = {}
        self.asked: set[int] = set()

    def refresh(self, strict: bool) -> list[str]:
        """Asks the nodes that connected since; returns their problems (raises the first if ``strict``)."""
        new = [node for node in self.grid.get_node_ids() if node not in self.asked]
        if not new:
            return []
        self.asked.update(new)
        ids, replies = messages.exchange(self.grid, [messages.make(n, JOIN, self.request) for n in new],
                                         self.reply_timeout)
        problems = []
        for node, message_id in zip(new, ids):
            if message_id not in replies:
                self.asked.discard(node)  # ask again next time
                continue
            data, error = messages.body(replies[message_id])
            answer = wire.from_bytes(data) if error is None else None
            error = error or mismatch(answer, self.summary)
            if error is None and answer["run_id"] != self.run_id:
                error = (f"SuperNode with partition-id {answer['partition_id']}: its config is run {answer['run_id']}, "
                         f"the server's is run {self.run_id}; start it with the server's config (or none: it then "
                         "takes the server's)")
            if error is not None:
                if strict:
                    raise FLUserError(error)
                problems.append(error)
                continue
            self.node_of[answer["partition_id"]] = node
        return problems

    def wait_for(self, num_clients: int, timeout: float) -> None:
        """Until a node holds each of the partitions 0..M-1 (a problem stops the run with one line)."""
        deadline = time.monotonic() + timeout
        while len(self.node_of) < num_clients and time.monotonic() < deadline:
            self.refresh(strict=True)
            if len(self.node_of) < num_clients:
                time.sleep(0.2)
        missing = sorted(set(range(num_clients)) - set(self.node_of))
        if missing:
            raise FLUserError(f"no SuperNode holds partition(s) {missing} after {timeout:.0f} s (data.num_clients "
                              f"{num_clients}); start one per partition: flower-supernode ... --node-config "
                              f"'partition-id=N' (or raise join-timeout)")
