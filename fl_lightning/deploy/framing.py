"""The node's local socket between the Flower ClientApp and its warm worker: length-prefixed frames, a JSON header
then a body, each way, carrying the message's records as they are (fl_lightning.deploy.protocol): an ArrayRecord's
arrays as Flower serialised them, a ConfigRecord's or MetricRecord's values in the header. Imports nothing heavy
(Flower's records, no torch): the ClientApp process stays light."""
from __future__ import annotations

import hashlib
import json
import os
import socket
import struct
import tempfile

from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

LENGTH = struct.Struct(">Q")
ERROR = "fl.error"  # a node's one-line error, the reply's only record (fl_lightning.deploy.protocol)


def error_content(line: str) -> RecordDict:
    return RecordDict({ERROR: ConfigRecord({"line": line})})


def socket_path(state_dir: str) -> str:
    """A short path (AF_UNIX paths are limited to ~100 bytes) unique to the node's state directory."""
    digest = hashlib.sha1(os.path.abspath(state_dir).encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"fl-node-{digest}.sock")


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    chunks, got = [], 0
    while got < size:
        chunk = conn.recv(min(size - got, 1 << 20))
        if not chunk:
            raise ConnectionError("the node's worker closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def send(conn: socket.socket, header: dict, body: bytes = b"") -> None:
    encoded = json.dumps(header).encode()
    conn.sendall(LENGTH.pack(len(encoded)) + encoded + LENGTH.pack(len(body)))
    conn.sendall(body)


def receive(conn: socket.socket) -> tuple[dict, bytes]:
    header = json.loads(_recv_exact(conn, LENGTH.unpack(_recv_exact(conn, LENGTH.size))[0]))
    return header, _recv_exact(conn, LENGTH.unpack(_recv_exact(conn, LENGTH.size))[0])


def send_records(conn: socket.socket, header: dict, content: RecordDict) -> None:
    records, body = pack(content)
    send(conn, {**header, "records": records}, body)


def receive_records(conn: socket.socket) -> tuple[dict, RecordDict]:
    header, body = receive(conn)
    return header, unpack(header["records"], body)


def pack(content: RecordDict) -> tuple[list, bytes]:
    """A RecordDict as (header, body): ``[name, kind, entries]`` per record, the arrays' bytes in the body."""
    header, chunks = [], []
    for name, record in content.items():
        if isinstance(record, ArrayRecord):
            entries = []
            for key, array in record.items():
                entries.append([key, array.dtype, list(array.shape), array.stype, len(array.data)])
                chunks.append(array.data)
            header.append([name, "arrays", entries])
        else:
            header.append([name, "metrics" if isinstance(record, MetricRecord) else "config", dict(record)])
    return header, b"".join(chunks)


def unpack(header: list, body: bytes) -> RecordDict:
    records, offset = {}, 0
    for name, kind, entries in header:
        if kind == "arrays":
            arrays = {}
            for key, dtype, shape, stype, size in entries:
                arrays[key] = Array(dtype=dtype, shape=tuple(shape), stype=stype, data=body[offset:offset + size])
                offset += size
            records[name] = ArrayRecord(arrays)
        else:
            records[name] = (MetricRecord if kind == "metrics" else ConfigRecord)(entries)
    return RecordDict(records)
