"""Compressed uploads: exact bytes on LeNet-5, unbiasedness, Top-k, error feedback,
decoding before aggregation."""
import math

import pytest
import torch

from fl_lightning import FederatedDataModule, FederatedModule
from fl_lightning.callbacks import BlockUploadMask, CompressedUpload, FLCallback
from fl_lightning.compression.codecs import QSGD, TopK, pack_bits, qsgd, randk, topk, unpack_bits
from fl_lightning.data import DataSplit
from fl_lightning.errors import ConfigError
from fl_lightning.models import LeNet5
from tests.conftest import fl_module, make_trainer
from tests.reference import Tiny, data
from tests.test_comm import LENET5_D

# LeNet-5's paper division (Table 7): four blocks, shared fc3
LENET5_BLOCKS = {0: 3 * 64 * 25 + 64, 1: 64 * 64 * 25 + 64, 2: 1600 * 384 + 384, 3: 384 * 192 + 192}
LENET5_SHARED = 192 * 10 + 10


class Uploads(FLCallback):
    """Per round and client: the upload before compression, and what arrived (decoded)."""

    def __init__(self):
        self.raw, self.arrived = [], []

    def configure_round(self, round):
        for per_round in (self.raw, self.arrived):
            per_round.append({})

    def on_client_end(self, client):  # every on_client_end runs before compression (on_upload)
        self.raw[-1][client.client_id] = [(p.ranges, p.values().clone()) for p in client.upload.parts]

    def on_client_reported(self, client):
        self.arrived[-1][client.client_id] = [(p.channel, p.ranges, p.values().clone(), p.nbytes)
                                              for p in client.upload.parts]


def lenet_round(algorithm, clients=2, **hp):
    x = torch.randn(6 * clients, 3, 32, 32)
    y = torch.arange(6 * clients) % 10
    parts = [torch.arange(6 * i, 6 * i + 6) for i in range(clients)]
    datamodule = FederatedDataModule.from_tensors(DataSplit(x, y, x[:4], y[:4], 10), parts)
    module = fl_module(LeNet5(), algorithm=algorithm, clients_per_round=clients, batch_size=6, **hp)
    uploads = Uploads()
    make_trainer(1, callbacks=[uploads]).fit(module, datamodule)
    return module, uploads


def qsgd_bytes(n, levels, bucket):
    """The spec's count: 32 bits per norm, 1 + log₂(s+1) bits per entry (rounded up to whole bytes)."""
    width = 1 + math.ceil(math.log2(levels + 1))
    return 4 * math.ceil(n / (bucket or n)) + math.ceil(n * width / 8)


def test_hand_counts_are_the_spec_formula():
    assert qsgd_bytes(LENET5_D, 255, 512) == 1559 * 4 + 897708 and qsgd_bytes(LENET5_D, 1, None) == 4 + 199491


@pytest.mark.parametrize("algorithm, hp, per_client", [
    ("topk", dict(compression_k=0.01), 7979 * (4 + 4)),                      # ⌊0.01·797962⌋ int32 + fp32
    ("fedavg", dict(compression="randk", compression_k=1000), 1000 * (4 + 4)),
    ("fedpaq", dict(), 1559 * 4 + 897708),                                   # 9 bits/entry, norm per 512
    ("fedpaq", dict(qsgd_levels=1, qsgd_bucket_size=None), 4 + 199491),      # spec: 32 + d(1 + log₂ 2) bits
])
def test_exact_upload_bytes_on_lenet5(algorithm, hp, per_client):
    module, uploads = lenet_round(algorithm, **hp)
    comm = module.loop.comm
    assert comm.upload_bytes == 2 * per_client
    assert comm.download_bytes == 2 * 4 * LENET5_D  # downloads are not compressed
    assert comm.upload_d == per_client / 4 / LENET5_D  # float-equivalents: bits / 32 / d


def test_qsgd_on_fedbcgd_blocks_counts_each_clients_block():
    module, uploads = lenet_round("fedbcgd_qsgd", clients=5)
    (mask,) = [cb for cb in module.loop.callbacks if isinstance(cb, BlockUploadMask)]
    expected = 0
    for client, block in mask.block_of.items():
        n = LENET5_BLOCKS[block] + LENET5_SHARED  # block j and the shared block, quantised as one vector
        (arrived,) = uploads.arrived[0][client]
        assert arrived[3] == qsgd_bytes(n, 255, 512)
        expected += qsgd_bytes(n, 255, 512)
    assert module.loop.comm.upload_bytes == expected
    assert set(mask.block_of.values()) == {0, 1, 2, 3}  # S = 5 ≥ N = 4: every block sent


