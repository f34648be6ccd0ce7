"""PowerSGD uploads (Vogels et al. 2019): every ≥2-d parameter tensor of an upload as rank-r factors
from one power-iteration step, warm-started from the client's previous Q.

For a tensor's slice reshaped to a matrix M (n × m: its first dimension × the rest), with the
client's Q₀ (m × r; random normal the first time):

    P = orthonormal(M Q₀)     (reduced QR)
    Q = Mᵀ P                  sent: P and Q (fp32), decoded M̂ = P Qᵀ; Q is kept for the next round

1-d tensors (biases, norms, buffers), slices that are not whole rows, and matrices whose factors
would not be smaller than M ((n + m)·r ≥ n·m, or fewer than r rows or columns) are sent as they are. Error feedback (on by default)
is the upload callback's, as for every codec. A client's Q of every 2-d tensor lives in the client-
state store (``powersgd_q_<channel>``), committed only when its upload arrives.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from fl_lightning.compression.codecs import CODECS, Codec
from fl_lightning.errors import ConfigError


@dataclass(frozen=True)
class Piece:
    """``length`` entries at ``offset`` of an upload; ``rows × cols`` when sent as factors, with its
    tensor's Q at ``q_offset`` of the client's Q row."""

    offset: int
    length: int
    rows: int = 0
    cols: int = 0
    q_offset: int = -1


@dataclass
class LowRankMessage:
    """Per piece either the raw values (one tensor) or the factors (P, Q)."""

    tensors: list[tuple[torch.Tensor, ...]]
    pieces: list[Piece]

    @property
    def wire(self) -> tuple[torch.Tensor, ...]:
        return tuple(t for group in self.tensors for t in group)

    def decode(self) -> torch.Tensor:
        return torch.cat([group[0] if len(group) == 1 else (group[0] @ group[1].T).reshape(-1)
                          for group in self.tensors])


def power_step(matrix: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One PowerSGD step: P = orthonormal(M Q₀), Q = Mᵀ P."""
    p = torch.linalg.qr(matrix @ q, mode="reduced").Q
    return p, matrix.T @ p


@CODECS.register()
class PowerSGD(Codec):
    """PowerSGD (Vogels et al. 2019): rank-r factors of each ≥2-d tensor, warm-started per client.

    Args:
        rank: r, the factors' rank (≥ 1).
        error_feedback: add the client's last compression error to its next upload (on: the method's).
    """

    name = "powersgd"
    deployable = False  # its warm-started factors are not in the node protocol yet

    def __init__(self, rank: int = 2, error_feedback: bool = True):
        if rank < 1:
            raise ConfigError("PowerSGD(rank=...)", f"must be ≥ 1, got {rank}")
        self.rank, self.error_feedback = rank, error_feedback

    # -- layout: which slices of an upload are matrices, and where their Q lives ------------
    def q_layout(self, segments: Sequence, size: int) -> tuple[dict[str, tuple[int, int, int]], int]:
        """For a channel of ``size`` entries: segment name → (q offset, rows, cols) of every ≥2-d
        tensor whose factors are smaller than it, and the length of a client's Q row."""
        layout, offset = {}, 0
        for segment in segments:
            if segment.stop > size or len(segment.shape) < 2:
                continue
            rows = segment.shape[0]
            cols = segment.numel // rows
            if self.smaller_as_factors(rows, cols):
                layout[segment.name] = (offset, rows, cols)
                offset += cols * self.rank
        return layout, offset

    def smaller_as_factors(self, rows: int, cols: int) -> bool:
        return rows >= self.rank and cols >= self.rank and (rows + cols) * self.rank < rows * cols

    def pieces(self, ranges: Sequence[tuple[int, int]], segments: Sequence, size: int) -> list[Piece]:
        """The upload's pieces, in order: each range cut at tensor boundaries; a piece of whole rows of
        a factorisable tensor becomes a (rows × cols) matrix."""
        layout, _ = self.q_layout(segments, size)
        pieces, offset = [], 0
        for a, b in ranges:
            for segment in segments:
                start, stop = max(a, segment.start), min(b, segment.stop)
                if start >= stop:
                    continue
                q_offset, _, cols = layout.get(segment.name, (-1, 0, 0))
                whole_rows = cols and (start - segment.start) % cols == 0 and (stop - start) % cols == 0
                if whole_rows and self.smaller_as_factors((stop - start) // cols, cols):
                    pieces.append(Piece(offset, stop - start, (stop - start) // cols, cols, q_offset))
                else:
                    pieces.append(Piece(offset, stop - start))
                offset += stop - start
        return pieces

    def encode_pieces(self, values: torch.Tensor, pieces: list[Piece], q_row: torch.Tensor,
                      generator: torch.Generator) -> tuple[LowRankMessage, torch.Tensor]:
        """The message and the client's new Q row (a tensor's Q still zeros: no warm start yet, Q₀
        drawn from ``generator``)."""
        new_q, tensors = q_row.clone(), []
        for piece in pieces:
            flat = values[piece.offset:piece.offset + piece.length]
            if piece.rows == 0:
                tensors.append((flat,))
                continue
            rank = self.rank
            span = slice(piece.q_offset, piece.q_offset + piece.cols * rank)
            q0 = q_row[span].view(piece.cols, rank).to(values.device)
            if not bool(q0.any()):  # this tensor's first upload by this client
                q0 = torch.randn(piece.cols, rank, generator=generator, device=generator.device).to(values.device)
            p, q = power_step(flat.view(piece.rows, piece.cols), q0)
            tensors.append((p.contiguous(), q.contiguous()))
            new_q[span] = q.reshape(-1).to(new_q.device)
        return LowRankMessage(tensors, pieces), new_q

    def client_state(self, segments, size: int) -> dict[str, int]:
        return {"q": self.q_layout(segments, size)[1]}  # each tensor's warm-start Q

    def encode_for_client(self, values, ranges, segments, size, state, generator):
        message, q = self.encode_pieces(values, self.pieces(ranges, segments, size), state["q"], generator)
        return message, {"q": q}

    def encode(self, values, generator):
        raise ConfigError("PowerSGD", "needs the upload's tensor shapes: it runs through "
                          "fl_lightning.callbacks.CompressedUpload (model.compression powersgd)")
