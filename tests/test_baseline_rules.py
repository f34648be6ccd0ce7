"""FedProx, FedDC, FedAdam/FedYogi and centralised SGD against plain-tensor references
(tests/reference.py for the two-round client/server replays; hand-written formulas otherwise)."""
import torch

from fl_lightning.callbacks import DriftCorrection
from fl_lightning.federation.server_optimizers import FedAdam, FedYogi
from tests.reference import (M, Rule, assert_params, check_assignment, check_local_models, data, flat_state,
                             run_library, run_reference)


def replay(algorithm, rule, **hp):
    """Two library rounds, replayed by the reference: the global model and every local model agree."""
    module, initial, recorder = run_library(algorithm, **hp)
    check_assignment(recorder, blocks=False)
    expected = run_reference(initial, recorder, rule)
    assert_params(dict(module.net.named_parameters()), expected["x"])
    check_local_models(module, recorder)
    return module, recorder, expected


def test_fedprox_two_rounds_match_reference():
    replay("fedprox", Rule(blocks=False, prox_mu=0.3), mu=0.3)


def test_feddc_two_rounds_match_reference():
    module, recorder, expected = replay("feddc", Rule(blocks=False, feddc_alpha=0.5), alpha=0.5)
    (feddc,) = [cb for cb in module.loop.callbacks if isinstance(cb, DriftCorrection)]
    assert_params(flat_state(module, feddc.server_control), expected["c"])
    sampled = {rec["client"] for rnd in recorder.rounds for rec in rnd}
    assert set(feddc.client_drifts.clients()) == set(feddc.client_controls.clients()) == sampled
    for i in range(M):  # a client never sampled reads zeros
        assert_params(flat_state(module, feddc.client_drifts.read(i)), expected["drift"][i])
        assert_params(flat_state(module, feddc.client_controls.read(i)), expected["c_client"][i])
    assert_params(flat_state(module, feddc.drift_sum), {k: sum(expected["drift"][i][k] for i in range(M))
                                                        for k in expected["x"]})


def test_feddc_uploads_d_and_downloads_2d():
    module, _, _ = run_library("feddc", rounds=1)
    d = module.flat.num_params
    assert module.loop.comm.upload_bytes == 4 * 3 * d and module.loop.comm.download_bytes == 4 * 3 * 2 * d


def test_fedadam_two_steps_by_hand():
    x = torch.tensor([1.0, -2.0])
    opt = FedAdam([x], lr=0.1, betas=(0.9, 0.99), tau=0.01)
    m, v = torch.zeros(2), torch.full((2,), 1e-4)
    expected = x.clone()
    for g in (torch.tensor([0.5, -1.0]), torch.tensor([-0.25, 2.0])):
        x.grad = g.clone()
        opt.step()
        m = 0.9 * m + 0.1 * g
        v = 0.99 * v + 0.01 * g * g
        expected = expected - 0.1 * m / (v.sqrt() + 0.01)
    torch.testing.assert_close(x, expected, rtol=0, atol=1e-7)


def test_fedyogi_second_moment_by_hand():
    x = torch.tensor([0.0, 0.0])
    opt = FedYogi([x], lr=0.1, betas=(0.9, 0.99), tau=0.5)  # v0 = τ² = 0.25
    x.grad = torch.tensor([0.1, 1.0])  # g² = 0.01 < v0 (v shrinks), 1.0 > v0 (v grows)
    opt.step()
    v = opt.state[x]["exp_avg_sq"]
    torch.testing.assert_close(v, torch.tensor([0.25 - 0.01 * 0.01, 0.25 + 0.01 * 1.0]), rtol=0, atol=1e-8)


def test_fedadam_preset_steps_the_global_model():
    """The first FedAdam round from m = 0, v = τ²: x¹ = x⁰ − η_g · 0.1 g / (√(0.99 τ² + 0.01 g²) + τ), g = −Δ̄."""
    module, initial, recorder = run_library("fedadam", rounds=1, server_lr=0.05)
    expected = run_reference(initial, recorder, Rule(blocks=False))["x"]  # FedAvg: x⁰ + Δ̄
    tau = 1e-3
    for name, value in module.net.named_parameters():
        g = initial[name] - expected[name]
        step = 0.05 * 0.1 * g / ((0.99 * tau ** 2 + 0.01 * g * g).sqrt() + tau)
        torch.testing.assert_close(value.detach(), initial[name] - step, rtol=1e-5, atol=1e-7, msg=name)


def test_centralized_is_one_pass_of_sgd_over_pooled_data():
    module, initial, recorder = run_library("centralized", rounds=2, batch_size=5)
    split, _ = data()
    assert [len(rnd) for rnd in recorder.rounds] == [1, 1]  # one pooled "client" per round
    for r, (rec,) in enumerate(recorder.rounds):
        assert rec["client"] == -1
        xs = torch.cat([b[0] for b in rec["batches"]])
        assert [len(b[0]) for b in rec["batches"]] == [5, 5, 5, 1]  # all 16 samples once, batch 5
        assert sorted(xs[:, 0].tolist()) == sorted(split.train_x[:, 0].tolist())
    expected = run_reference(initial, recorder, Rule(blocks=False))["x"]
    assert_params(dict(module.net.named_parameters()), expected)
    assert module.loop.comm.upload_bytes == 0 and module.loop.comm.download_bytes == 0
    assert module.loop.comm.upload_d == 0.0
