"""Compressed messages: what a client actually sends when its upload is compressed (spec,
"Compression baselines"; docs/algorithms.md, "Compressed uploads").

Each encoder turns a flat fp32 vector into a message whose ``wire`` tensors are exactly what
crosses the network — bytes are counted from them (``comm.Payload``) — and whose ``decode()``
gives the server the dense vector it aggregates.

* Top-k (Aji & Heafield 2017): the k largest-magnitude entries, as int32 indices + fp32 values
  (2k floats, the spec's count).
* rand-k (Sattler et al. 2019): k uniformly random entries, int32 indices + fp32 values scaled
  by n/k, so that E[decode] = x.
* QSGD (Alistarh et al. 2017): per bucket of ``bucket_size`` entries (one bucket: the whole
  vector) an fp32 norm ‖v‖₂; per entry a sign and a level ℓ ∈ {0..s} rounded stochastically,
  ℓ = ⌊s|v_i|/‖v‖⌋ + Bernoulli(frac), so E[‖v‖ sign(v_i) ℓ/s] = v_i. Sign and level are
  bit-packed at 1 + ⌈log₂(s+1)⌉ bits per entry: bits = 32·buckets + n(1 + ⌈log₂(s+1)⌉)
  (the spec's 32 + d(1 + log₂(s+1)) for one bucket and s+1 a power of two).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from fl_lightning.errors import ConfigError
from fl_lightning.registry import Registry


def num_kept(k: float, n: int) -> int:
    """k as a count (k ≥ 1) or as a fraction of the n uploaded entries (0 < k < 1); at least 1, at most n."""
    count = int(k) if k >= 1 else int(k * n)
    return max(1, min(n, count))


@dataclass
class SparseMessage:
    """Top-k / rand-k: ``values`` at ``indices`` of an n-vector, the rest zero."""

    indices: torch.Tensor  # int32
    values: torch.Tensor  # fp32 (rand-k: already scaled by n/k)
    size: int

    @property
    def wire(self) -> tuple[torch.Tensor, ...]:
        return self.indices, self.values

    def decode(self) -> torch.Tensor:
        dense = torch.zeros(self.size, dtype=self.values.dtype, device=self.values.device)
        return dense.index_copy_(0, self.indices.long(), self.values)


def topk(x: torch.Tensor, k: float) -> SparseMessage:
    kept = num_kept(k, x.numel())
    indices = x.abs().topk(kept, sorted=False).indices
    return SparseMessage(indices.to(torch.int32), x[indices].float(), x.numel())


def randk(x: torch.Tensor, k: float, generator: torch.Generator) -> SparseMessage:
    n = x.numel()
    kept = num_kept(k, n)
    indices = torch.randperm(n, generator=generator, device=generator.device)[:kept].to(x.device)
    return SparseMessage(indices.to(torch.int32), x[indices].float() * (n / kept), n)


@dataclass
class QuantizedMessage:
    """QSGD: per-bucket norms and bit-packed (sign, level) codes."""

    norms: torch.Tensor  # fp32, one per bucket
    packed: torch.Tensor  # uint8
    size: int
    levels: int
    bucket_size: int

    @property
    def wire(self) -> tuple[torch.Tensor, ...]:
        return self.norms, self.packed

    def decode(self) -> torch.Tensor:
        width = code_width(self.levels)
        codes = unpack_bits(self.packed, width, self.size)
        level_bits = width - 1
        signed = torch.where(codes >> level_bits == 1, -(codes & ((1 << level_bits) - 1)), codes).float()
        buckets = -(-self.size // self.bucket_size)
        padded = torch.zeros(buckets * self.bucket_size, device=signed.device)
        padded[: self.size] = signed
        return (padded.view(buckets, -1) * (self.norms / self.levels).unsqueeze(1)).view(-1)[: self.size]


MAX_LEVELS = 16383  # QSGD's s: sign + level must fit 16-bit codes


def code_width(levels: int) -> int:
    """Bits per entry: one sign bit and ⌈log₂(s+1)⌉ level bits (at most 15: s < 16384)."""
    return 1 + max(1, math.ceil(math.log2(levels + 1)))


def qsgd(x: torch.Tensor, levels: int, bucket_size: Optional[int], generator: torch.Generator) -> QuantizedMessage:
    n = x.numel()
    bucket = bucket_size or n
    buckets = -(-n // bucket)
    padded = torch.zeros(buckets * bucket, dtype=torch.float32, device=x.device)
    padded[:n] = x
    rows = padded.view(buckets, bucket)
    norms = rows.norm(dim=1)
    scaled = rows.abs() * (levels / norms.clamp_min(torch.finfo(torch.float32).tiny)).unsqueeze(1)
    lower = scaled.floor()
    up = torch.rand(scaled.shape, generator=generator, device=generator.device).to(x.device) < (scaled - lower)
    level = (lower + up).clamp_max(levels).to(torch.int16).view(-1)[:n]
    width = code_width(levels)
    codes = ((x < 0).to(torch.int16) << (width - 1)) | level
    return QuantizedMessage(norms, pack_bits(codes, width), n, levels, bucket)


def pack_bits(codes: torch.Tensor, width: int) -> torch.Tensor:
    """n codes of ``width`` ≤ 15 bits each → ⌈n·width/8⌉ bytes (little-endian bit order)."""
    shifts = torch.arange(width, dtype=torch.int16, device=codes.device)
    bits = ((codes.to(torch.int16).unsqueeze(1) >> shifts) & 1).to(torch.uint8).view(-1)
    padding = (-bits.numel()) % 8
    if padding:
        bits = torch.cat([bits, bits.new_zeros(padding)])
    return (bits.view(-1, 8) << torch.arange(8, dtype=torch.uint8, device=codes.device)).sum(1, dtype=torch.uint8)


def unpack_bits(packed: torch.Tensor, width: int, n: int) -> torch.Tensor:
    """The inverse of ``pack_bits``: n int16 codes."""
    bits = ((packed.unsqueeze(1) >> torch.arange(8, dtype=torch.uint8, device=packed.device)) & 1).view(-1)
    bits = bits[: n * width].view(n, width).to(torch.int16)
    return (bits << torch.arange(width, dtype=torch.int16, device=packed.device)).sum(1, dtype=torch.int16)


# -- codecs: a compression method and its options, as one typed object (``model.compression``) -----
class Codec:
    """Encodes one upload channel (a flat vector) into a message; ``error_feedback`` keeps each
    client's compression error and adds it to its next upload (callbacks.compression)."""

    name = ""  # as written on the command line: --model.compression NAME
    error_feedback: bool = False
    deployable = True  # its messages travel to and from Flower nodes (fl_lightning.deploy)

    def encode(self, values: torch.Tensor, generator: torch.Generator):
        raise NotImplementedError

    @property
    def within_norm(self) -> bool:
        """True if a decoded message never has a larger norm than the values encoded (client-level DP's clip C then
        bounds it: fl_lightning.privacy): no rescaling, no rounding up, no error feedback."""
        return False

    @property
    def stateless(self) -> bool:
        """True if it keeps no per-client state between rounds (no error feedback, no ``client_state``)."""
        return not self.error_feedback and type(self).client_state is Codec.client_state

    def client_state(self, segments, size: int) -> dict[str, int]:
        """Per-client memory besides the error-feedback residual: name → row length for a channel of ``size``
        entries laid out as ``segments`` (kept on disk by CompressedUpload, written once the upload arrives)."""
        return {}

    def encode_for_client(self, values: torch.Tensor, ranges, segments, size: int, state: dict[str, torch.Tensor],
                          generator: torch.Generator):
        """(message, the client's new state rows) for the slices ``ranges`` of a channel; ``state`` holds the
        rows ``client_state`` declared (zeros the first time). A codec without such memory just encodes."""
        return self.encode(values, generator), {}

    def options(self) -> dict:
        return dict(vars(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.options().items())})"


