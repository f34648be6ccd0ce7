"""PowerSGD uploads against hand computations: one power-iteration step, the message's tensors and
bytes, and two rounds of FedAvg + PowerSGD (warm-started Q, error feedback) against a plain
re-implementation."""
import pytest
import torch
from torch import nn

from fl_lightning.algorithms import FedAvg, get
from fl_lightning.federation.flat import FlatModel
from fl_lightning.compression.powersgd import PowerSGD, power_step
from fl_lightning.federation.seeding import Stream, derive_seed, generator, stream_seed
from fl_lightning.assembly.toy import ToyFederation


def test_one_power_step_by_hand():
    m = torch.tensor([[1.0, 2.0, 0.0], [0.0, 1.0, 1.0], [2.0, 0.0, 1.0], [1.0, 1.0, 1.0]])
    q0 = torch.tensor([[1.0], [0.0], [1.0]])
    p, q = power_step(m, q0)
    v = m @ q0  # [1, 1, 3, 2]: P is v/‖v‖ (up to its sign), Q = Mᵀ P
    assert torch.allclose(p.abs().flatten(), (v / v.norm()).flatten(), atol=1e-6)
    assert torch.allclose(p @ q.T, v @ (v.T @ m) / v.norm() ** 2, atol=1e-6)
    q0 = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # rank 2: P spans M Q₀, orthonormal
    p, q = power_step(m, q0)
    assert torch.allclose(p.T @ p, torch.eye(2), atol=1e-6)
    basis = m @ q0
    projection = basis @ torch.linalg.inv(basis.T @ basis) @ basis.T
    assert torch.allclose(p @ q.T, projection @ m, atol=1e-5)


def test_pieces_and_bytes():
    """Linear(6, 4): the 4×6 weight as rank-1 factors (4 + 6 floats), the bias raw (4)."""
    flat = FlatModel(nn.Linear(6, 4))
    codec = PowerSGD(rank=1)
    pieces = codec.pieces([(0, 28)], flat.segments, 28)
    assert [(p.offset, p.length, p.rows, p.cols) for p in pieces] == [(0, 24, 4, 6), (24, 4, 0, 0)]
    values = torch.randn(28)
    message, q = codec.encode_pieces(values, pieces, torch.zeros(6), torch.Generator().manual_seed(0))
    assert [tuple(t.shape) for t in message.wire] == [(4, 1), (6, 1), (4,)]
    assert sum(t.numel() * t.element_size() for t in message.wire) == (4 + 6 + 4) * 4
    p, q_sent = message.tensors[0]
    assert torch.equal(q, q_sent.flatten())  # the Q kept is the Q sent
    assert torch.equal(message.decode()[24:], values[24:])
    assert codec.pieces([(0, 12), (24, 28)], flat.segments, 28)[0].rows == 2  # two whole rows of the weight
    assert PowerSGD(rank=3).q_layout(flat.segments, 28) == ({}, 0)  # (4 + 6)·3 ≥ 24: sent raw
    with pytest.raises(Exception, match=r"PowerSGD\(rank=...\): must be ≥ 1"):
        PowerSGD(rank=0)


def test_two_rounds_against_a_plain_reimplementation(tmp_path):
    torch.manual_seed(0)
    net = nn.Linear(3, 2)
    g = torch.Generator().manual_seed(2)
    clients = [(torch.randn(4, 3, generator=g), torch.randint(0, 2, (4,), generator=g)) for _ in range(2)]
    fed = ToyFederation(net, FedAvg(), clients, str(tmp_path), lr=0.1, batch_size=4, codec=PowerSGD(rank=1))
    x = fed.global_vector.clone()
    residuals, qs = [torch.zeros(8) for _ in clients], [None, None]
    reference = nn.Linear(3, 2)
    for round_idx in range(2):
        uploads = []
        for i, (cx, cy) in enumerate(clients):
            torch.nn.utils.vector_to_parameters(x, reference.parameters())
            loss = nn.functional.cross_entropy(reference(cx), cy)
            grad = torch.cat([t.flatten() for t in torch.autograd.grad(loss, list(reference.parameters()))])
            corrected = -0.1 * grad + residuals[i]
            if qs[i] is None:  # Q₀ from the client's compression stream in its first round
                seed = stream_seed(derive_seed(round_idx, i), Stream.COMPRESSION)
                qs[i] = torch.randn(3, 1, generator=generator(seed))
            p, qs[i] = power_step(corrected[:6].view(2, 3), qs[i])
            sent = torch.cat([(p @ qs[i].T).flatten(), corrected[6:]])
            residuals[i] = corrected - sent
            uploads.append(sent)
        x = x + sum(uploads) / 2
        fed.run_round(round_idx)
        assert torch.allclose(fed.global_vector, x, atol=1e-6), round_idx
        for i in range(2):
            assert torch.allclose(fed.client_row("powersgd_q_delta", i), qs[i].flatten(), atol=1e-6)
            assert torch.allclose(fed.client_row("residual_delta", i), residuals[i], atol=1e-6)


def test_presets():
    assert get("powersgd").codec == get("fedbcgd_powersgd").codec == "powersgd"
