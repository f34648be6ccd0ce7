"""The round's messages and their aggregation: what crosses the network, and how much of it (spec,
"Communication accounting"). Re-exported from ``fl_lightning.compression.accounting``.

A ``Payload`` is what one client receives or sends in a round: named channels
("delta", "control", ...), each a list of parts. A part covers slices ``[start, stop)`` of a
server-side vector and carries the message actually sent for them: the values themselves (a
tensor), or a compressed message (``fl_lightning.compression.codecs``) whose ``wire`` tensors are what
is sent and whose ``decode()`` the server aggregates. Bytes are counted from the tensors on the
wire, so masking (FedBCGD) and compression are accounted for automatically.

``ReceivedSums`` is the server's side: uploads are decoded and summed as they stream in (never
all held at once); ``mean``/``sum`` are plain functions of those sums.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Protocol, Union

import torch


class WireMessage(Protocol):
    """A compressed message (fl_lightning.compression.codecs): the tensors sent, and the values they decode to."""

    wire: tuple[torch.Tensor, ...]

    def decode(self) -> torch.Tensor: ...


Message = Union[torch.Tensor, WireMessage]


@dataclass
class Part:
    channel: str
    ranges: list[tuple[int, int]]  # the slices of the channel's vector it covers, in order
    message: Message
    _decoded: Optional[torch.Tensor] = field(default=None, repr=False)

    @property
    def wire(self) -> tuple[torch.Tensor, ...]:
        return (self.message,) if isinstance(self.message, torch.Tensor) else self.message.wire

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.wire)

    def values(self) -> torch.Tensor:
        """The (decoded) values of the covered slices, concatenated; a message is decoded once."""
        if isinstance(self.message, torch.Tensor):
            return self.message
        if self._decoded is None:
            self._decoded = self.message.decode()
        return self._decoded


@dataclass
class Payload:
    parts: list[Part] = field(default_factory=list)

    def add(self, channel: str, start: int, tensor: torch.Tensor) -> None:
        """Send ``tensor`` as the slice of ``channel`` that begins at ``start``."""
        self.parts.append(Part(channel, [(start, start + tensor.numel())], tensor.reshape(-1)))

    def channels(self) -> list[str]:
        return list(dict.fromkeys(p.channel for p in self.parts))

    def take(self, channel: str) -> tuple[list[tuple[int, int]], torch.Tensor]:
        """Removes the channel's parts; returns their slices and their values as one vector (to compress)."""
        taken = [p for p in self.parts if p.channel == channel]
        self.parts = [p for p in self.parts if p.channel != channel]
        return [r for p in taken for r in p.ranges], torch.cat([p.values() for p in taken])

    def is_finite(self) -> bool:
        return all(bool(torch.isfinite(t).all()) for p in self.parts for t in p.wire if t.is_floating_point())

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)