CODECS = Registry("codec")  # --model.compression NAME → the class, in registration order


class SparseCodec(Codec):
    """k of the n entries, sent as int32 indices + fp32 values (TopK, RandK).

    Args:
        k: entries kept, a count (≥ 1) or a fraction of the uploaded entries (< 1).
        error_feedback: add the client's last compression error to its next upload.
    """

    def __init__(self, k: float = 0.1, error_feedback: bool = False):
        if not k > 0:
            raise ConfigError(f"{type(self).__name__}(k=...)", f"must be > 0 (a count, or a fraction below 1), got {k}")
        self.k, self.error_feedback = k, error_feedback


@CODECS.register()
class TopK(SparseCodec):
    """Top-k (Aji & Heafield 2017): the k largest-magnitude entries; error feedback on by default."""

    name = "topk"

    def __init__(self, k: float = 0.1, error_feedback: bool = True):
        super().__init__(k, error_feedback)

    @property
    def within_norm(self) -> bool:
        return not self.error_feedback  # a subset of the entries, unscaled

    def encode(self, values, generator):
        return topk(values, self.k)


@CODECS.register()
class RandK(SparseCodec):
    """rand-k (Sattler et al. 2019): k uniformly random entries scaled by n/k, so decoding is unbiased."""

    name = "randk"

    def encode(self, values, generator):
        return randk(values, self.k, generator)


