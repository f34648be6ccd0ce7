"""Reads a W&B offline run file (run-*.wandb): a LevelDB-style log of protobuf Records.

Format: a 7-byte header (":W&B", magic 0xBEE1, version 0), then 32 KiB blocks of chunks,
each with a 7-byte header (crc32, length, type: 1 full, 2 first, 3 middle, 4 last).
"""
import struct

from wandb.proto import wandb_internal_pb2 as pb

BLOCK = 32768
CHUNK_HEADER = 7


def read_records(path):
    data = open(path, "rb").read()
    ident, magic, version = struct.unpack("<4sHB", data[:7])
    assert ident == b":W&B" and magic == 0xBEE1 and version == 0
    pos, pending = 7, b""
    while pos + CHUNK_HEADER <= len(data):
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < CHUNK_HEADER:
            pos += left_in_block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + CHUNK_HEADER])
        if length == 0 and kind == 0:
            break
        chunk = data[pos + CHUNK_HEADER:pos + CHUNK_HEADER + length]
        pos += CHUNK_HEADER + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            yield record


def history_rows(records):
    """Each history record as {metric name: JSON value}; names with '/' are stored as nested keys."""
    return [{item.key or "/".join(item.nested_key): item.value_json for item in r.history.item}
            for r in records if r.WhichOneof("record_type") == "history"]