@pytest.mark.parametrize("encode", [lambda x, g: qsgd(x, 3, 16, g), lambda x, g: qsgd(x, 255, None, g),
                                    lambda x, g: randk(x, 0.1, g)], ids=["qsgd_s3_bucket16", "qsgd_s255", "randk"])
def test_unbiased_compressors_average_to_the_input(encode):
    x = torch.randn(200, generator=torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(2)
    draws = torch.stack([encode(x, g).decode() for _ in range(4000)])
    assert not torch.equal(draws[0], x)  # one draw is lossy ...
    error = (draws.mean(0) - x).abs().max()
    spread = draws.std(0).max() / math.sqrt(len(draws))
    assert error < 5 * spread  # ... their mean converges to x (within 5 standard errors)


def test_topk_keeps_exactly_the_k_largest():
    x = torch.tensor([0.5, -3.0, 0.1, 2.0, -0.2, 1.0, -1.5, 0.0])
    message = topk(x, 3)
    assert sorted(message.indices.tolist()) == [1, 3, 6]
    assert message.decode().tolist() == [0.0, -3.0, 0.0, 2.0, 0.0, 0.0, -1.5, 0.0]
    assert message.indices.dtype == torch.int32 and message.values.dtype == torch.float32
    assert topk(x, 0.25).indices.numel() == 2  # a fraction of the 8 entries


@pytest.mark.parametrize("width", [2, 3, 5, 8, 9, 12])
def test_bit_packing_round_trips(width):
    codes = torch.randint(0, 2 ** width, (1001,), generator=torch.Generator().manual_seed(width))
    packed = pack_bits(codes, width)
    assert packed.dtype == torch.uint8 and packed.numel() == math.ceil(1001 * width / 8)
    assert torch.equal(unpack_bits(packed, width, 1001), codes)


def test_error_feedback_carries_the_residual_into_the_next_round():
    torch.manual_seed(0)
    split, parts = data()
    k = 5
    module = fl_module(Tiny(), algorithm="topk", clients_per_round=4, batch_size=2, compression_k=k)
    uploads = Uploads()
    make_trainer(2, callbacks=[uploads]).fit(module, FederatedDataModule.from_tensors(split, parts))
    (compression,) = [cb for cb in module.loop.callbacks if isinstance(cb, CompressedUpload)]
    assert compression.codec.error_feedback
    for client in range(4):
        (ranges, first), = uploads.raw[0][client]
        kept = first.abs().topk(k).indices
        sent_first = torch.zeros_like(first).index_copy_(0, kept, first[kept])
        residual = first - sent_first  # e_i after round 1: everything Top-k left out
        (_, second), = uploads.raw[1][client]
        corrected = second + residual  # round 2 compresses Δ + e_i
        kept = corrected.abs().topk(k).indices
        expected = torch.zeros_like(corrected).index_copy_(0, kept, corrected[kept])
        (channel, _, arrived, nbytes), = uploads.arrived[1][client]
        assert channel == "delta" and nbytes == k * 8
        assert torch.equal(arrived, expected)
        assert torch.equal(compression.residuals["delta"].read(client), corrected - expected)


def test_server_aggregates_the_decoded_messages():
    torch.manual_seed(0)
    split, parts = data()
    module = fl_module(Tiny(), algorithm="fedpaq", clients_per_round=4, batch_size=2, qsgd_levels=3,
                             qsgd_bucket_size=8)
    before = module.flat.vector.detach().clone()
    uploads = Uploads()
    make_trainer(1, callbacks=[uploads]).fit(module, FederatedDataModule.from_tensors(split, parts))
    decoded = torch.stack([arrived[0][2] for arrived in uploads.arrived[0].values()])
    raw = torch.stack([raw[0][1] for raw in uploads.raw[0].values()])
    assert not torch.allclose(decoded, raw)  # quantisation changed the updates ...
    torch.testing.assert_close(module.flat.vector - before, decoded.mean(0), rtol=0, atol=1e-7)  # ... x += mean


def test_bad_compression_options_are_one_line():
    with pytest.raises(ConfigError, match=r"^model.compression: unknown codec 'top-k'; choose one of topk, randk, qsgd, "
                       "sign, eden, powersgd, none"):
        FederatedModule(Tiny(), compression="top-k")
    with pytest.raises(ConfigError, match=r"^TopK\(k=...\): must be > 0 \(a count, or a fraction below 1\), got 0"):
        TopK(k=0)
    with pytest.raises(ConfigError, match=r"^QSGD\(levels=...\): must be in \[1, 16383\]"):
        QSGD(levels=16384)
    assert FederatedModule(Tiny(), algorithm="fedpaq", compression="none").codec is None
    assert isinstance(FederatedModule(Tiny(), algorithm="fedpaq").codec, QSGD)
