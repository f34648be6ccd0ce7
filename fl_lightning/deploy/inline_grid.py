"""A Flower ``Grid`` whose nodes are ClientApps in this process: a user's ServerApp and ClientApp (and
``AlgorithmStrategy`` with ``client_helper``) run together without a SuperLink or Ray — for tests and debugging.

Each node has its own ``Context`` (``node_config`` with its ``partition-id``, a ``state`` kept across rounds, as a
SuperNode keeps it); node ids are not the partition ids, as in a real federation. Messages are answered in the
order sent; an exception in the ClientApp becomes an error reply as Flower makes it (``raise_errors=True``: raised).
"""
from __future__ import annotations

from typing import Iterable, Optional

from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

NODE_ID_BASE = 7_000_003


class InlineGrid(Grid):
    """``num_nodes`` nodes running ``client_app``; node i has ``partition-id`` i and ``num-partitions``."""

    def __init__(self, client_app, num_nodes: int, run_config: Optional[dict] = None, raise_errors: bool = True):
        self.client_app, self.raise_errors = client_app, raise_errors
        for name, value in (("run_id", 1), ("node_id", SUPERLINK_NODE_ID), ("task_id", 1)):
            if getattr(TaskIdentity, f"_{name}") is None:  # as a ServerApp process has them
                setattr(TaskIdentity, name, value)
        self.contexts = {NODE_ID_BASE - 17 * i: Context(run_id=1, node_id=NODE_ID_BASE - 17 * i,
                                                        node_config={"partition-id": i, "num-partitions": num_nodes},
                                                        state=RecordDict(), run_config=dict(run_config or {}))
                         for i in reversed(range(num_nodes))}
        self.replies: dict[str, Message] = {}
        self.sent = 0
        self._run = None

    def set_run(self, run) -> None:
        self._run = run

    @property
    def run(self):
        return self._run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: Optional[float] = None) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for message in messages:
            self.sent += 1
            message.metadata.__dict__["_message_id"] = f"inline-{self.sent}"  # as Flower's own grids set it
            message.metadata.__dict__["_src_node_id"] = 0
            context = self.contexts[message.metadata.dst_node_id]
            try:
                reply = self.client_app(message, context)
            except Exception as err:  # noqa: BLE001 - what a SuperNode does with a ClientApp's exception
                if self.raise_errors:
                    raise
                reply = Message(Error(code=2, reason=f"{type(err).__name__}: {err}"), reply_to=message)
            self.replies[message.metadata.message_id] = reply
            ids.append(message.metadata.message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self.replies.pop(i) for i in message_ids if i in self.replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: Optional[float] = None) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))