@CODECS.register()
class QSGD(Codec):
    """QSGD (Alistarh et al. 2017): per bucket an fp32 norm, per entry a sign and a stochastic level.

    Args:
        levels: s, the number of levels, 1 ≤ s ≤ 16383 (s = 255: 8 level bits + 1 sign bit per entry).
        bucket_size: entries per norm; None: one norm for the whole upload.
        error_feedback: add the client's last compression error to its next upload.
    """

    name = "qsgd"

    def __init__(self, levels: int = 255, bucket_size: Optional[int] = 512, error_feedback: bool = False):
        if not 1 <= levels <= MAX_LEVELS:
            raise ConfigError("QSGD(levels=...)", f"must be in [1, {MAX_LEVELS}] (15-bit codes), got {levels}")
        if bucket_size is not None and bucket_size < 1:
            raise ConfigError("QSGD(bucket_size=...)", f"must be ≥ 1 or None, got {bucket_size}")
        self.levels, self.bucket_size, self.error_feedback = levels, bucket_size, error_feedback

    def encode(self, values, generator):
        return qsgd(values, self.levels, self.bucket_size, generator)


# -- one bit per entry --------------------------------------------------------------------------
@dataclass
class SignMessage:
    """Scaled signs: per bucket an fp32 scale, per entry one bit (1: negative)."""

    scales: torch.Tensor  # fp32, one per bucket
    packed: torch.Tensor  # uint8, ⌈n/8⌉ bytes
    size: int
    bucket_size: int

    @property
    def wire(self) -> tuple[torch.Tensor, ...]:
        return self.scales, self.packed

    def decode(self) -> torch.Tensor:
        signs = 1.0 - 2.0 * unpack_bits(self.packed, 1, self.size).float()
        return signs * self.scales.repeat_interleave(self.bucket_size)[: self.size]


