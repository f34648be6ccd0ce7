"""What crosses the network in a deployment, as bytes: a client's task and its reply.

A task is the round's plan (every sampled client's ``ClientTask``: the node rebuilds the same
``RoundContext``), the position it trains, the round's lr, x^r and the algorithm's server state (the
FLCallbacks' ``state_dict()``: SCAFFOLD's c, ...). A reply is the upload as sent (each ``Part``: its
channel, slices and message — a tensor or a codec's message), the download's size, the loss sum, the steps,
the network's own logs and the sums the node's ``on_client_reported`` hooks derived (``add_sum``).
Both are ``torch.save`` archives of tensors, numbers and strings, read back with ``weights_only=True``.
"""
from __future__ import annotations

import dataclasses
import io

import torch

from fl_lightning.federation.messages import Part, Payload
from fl_lightning.compression.codecs import QuantizedMessage, RotatedSignMessage, SignMessage, SparseMessage
from fl_lightning.federation.contexts import ClientTask

MESSAGES = {cls.__name__: cls for cls in (SparseMessage, QuantizedMessage, SignMessage, RotatedSignMessage)}
# PowerSGD's: not deployable yet. EDEN's RotatedSignMessage travels with its ±1 diagonal (the server could redraw it).
TASK_FIELDS = ("client_id", "position", "seed", "num_samples", "upload_ranges", "local_epochs", "pooled", "lost",
               "max_steps")


def to_bytes(value: dict) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def from_bytes(data: bytes) -> dict:
    return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")


def task_record(task: ClientTask) -> list:
    return [[list(r) for r in value] if name == "upload_ranges" else value
            for name, value in ((name, getattr(task, name)) for name in TASK_FIELDS)]


def task_from(record: list) -> ClientTask:
    values = dict(zip(TASK_FIELDS, record))
    values["upload_ranges"] = [tuple(r) for r in values["upload_ranges"]]
    return ClientTask(**values)


def _message_record(message) -> dict:
    if isinstance(message, torch.Tensor):
        return {"kind": "tensor", "tensor": message.detach().cpu()}
    fields = {f.name: getattr(message, f.name) for f in dataclasses.fields(message)}
    return {"kind": type(message).__name__, "fields": fields}


def _message_from(record: dict):
    if record["kind"] == "tensor":
        return record["tensor"]
    return MESSAGES[record["kind"]](**record["fields"])


def payload_record(payload: Payload) -> list:
    return [{"channel": p.channel, "ranges": [list(r) for r in p.ranges], "message": _message_record(p.message)}
            for p in payload.parts]


def payload_from(records: list) -> Payload:
    return Payload([Part(r["channel"], [tuple(x) for x in r["ranges"]], _message_from(r["message"]))
                    for r in records])
