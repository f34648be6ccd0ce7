"""EF-signSGD and DRIVE/EDEN uploads against plain-tensor references: the exact message and bytes,
error feedback over three rounds, the rotation inverted exactly, the decoded mean unbiased."""
import math

import pytest
import torch
from torch import nn

from fl_lightning.algorithms import FedAvg, FedBCGD
from fl_lightning.compression import CODECS
from fl_lightning.compression.codecs import EDEN, EFSign, hadamard, rotated_sign, scaled_sign
from fl_lightning.assembly.toy import ToyFederation


def test_scaled_sign_message_and_bytes_by_hand():
    x = torch.tensor([0.5, -1.0, 0.0, 2.0, -0.25, 0.75, -3.0, 1.0, 4.0, -0.5])
    message = scaled_sign(x, bucket_size=None)
    assert message.scales.tolist() == [pytest.approx(13.0 / 10)]  # ‖x‖₁ / n
    # bits (1: negative), little-endian in each byte: 0 1 0 0 1 0 1 0 | 0 1
    assert message.packed.tolist() == [0b01010010, 0b10]
    assert sum(t.numel() * t.element_size() for t in message.wire) == 4 + 2
    signs = torch.tensor([1, -1, 1, 1, -1, 1, -1, 1, 1, -1], dtype=torch.float32)
    assert torch.equal(message.decode(), signs * torch.tensor(13.0 / 10))
    buckets = scaled_sign(x, bucket_size=4)  # scales per bucket: the last one over its 2 entries
    assert buckets.scales.tolist() == pytest.approx([3.5 / 4, 5.0 / 4, 4.5 / 2])
    assert sum(t.numel() * t.element_size() for t in buckets.wire) == 3 * 4 + 2


def test_error_feedback_residuals_over_three_rounds(tmp_path):
    """FedAvg + EFSign on two clients of a linear model: the uploads, the global model and each
    client's residual e_i equal a plain re-implementation, round after round."""
    torch.manual_seed(0)
    net = nn.Linear(3, 2)
    g = torch.Generator().manual_seed(4)
    clients = [(torch.randn(4, 3, generator=g), torch.randint(0, 2, (4,), generator=g)) for _ in range(2)]
    fed = ToyFederation(net, FedAvg(), clients, str(tmp_path), lr=0.1, batch_size=4, codec=EFSign())
    x = fed.global_vector.clone()
    residuals = [torch.zeros_like(x) for _ in clients]
    reference = nn.Linear(3, 2)
    for round_idx in range(3):
        uploads = []
        for i, (cx, cy) in enumerate(clients):
            torch.nn.utils.vector_to_parameters(x, reference.parameters())
            loss = nn.functional.cross_entropy(reference(cx), cy)  # one full-batch step: batch 4 = n
            grad = torch.cat([t.flatten() for t in torch.autograd.grad(loss, list(reference.parameters()))])
            corrected = -0.1 * grad + residuals[i]
            sent = corrected.abs().mean() * torch.where(corrected < 0, -1.0, 1.0)
            residuals[i] = corrected - sent
            uploads.append(sent)
        x = x + sum(uploads) / 2
        fed.run_round(round_idx)
        assert torch.allclose(fed.global_vector, x, atol=1e-6), round_idx
        for i in range(2):
            assert torch.allclose(fed.client_row("residual_delta", i), residuals[i], atol=1e-6), (round_idx, i)


def test_the_rotation_is_inverted_exactly():
    v = torch.randint(-50, 50, (256,)).float()  # n = 4^4: √n = 16 divides exactly, sums of integers are exact
    assert torch.equal(hadamard(hadamard(v)), v)
    h = hadamard(torch.eye(16)[2]) * 4  # a column of the ±1 Hadamard matrix (√16 = 4)
    assert set(h.tolist()) == {1.0, -1.0} and h.sum().item() == 0
    x = torch.randn(300)
    message = rotated_sign(x, torch.Generator().manual_seed(0))
    assert message.diagonal.numel() == 512 and message.packed.numel() == 64
    assert sum(t.numel() * t.element_size() for t in message.wire) == 4 + 64  # the diagonal is not sent
    rotated = hadamard(message.diagonal * torch.cat([x, torch.zeros(212)]))
    assert message.scale.item() == pytest.approx((x.square().sum() / rotated.abs().sum()).item(), rel=1e-6)


def mean_decoded(x: torch.Tensor, draws: int, signsgd_scale: bool = False) -> torch.Tensor:
    total = torch.zeros_like(x)
    for seed in range(draws):
        message = rotated_sign(x, torch.Generator().manual_seed(seed))
        if signsgd_scale:  # the scaled sign's ‖Rx‖₁/n instead of ‖x‖²/‖Rx‖₁: biased (≈ 2/π of x)
            padded = torch.cat([x, torch.zeros(message.diagonal.numel() - x.numel())])
            message.scale = hadamard(message.diagonal * padded).abs().mean().reshape(1)
        total += message.decode()
    return total / draws


def test_the_decoded_mean_is_unbiased_and_a_wrong_scale_is_caught():
    """Over 1,500 rotations the mean decode is within 4 standard errors of x; with the scale of a
    plain scaled sign it is far outside."""
    x = torch.linspace(-1.0, 2.0, 100) ** 3
    draws = 1500
    error = (mean_decoded(x, draws) - x).norm() / x.norm()
    single = (mean_decoded(x, 1) - x).norm() / x.norm()  # one decode's relative error
    bound = 4 * single / math.sqrt(draws)
    assert error < bound
    assert (mean_decoded(x, draws, signsgd_scale=True) - x).norm() / x.norm() > 2 * bound


def test_names_and_presets():
    assert CODECS["sign"] is EFSign and CODECS["eden"] is EDEN
    assert EFSign().error_feedback and not EDEN().error_feedback
    from fl_lightning.algorithms import get
    assert [get(name).codec for name in ("signsgd", "eden", "fedbcgd_sign", "fedbcgd_eden")] == ["sign", "eden"] * 2
    assert get("fedbcgd_eden").algorithm is FedBCGD
