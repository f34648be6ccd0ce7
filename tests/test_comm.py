"""Exact communication accounting from the tensors that are sent."""
import torch

from fl_lightning import FederatedDataModule
from fl_lightning.compression.accounting import CommMeter, Payload, ReceivedSums
from fl_lightning.data import DataSplit
from fl_lightning.models import LeNet5
from tests.conftest import fl_module, make_trainer

# LeNet-5 (paper): conv 3→64 k5, conv 64→64 k5, fc 1600→384→192→10, weights + biases.
LENET5_D = (3 * 64 * 25 + 64) + (64 * 64 * 25 + 64) + (1600 * 384 + 384) + (384 * 192 + 192) + (192 * 10 + 10)


def test_lenet5_size_matches_paper_table_7():
    assert LENET5_D == 797962
    model = LeNet5()
    assert sum(p.numel() for p in model.parameters()) == LENET5_D
    assert model.conv1.weight.numel() == 4800 and model.fc1.weight.numel() == 614400


def test_fedavg_lenet5_bytes_per_round():
    x = torch.randn(12, 3, 32, 32)
    y = torch.arange(12) % 10
    data = FederatedDataModule.from_tensors(DataSplit(x, y, x[:4], y[:4], 10),
                                            [torch.arange(0, 4), torch.arange(4, 8), torch.arange(8, 12)])
    module = fl_module(LeNet5(), algorithm="fedavg", clients_per_round=2, batch_size=4)
    make_trainer(2).fit(module, data)
    comm = module.loop.comm
    assert comm.num_params == LENET5_D
    per_round = 2 * LENET5_D * 4  # 2 clients × d float32 each way
    assert comm.upload_bytes == 2 * per_round
    assert comm.download_bytes == 2 * per_round
    assert comm.upload_d == 2.0


def test_partial_uploads_count_what_is_sent():
    """A client sending a slice is charged for the slice; the server averages per coordinate."""
    meter = CommMeter(num_params=10)
    a, b = Payload(), Payload()
    a.add("delta", 0, torch.ones(10))
    b.add("delta", 5, torch.full((5,), 3.0))
    meter.add_round([a.nbytes, b.nbytes], [40, 40])
    assert (a.nbytes, b.nbytes) == (40, 20)
    assert meter.upload_d == (10 + 5) / 2 / 10
    received = ReceivedSums({"delta": 10}, torch.device("cpu"))
    received.add(a)
    received.add(b)
    assert received.mean("delta").tolist() == [1.0] * 5 + [2.0] * 5
    assert received.weight("delta").tolist() == [1.0] * 5 + [2.0] * 5
    half = Payload()
    half.add("delta", 0, torch.ones(4, dtype=torch.float16))
    assert half.nbytes == 8  # compressed payloads are charged by their real size
