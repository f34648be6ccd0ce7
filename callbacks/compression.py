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

import torch

from fl_lightning.callbacks.base import FLCallback
from fl_lightning.federation.client_state import refuse_inline_client_state
from fl_lightning.federation.messages import Part
from fl_lightning.compression.codecs import Codec
from fl_lightning.errors import ConfigError
from fl_lightning.federation.seeding import Stream, generator, stream_seed


class CompressedUpload(FLCallback):
    """Compresses every upload channel with ``codec``.

    Args:
        codec: a ``fl_lightning.compression.codecs.Codec`` (TopK, RandK, QSGD) with its options.
    """

    @property
    def keeps_client_state(self) -> bool:  # (fl_lightning.assembly.fit.HookTraits)
        return not self.codec.stateless

    configures_messages = True

    def __init__(self, codec: Codec):
        if not isinstance(codec, Codec):
            raise ConfigError("CompressedUpload(codec=...)", f"needs a fl_lightning.compression.codecs.Codec (TopK, RandK, "
                              f"QSGD), got {type(codec).__name__}")
        self.codec = codec
        self.residuals = {}  # channel → its client-state table of e_i (error feedback)

    def configure_round(self, round):
        sizes = {"delta": round.numel, "control": round.num_params}
        if self.codec.error_feedback:
            self.residuals = {channel: round.client_state.table(f"residual_{channel}", size)
                              for channel, size in sizes.items()}
        self.segments, self.sizes = round.segments, sizes
        self.state_tables = {channel: {name: round.client_state.table(f"{self.codec.name}_{name}_{channel}", length)
                                       for name, length in self.codec.client_state(round.segments, size).items()}
                             for channel, size in sizes.items()}  # e.g. PowerSGD's warm-start Q per client

    def on_upload(self, client):
        device = client.vector.device
        rng = generator(stream_seed(client.task.seed, Stream.COMPRESSION), device)
        kept = {}
        for channel in client.upload.channels():
            ranges, values = client.upload.take(channel)
            residual = None
            if self.codec.error_feedback:
                residual = self.residuals[channel].read(client.client_id)
                values = values + torch.cat([residual[a:b] for a, b in ranges]).to(device)
            part = Part(channel, ranges, self._encode(client, channel, ranges, values, rng, kept))
            client.upload.parts.append(part)
            if residual is not None:  # the server decodes the same part: decoded once (Part.values)
                error, offset = values - part.values(), 0  # residual: a fresh row, changed in place
                for a, b in ranges:
                    residual[a:b] = error[offset:offset + b - a].cpu()
                    offset += b - a
                kept[self.residuals[channel]] = residual
        client.scratch[self] = kept  # table → the client's new row (e_i, Q), written once its upload arrives

    def _encode(self, client, channel: str, ranges, values: torch.Tensor, rng, kept: dict):
        tables = self.state_tables[channel]
        state = {name: table.read(client.client_id) for name, table in tables.items()}
        message, rows = self.codec.encode_for_client(values, ranges, self.segments, self.sizes[channel], state, rng)
        kept.update({tables[name]: row for name, row in rows.items()})
        return message

    def on_client_reported(self, client):
        for table, row in client.scratch.get(self, {}).items():
            table.write(client.client_id, row)

    def state_dict(self) -> dict:
        return {"codec": type(self.codec).__name__, **self.codec.options()}

    def load_state_dict(self, state_dict: dict) -> None:
        refuse_inline_client_state(state_dict, "residuals")