class ReceivedSums:
    """Per-channel running sums of uploaded slices and of their weights, per coordinate.

    With ``ordered`` (several ranks) the additions are recorded instead, tagged with the client's plan
    ``position``; ``combine`` exchanges every rank's records and each rank makes them in plan order, so
    the sums are those of one process bit for bit (a float sum depends on its order). ``on_added`` is called for
    every contribution once it is in the sums (a subclass that keeps the uploads overrides it)."""

    def __init__(self, sizes: dict[str, int], device: torch.device, ordered: bool = False):
        self.sizes = sizes
        self.device = device
        self._sums: dict[str, torch.Tensor] = {}  # channel → [2, n]: the sum, then the weight, per coordinate
        self._records: Optional[list[tuple]] = [] if ordered else None  # (position, channel, ranges, weight, values)
        self.position = 0  # the plan position of the client whose upload is being added

    def _buffers(self, channel: str):
        if channel not in self._sums:
            if channel not in self.sizes:
                raise KeyError(f"upload channel {channel!r} has no server vector; known: {sorted(self.sizes)}")
            self._sums[channel] = torch.zeros(2, self.sizes[channel], device=self.device)
        return self._sums[channel].unbind()

    def add(self, upload: Payload, delta_weight: float = 1.0) -> None:
        """Adds one client's upload. ``delta_weight`` weights its model update (weighted aggregation);
        every other channel (e.g. Eq. 5's Δc sum) is always added with weight 1."""
        for part in upload.parts:
            weight = delta_weight if part.channel == "delta" else 1.0
            self._add(part.channel, part.ranges, weight, part.values())

    def add_sum(self, channel: str, values: torch.Tensor) -> None:
        """Adds a value the server derives from a reported upload (e.g. FedDC's h_i change) to ``channel``;
        nothing is sent for it, so nothing is counted. The channel must be in ``sizes``."""
        self._add(channel, None, 1.0, values.reshape(-1))

    def _add(self, channel: str, ranges: Optional[list[tuple[int, int]]], weight: float, values: torch.Tensor) -> None:
        total, weights = self._buffers(channel)
        values = values.to(total.dtype)
        if self._records is not None:
            self._records.append((self.position, channel, ranges, weight, values))
            return
        if ranges is None:  # the whole channel
            total.add_(values)
            weights.add_(weight)
        else:
            offset = 0
            for start, stop in ranges:
                total[start:stop].add_(values[offset:offset + stop - start], alpha=weight)
                weights[start:stop].add_(weight)
                offset += stop - start
        self.on_added(channel, ranges, weight, values)

    def on_added(self, channel: str, ranges: Optional[list[tuple[int, int]]], weight: float,
                 values: torch.Tensor) -> None:
        """The client at plan ``position`` contributed ``values`` to ``channel`` at ``ranges`` (None: a value the
        server derived, ``add_sum``) with ``weight``, in plan order under several ranks; default nothing."""

    def combine(self, collective) -> None:
        """Several ranks: every rank's recorded additions (values moved by ``collective.concat``,
        their slices by ``all_gather_object``), made here in plan order; then every rank holds the sums
        one process would have."""
        records, self._records = self._records or [], None
        values = torch.cat([r[4] for r in records]) if records else torch.zeros(0, device=self.device)
        meta = collective.gather_objects([(r[0], r[1], r[2], r[3], r[4].numel()) for r in records])
        values, offset, everyone = collective.concat(values), 0, []
        for rank_meta in meta:
            for position, channel, ranges, weight, size in rank_meta:
                everyone.append((position, channel, ranges, weight, values[offset:offset + size]))
                offset += size
        self._sums = {}
        for position, channel, ranges, weight, part in sorted(everyone, key=lambda r: r[0]):  # stable: a client's order
            self.position = position  # (whose upload: a subclass that keeps uploads reads it)
            self._add(channel, ranges, weight, part)

    def sum(self, channel: str) -> torch.Tensor:
        """Σ over clients of what they uploaded (zero where nobody did)."""
        return self._buffers(channel)[0]

    def weight(self, channel: str) -> torch.Tensor:
        """Per coordinate: how many clients (or how much weight) uploaded it."""
        return self._buffers(channel)[1]

    def mean(self, channel: str) -> torch.Tensor:
        """Per coordinate: mean over the clients that uploaded it (zero where none did)."""
        total, weights = self._buffers(channel)
        return total / weights.clamp_min(torch.finfo(weights.dtype).tiny)


class CommMeter:
    """Cumulative communication (spec, "Communication accounting").

    ``upload_d`` is the mean upload per sampled client, in float-equivalents (bytes / 4),
    divided by d (the number of model parameters), summed over rounds.
    """

    FLOAT_BYTES = 4

    def __init__(self, num_params: int):
        self.num_params = num_params
        self.upload_bytes = 0
        self.download_bytes = 0
        self.upload_d = 0.0
        self.round_upload_bytes = 0
        self.round_download_bytes = 0
        self.clients_reported = 0
        self.clients_dropped = 0

    def add_round(self, upload_bytes: list[int], download_bytes: list[int], clients_dropped: int = 0) -> None:
        """One entry per sampled client (0 for an upload that never arrived); ``clients_dropped`` of them
        failed to report or sent NaN/inf."""
        self.clients_reported, self.clients_dropped = len(upload_bytes) - clients_dropped, clients_dropped
        self.round_upload_bytes = sum(upload_bytes)
        self.round_download_bytes = sum(download_bytes)
        self.upload_bytes += self.round_upload_bytes
        self.download_bytes += self.round_download_bytes
        per_client_floats = self.round_upload_bytes / self.FLOAT_BYTES / max(len(upload_bytes), 1)  # Poisson: may be none
        self.upload_d += per_client_floats / self.num_params

    def __repr__(self) -> str:
        return (f"CommMeter(upload_d={self.upload_d:.4f}, upload_bytes={self.upload_bytes:,}, "
                f"download_bytes={self.download_bytes:,}, last round: {self.clients_reported} reported, "
                f"{self.clients_dropped} dropped)")

    def metrics(self) -> dict[str, float]:
        return {
            "comm/upload_d": self.upload_d,
            "comm/upload_bytes": float(self.upload_bytes),
            "comm/download_bytes": float(self.download_bytes),
            "comm/clients_reported": float(self.clients_reported),
            "comm/clients_dropped": float(self.clients_dropped),
        }

    def state_dict(self) -> dict:
        return {"upload_bytes": self.upload_bytes, "download_bytes": self.download_bytes, "upload_d": self.upload_d}

    def load_state_dict(self, state: dict) -> None:
        self.upload_bytes = int(state["upload_bytes"])
        self.download_bytes = int(state["download_bytes"])
        self.upload_d = float(state["upload_d"])
