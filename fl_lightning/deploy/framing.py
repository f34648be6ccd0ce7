"""The node's local socket between the Flower ClientApp and its warm worker: length-prefixed frames,
a JSON header then a body, each way. Imports nothing heavy: the ClientApp process stays light."""
from __future__ import annotations

import hashlib
import json
import os
import socket
import struct
import tempfile

LENGTH = struct.Struct(">Q")


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
