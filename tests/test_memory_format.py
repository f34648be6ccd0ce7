"""Local training at this CPU's limit (fl_lightning.federation.memory_format): conv networks see their image
batches channels-last, bf16 autocast on the CPU keeps client updates and the server's state in fp32;
both give the same numbers run to run."""
import copy
import pickle
import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from fl_lightning import FederatedDataModule
from fl_lightning.errors import ConfigError
from fl_lightning.federation.memory_format import cpu_has_native_bf16, set_channels_last
from fl_lightning.models import MLP
from tests.conftest import fl_module, make_trainer


class SmallCNN(nn.Module):
    """A user's own small conv net for 3×8×8 images; records the layout of every batch it saw."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(4 * 3 * 3, 4)
        self.saw_channels_last: set[bool] = set()

    def forward(self, x):
        self.saw_channels_last.add(x.stride(1) == 1)  # the channel is the innermost dimension
        return self.fc(self.pool(torch.relu(self.conv(x))).flatten(1))


def images(n, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 4, (n,), generator=g)
    x = torch.randn(n, 3, 8, 8, generator=g) + y.view(-1, 1, 1, 1) * 0.5  # learnable
    return TensorDataset(x, y)


def fit(network, rounds=2, precision="32-true", **options):
    torch.manual_seed(0)
    module = fl_module(network, algorithm="fedavg", clients_per_round=4, batch_size=16, **options)
    if isinstance(network, SmallCNN):
        data = FederatedDataModule.from_datasets(train_dataset=images(160, 0), test_dataset=images(40, 1),
                                                 num_clients=8, val_fraction=0.0)
    else:
        data = FederatedDataModule("digits", num_clients=8, dirichlet_rho=0.5, val_fraction=0.0)
    make_trainer(rounds, precision=precision).fit(module, data)
    return module


@pytest.mark.parametrize("choice, expected", [(None, True), (False, False), (True, True)])
def test_conv_networks_see_channels_last_batches_on_the_cpu_unless_told_otherwise(choice, expected):
    net = SmallCNN()
    fit(net, channels_last=choice)
    assert net.saw_channels_last == {expected}  # training and evaluation alike


class ViewingCNN(SmallCNN):
    """Flattens with ``view``, as many tutorials do: that cannot take a channels-last activation."""

    def forward(self, x):
        return self.fc(self.pool(torch.relu(self.conv(x))).view(x.size(0), -1))


def test_a_network_whose_forward_cannot_take_channels_last_trains_contiguous_or_is_refused_in_one_line():
    with pytest.warns(UserWarning, match=r"model.channels_last: the network's forward fails on channels-last "
                                         r"batches \(view size is not compatible"):
        module = fit(ViewingCNN())
    assert torch.isfinite(module.flat.vector).all()
    with pytest.raises(ConfigError, match=r"^model.channels_last: the network's forward fails on channels-last batches .*; use "
                                          r"reshape instead of view after a convolution, or set it false$"):
        fit(ViewingCNN(), channels_last=True)


def test_the_layout_survives_copies_and_pickles_of_the_network():
    net = SmallCNN()
    set_channels_last(net, True)
    copied, restored = copy.deepcopy(net), pickle.loads(pickle.dumps(net))
    for other in (copied, restored):
        assert len(other._forward_pre_hooks) == 1
        set_channels_last(other, False)
        assert len(other._forward_pre_hooks) == 0
        set_channels_last(other, True)
        set_channels_last(other, True)  # on twice: still one hook
        assert len(other._forward_pre_hooks) == 1
    assert len(net._forward_pre_hooks) == 1


def test_channels_last_gives_the_same_numbers_run_to_run_and_the_vector_stays_the_source_of_truth():
    first, second = fit(SmallCNN(), rounds=3), fit(SmallCNN(), rounds=3)
    assert torch.equal(first.flat.vector, second.flat.vector)
    vector = first.flat.vector
    for p in first.net.parameters():  # still views of the flat vector
        assert vector.data_ptr() <= p.data_ptr() < vector.data_ptr() + vector.numel() * vector.element_size()
    plain = fit(SmallCNN(), rounds=3, channels_last=False)
    # the same model; bit-equal or not depends on the CPU's oneDNN kernels (AVX2: another summation order)
    assert torch.allclose(plain.flat.vector, vector, atol=1e-4)


def test_bf16_autocast_on_the_cpu_keeps_updates_and_server_state_in_fp32():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = fit(MLP(64, 10, hidden=[32]), precision="bf16-mixed")
    emulated = [w for w in caught if "no native bf16 instructions" in str(w.message)]
    assert len(emulated) == (0 if cpu_has_native_bf16() else 1)
    assert first.flat.vector.dtype == torch.float32 and first.global_vector.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in first.net.parameters())
    second = fit(MLP(64, 10, hidden=[32]), precision="bf16-mixed")
    assert torch.equal(first.flat.vector, second.flat.vector)
    fp32 = fit(MLP(64, 10, hidden=[32]))
    assert not torch.equal(fp32.flat.vector, first.flat.vector)  # autocast did run the matmuls in bf16
    assert torch.allclose(fp32.flat.vector, first.flat.vector, atol=0.05)
