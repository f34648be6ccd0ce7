"""Flower's Message API for fl-lightning's bytes: one ``ConfigRecord`` holding one ``bytes`` value
each way, sent to many nodes at once and collected with a short poll (``Grid.send_and_receive`` sleeps 3 s
between pulls), and the bytes a message really puts on the wire (its objects as Flower serialises them)."""
from __future__ import annotations

import time
from typing import Optional

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

RECORD, KEY, ERROR = "fl", "bytes", "error"
POLL_S = 0.1


def make(node_id: int, message_type: str, data: bytes) -> Message:
    return Message(RecordDict({RECORD: ConfigRecord({KEY: data})}), dst_node_id=node_id, message_type=message_type)


def reply(to: Message, data: Optional[bytes] = None, error: Optional[str] = None) -> Message:
    record = {KEY: data} if error is None else {ERROR: error}
    return Message(RecordDict({RECORD: ConfigRecord(record)}), reply_to=to)


def body(message: Message) -> tuple[Optional[bytes], Optional[str]]:
    """(bytes, None), or (None, the node's one-line error / Flower's error)."""
    if message.has_error():
        return None, f"Flower error {message.error.code}: {message.error.reason}"
    record = message.content[RECORD]
    return (None, str(record[ERROR])) if ERROR in record else (bytes(record[KEY]), None)


def wire_bytes(message: Message) -> int:
    """What Flower transfers for the message: every object of its tree, serialised (headers included)."""
    return sum(len(obj.deflate()) for obj in get_all_nested_objects(message).values())


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
