"""A system trace: one CSV row per device (``--model.system.trace clients.csv``).

Columns (header required, any order, extra columns ignored):

============== ======== ===========================================================
column         needed   meaning
============== ======== ===========================================================
speed          yes      local training speed, samples per second (> 0)
up_mbps        yes      uplink bandwidth, Mbit/s (> 0)
down_mbps      yes      downlink bandwidth, Mbit/s (> 0)
latency_s      no       fixed seconds per round trip (≥ 0; default 0)
on_s           no       seconds online per availability cycle (> 0; empty or absent: always online)
off_s          no       seconds offline per cycle (≥ 0; default 0)
phase_s        no       where in its cycle the device is at time 0 (≥ 0; default 0)
============== ======== ===========================================================

Client i of the population takes row i mod R (R rows), so a short trace covers any number of clients.
Any mistake is one ``ConfigError`` line naming the file, the column and, where it applies, the row.
"""
from __future__ import annotations

import csv
import math

import numpy as np

from fl_lightning.errors import ConfigError

FIELD = "model.system.trace"
REQUIRED = ("speed", "up_mbps", "down_mbps")
OPTIONAL = {"latency_s": 0.0, "on_s": math.inf, "off_s": 0.0, "phase_s": 0.0}
POSITIVE = ("speed", "up_mbps", "down_mbps", "on_s")


def read_trace(path: str) -> dict[str, np.ndarray]:
    """The trace's columns as float64 arrays (REQUIRED and OPTIONAL, defaults filled in)."""
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            header = [h.strip() for h in (reader.fieldnames or [])]
            missing = [c for c in REQUIRED if c not in header]
            if missing:
                raise ConfigError(FIELD, f"{path} has no column {missing[0]!r}; the header needs "
                                  f"{', '.join(REQUIRED)} (optional: {', '.join(OPTIONAL)})")
            columns: dict[str, list[float]] = {c: [] for c in (*REQUIRED, *OPTIONAL)}
            for line, row in enumerate(reader, start=2):
                row = {(k or "").strip(): v for k, v in row.items()}
                for column in columns:
                    columns[column].append(_value(path, line, column, row.get(column)))
    except OSError as err:
        raise ConfigError(FIELD, f"cannot read {path}: {err.strerror}; give an existing CSV file") from None
    if not columns["speed"]:
        raise ConfigError(FIELD, f"{path} has a header but no rows; add one row per device")
    return {c: np.asarray(v, dtype=np.float64) for c, v in columns.items()}


def _value(path: str, line: int, column: str, text) -> float:
    if text is None or str(text).strip() == "":
        if column in REQUIRED:
            raise ConfigError(FIELD, f"{path} line {line}: column {column!r} is empty; give a number")
        return OPTIONAL[column]
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(FIELD, f"{path} line {line}: column {column!r} is {text!r}, not a number") from None
    if math.isnan(value) or (column in POSITIVE and not value > 0) or value < 0:
        bound = "> 0" if column in POSITIVE else "≥ 0"
        raise ConfigError(FIELD, f"{path} line {line}: column {column!r} must be {bound}, got {text}")
    return value