def scaled_sign(x: torch.Tensor, bucket_size: Optional[int]) -> SignMessage:
    """EF-signSGD's compressor (Karimireddy et al. 2019): ‖v‖₁/n · sign(v) per bucket. One bit cannot say 0:
    sign(0) is sent as +1 (a bucket of zeros has scale 0, so it decodes to 0 exactly); a lone zero entry in a
    bucket with a non-zero scale decodes to +scale, and error feedback sends that error back next round, so
    an entry whose update stays 0 alternates ±scale and averages to 0 over two rounds."""
    n = x.numel()
    bucket = bucket_size or n
    buckets = -(-n // bucket)
    padded = torch.zeros(buckets * bucket, dtype=torch.float32, device=x.device)
    padded[:n] = x.abs()
    counts = torch.full((buckets,), float(bucket), device=x.device)
    counts[-1] = n - bucket * (buckets - 1)
    scales = padded.view(buckets, bucket).sum(1) / counts
    return SignMessage(scales, pack_bits((x < 0).to(torch.int16), 1), n, bucket)


def hadamard(x: torch.Tensor) -> torch.Tensor:
    """The orthonormal Walsh–Hadamard transform H/√n of a vector of length n = 2^m (its own inverse)."""
    n = x.numel()
    y, into, h = x.clone(), torch.empty_like(x), 1  # log2(n) butterfly passes between two buffers
    while h < n:
        pairs, out = y.view(-1, 2, h), into.view(-1, 2, h)
        torch.add(pairs[:, 0], pairs[:, 1], out=out[:, 0])
        torch.sub(pairs[:, 0], pairs[:, 1], out=out[:, 1])
        y, into, h = into, y, h * 2
    return y.div_(math.sqrt(n))


@dataclass
class RotatedSignMessage:
    """DRIVE/EDEN: the signs of the rotated, padded vector (one bit each) and one fp32 scale. The
    rotation's random diagonal is not sent: the server draws it from the same seed stream."""

    scale: torch.Tensor  # fp32, one value
    packed: torch.Tensor  # uint8, ⌈n_padded/8⌉ bytes
    diagonal: torch.Tensor  # ±1, n_padded entries (regenerated by the server; not on the wire)
    size: int

    @property
    def wire(self) -> tuple[torch.Tensor, ...]:
        return self.scale, self.packed

    def decode(self) -> torch.Tensor:
        signs = 1.0 - 2.0 * unpack_bits(self.packed, 1, self.diagonal.numel()).float()
        return (self.diagonal * hadamard(self.scale * signs))[: self.size]


def rotated_sign(x: torch.Tensor, generator: torch.Generator) -> RotatedSignMessage:
    """DRIVE (Vargaftik et al. 2021) with EDEN's scale (2022): rotate by R = H·D (D a random ±1
    diagonal), send sign(Rx) and S = ‖x‖²/‖Rx‖₁; decode R⁻¹(S·sign(Rx)) = D·H(S·sign(Rx)). S makes
    the decoded vector unbiased over the rotation."""
    n = x.numel()
    padded_size = 1 << max(0, (n - 1).bit_length())
    diagonal = 1.0 - 2.0 * (torch.rand(padded_size, generator=generator, device=generator.device) < 0.5).float()
    diagonal = diagonal.to(x.device)
    padded = torch.zeros(padded_size, dtype=torch.float32, device=x.device)
    padded[:n] = x
    rotated = hadamard(diagonal * padded)
    l1 = rotated.abs().sum()
    scale = (padded.square().sum() / l1.clamp_min(torch.finfo(torch.float32).tiny)).reshape(1)
    return RotatedSignMessage(scale, pack_bits((rotated < 0).to(torch.int16), 1), diagonal, n)


@CODECS.register()
class EFSign(Codec):
    """EF-signSGD (Karimireddy et al. 2019): the scaled sign ‖v‖₁/n · sign(v), one bit per entry
    plus an fp32 scale per bucket, with error feedback (the method's point; on by default).

    Args:
        bucket_size: entries per scale; None: one scale for the whole upload.
        error_feedback: add the client's last compression error to its next upload.
    """

    name = "sign"

    def __init__(self, bucket_size: Optional[int] = None, error_feedback: bool = True):
        if bucket_size is not None and bucket_size < 1:
            raise ConfigError("EFSign(bucket_size=...)", f"must be ≥ 1 or None, got {bucket_size}")
        self.bucket_size, self.error_feedback = bucket_size, error_feedback

    def encode(self, values, generator):
        return scaled_sign(values, self.bucket_size)


@CODECS.register()
class EDEN(Codec):
    """DRIVE / EDEN (Vargaftik et al. 2021, 2022): a seeded randomised Hadamard rotation, one bit per
    entry of the upload padded to a power of two, and one fp32 scale; decoded unbiased.

    Args:
        error_feedback: add the client's last compression error to its next upload (off: unbiased).
    """

    name = "eden"

    def __init__(self, error_feedback: bool = False):
        self.error_feedback = error_feedback

    def encode(self, values, generator):
        return rotated_sign(values, generator)
