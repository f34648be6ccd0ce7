"""Compressed uploads (spec, "Compression baselines"; paper Table 6): Top-k, rand-k, QSGD.

Acts last on what a client uploads (``on_upload``), so it composes with every algorithm: each
channel of the upload (Δ, and Δc for SCAFFOLD / FedBCGD+) — all the slices the client sends,
e.g. FedBCGD's block j and the shared block — is compressed as one vector and replaced by the
compressed message; the server decodes it before aggregating (``comm.ReceivedSums``).

Error feedback (Top-k's residual accumulation, Aji & Heafield 2017; Karimireddy et al. 2019):
the client compresses v = u + e_i and keeps e_i ← v − decode(message) on the slices it sent
(e_i per client and channel in the run's client-state store, tables ``residual_<channel>``;
committed only when the upload arrives — ``on_client_reported``).
"""
from __future__ import annotations

from typing import Optional

import torch

from fl_lightning.callbacks.base import FLCallback
from fl_lightning.comm import Part
from fl_lightning.compression import qsgd, randk, topk
from fl_lightning.client_state import refuse_inline_client_state
from fl_lightning.errors import ConfigError
from fl_lightning.seeding import Stream, generator, stream_seed

METHODS = ("topk", "randk", "qsgd")


class CompressedUpload(FLCallback):
    """Compresses every upload channel.

    Args:
        method: ``topk``, ``randk`` or ``qsgd``.
        k: Top-k / rand-k: entries kept, a count (≥ 1) or a fraction of the uploaded entries (< 1).
        levels: QSGD: s, the number of levels (s = 255: 8 level bits + 1 sign bit per entry).
        bucket_size: QSGD: entries per norm; None: one norm for the whole upload.
        error_feedback: keep the compression error per client and add it to the next upload.
    """

    def __init__(self, method: str, k: float = 0.1, levels: int = 255, bucket_size: Optional[int] = 512,
                 error_feedback: bool = False):
        if method not in METHODS:
            raise ConfigError("CompressedUpload(method=...)", f"unknown {method!r}; choose one of {', '.join(METHODS)}")
        if not k > 0:
            raise ConfigError("CompressedUpload(k=...)", f"must be > 0 (a count, or a fraction below 1), got {k}")
        if not 1 <= levels <= 16383:
            raise ConfigError("CompressedUpload(levels=...)", f"must be in [1, 16383], got {levels}")
        if bucket_size is not None and bucket_size < 1:
            raise ConfigError("CompressedUpload(bucket_size=...)", f"must be ≥ 1 or None, got {bucket_size}")
        self.method, self.k, self.levels, self.bucket_size = method, k, levels, bucket_size
        self.error_feedback = error_feedback
        self.residuals = {}  # channel → its client-state table of e_i (error feedback)

    def encode(self, values: torch.Tensor, rng: torch.Generator):
        if self.method == "topk":
            return topk(values, self.k)
        if self.method == "randk":
            return randk(values, self.k, rng)
        return qsgd(values, self.levels, self.bucket_size, rng)

    def configure_round(self, loop, plan):
        if self.error_feedback:
            sizes = {"delta": loop.flat.numel, "control": loop.flat.num_params}
            self.residuals = {channel: loop.client_state.table(f"residual_{channel}", size)
                              for channel, size in sizes.items()}

    def on_upload(self, loop, client):
        device = loop.flat.device
        rng = generator(stream_seed(client.seed, Stream.COMPRESSION), device)
        kept = {}
        for channel in client.upload.channels():
            ranges, values = client.upload.take(channel)
            residual = None
            if self.error_feedback:
                residual = self.residuals[channel].read(client.client_id)
                values = values + torch.cat([residual[a:b] for a, b in ranges]).to(device)
            part = Part(channel, ranges, self.encode(values, rng))
            client.upload.parts.append(part)
            if residual is not None:  # the server decodes the same part: decoded once (Part.values)
                error, offset = values - part.values(), 0  # residual: a fresh row, changed in place
                for a, b in ranges:
                    residual[a:b] = error[offset:offset + b - a].cpu()
                    offset += b - a
                kept[channel] = residual
        client.info["residuals"] = kept

    def on_client_reported(self, loop, client):
        for channel, residual in client.info.get("residuals", {}).items():
            self.residuals[channel].write(client.client_id, residual)

    def state_dict(self) -> dict:
        return {"method": self.method, "k": self.k, "levels": self.levels, "bucket_size": self.bucket_size,
                "error_feedback": self.error_feedback}

    def load_state_dict(self, state_dict: dict) -> None:
        refuse_inline_client_state(state_dict, "residuals")
