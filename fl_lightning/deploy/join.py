"""Which SuperNode holds which partition, checked before any run file is written — for ``flower-local``'s ServerApp
and for ``AlgorithmStrategy`` in a user's own ServerApp alike.

Every node that connects is asked once (a ``query`` message carrying the run id and, for flower-local, the run's
resolved config); it answers with its partition id (flower-local's nodes: and their data's shape and classes), or
with one line saying what is wrong (a partition id outside the run's clients, its own config a different run). A
node that restarts joins again under a new node id and takes its partition back.
"""
from __future__ import annotations

import time
from typing import Optional

from flwr.app import ConfigRecord, Message, RecordDict

from fl_lightning.deploy import protocol
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
    """partition id → node id of the nodes that joined this run. ``config_yaml`` and ``summary`` (the run's data:
    fl_lightning.deploy.node.data_summary) are flower-local's; a user's own ClientApp answers with its partition
    only (None for both), so ``partitions`` (M) refuses one outside 0..M-1 here (flower-local's node refuses it
    itself: fl_lightning.deploy.node)."""

    def __init__(self, grid, run_id: str, config_yaml: Optional[str], summary: Optional[dict], fresh: bool,
                 partitions: Optional[int] = None):
        self.grid, self.run_id, self.summary, self.partitions = grid, run_id, summary, partitions
        self.config_yaml, self.fresh = config_yaml, fresh  # fresh: a new run (not one resumed from a checkpoint)
        self.node_of: dict[int, int] = {}
        self.asked: set[int] = set()
        self.pending: dict[str, int] = {}  # join message id → node id, not answered yet

    def refresh(self, strict: bool) -> list[str]:
        """Asks the nodes that connected since and takes the answers that came (without waiting for the rest);
        returns the problems (raises the first if ``strict``). A node Flower reports unreachable is left out."""
        new = [node for node in self.grid.get_node_ids() if node not in self.asked]
        if new:
            self.asked.update(new)
            request = {"run_id": self.run_id, "fresh": self.fresh,
                       **({"config": self.config_yaml} if self.config_yaml is not None else {})}
            ids = self.grid.push_messages([Message(RecordDict({protocol.JOIN_REQUEST: ConfigRecord(request)}),
                                                   dst_node_id=n, message_type=JOIN) for n in new])
            self.pending.update(zip(ids, new))
        problems = []
        for reply in self.grid.pull_messages(list(self.pending)) if self.pending else []:
            node = self.pending.pop(reply.metadata.reply_to_message_id, None)
            if node is None or reply.has_error():  # e.g. a node that went down before it answered
                continue
            error = protocol.failure(reply)
            answer = dict(reply.content[protocol.JOIN_ANSWER]) if error is None else None
            error = error or self.problem(answer)
            if error is not None:
                if strict:
                    raise FLUserError(error)
                problems.append(error)
                continue
            self.node_of[answer["partition_id"]] = node
        return problems

    def problem(self, answer: dict) -> Optional[str]:
        """The one line for a node that cannot take part in this run, else None."""
        if self.partitions is not None and not 0 <= answer["partition_id"] < self.partitions:
            return (f"SuperNode with partition-id {answer['partition_id']}: outside the run's clients "
                    f"0..{self.partitions - 1}; give each SuperNode a partition-id below {self.partitions}")
        if answer["run_id"] != self.run_id:
            return (f"SuperNode with partition-id {answer['partition_id']}: its config is run {answer['run_id']}, the "
                    f"server's is run {self.run_id}; start it with the server's config (or none: it then takes the "
                    "server's)")
        return mismatch(answer, self.summary) if self.summary is not None else None

    def wait_for(self, num_clients: int, timeout: float) -> None:
        """Until a node holds each of the partitions 0..M-1 and every node asked has answered (a problem, e.g. a
        node with a partition outside the config, stops the run with one line and exit code 2)."""
        deadline = time.monotonic() + timeout
        while (len(self.node_of) < num_clients or self.pending) and time.monotonic() < deadline:
            self.refresh(strict=True)
            if len(self.node_of) < num_clients or self.pending:
                time.sleep(0.2)
        missing = sorted(set(range(num_clients)) - set(self.node_of))
        self.fresh = False  # a node that joins from now on (a restart) goes on with the state on its disk
        if missing:
            raise FLUserError(f"no SuperNode holds partition(s) {missing} of {num_clients} clients after "
                              f"{timeout:.0f} s; start one per partition: flower-supernode ... --node-config "
                              f"'partition-id=N' (or give them more time to join)")
