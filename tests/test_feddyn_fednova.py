"""FedDyn and FedNova — written through the public algorithm API only — against plain-tensor
re-implementations of their papers' rules: two rounds, run on a ToyFederation (no Trainer),
every state vector compared (x^r, FedDyn's h and every g_i; FedNova's normalised update)."""
import torch
import torch.nn.functional as F
from torch import nn

from fl_lightning.algorithms import FedAvg, FedDyn, FedNova
from fl_lightning.algorithms.feddyn import DynamicRegularizer
from fl_lightning.algorithms.fednova import effective_steps
from fl_lightning.callbacks import FLCallback
from fl_lightning.assembly.toy import ToyFederation

LR = 0.1


class Batches(FLCallback):
    """Records each client's minibatches, so that the reference replays the same ones."""

    def __init__(self):
        self.rounds = []

    def configure_round(self, round):
        self.rounds.append({})

    def on_local_gradient(self, client):
        self.rounds[-1].setdefault(client.client_id, []).append(tuple(t.clone() for t in client.batch))


def clients(sizes=(4, 6, 2)):
    g = torch.Generator().manual_seed(5)
    return [(torch.randn(n, 3, generator=g), torch.randint(0, 2, (n,), generator=g)) for n in sizes]


def toy(algorithm, tmp_path, **kwargs):
    torch.manual_seed(0)
    net = nn.Linear(3, 2)
    initial = {k: v.detach().clone() for k, v in net.named_parameters()}
    recorder = Batches()
    fed = ToyFederation(net, algorithm, clients(), str(tmp_path), lr=LR, batch_size=2, extra_callbacks=[recorder],
                        **kwargs)
    for r in range(2):
        fed.run_round(r)
    return fed, initial, recorder


def flat(p):
    return torch.cat([p["weight"].reshape(-1), p["bias"]])


def grad(p, x, y):
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in p.items()}
    loss = F.cross_entropy(x @ leaves["weight"].T + leaves["bias"], y)
    return dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values()))))


def test_feddyn_two_rounds_match_the_paper(tmp_path):
    alpha, m = 0.1, 3
    fed, x, recorder = toy(FedDyn(alpha=alpha), tmp_path)
    h = {k: torch.zeros_like(v) for k, v in x.items()}
    g_client = {i: {k: torch.zeros_like(v) for k, v in x.items()} for i in range(m)}
    for batches in recorder.rounds:
        deltas = []
        for i, client_batches in sorted(batches.items()):
            y = {k: v.clone() for k, v in x.items()}
            for xb, yb in client_batches:  # ∇f_i(y) − g_i + α (y − x^r), then SGD
                g = grad(y, xb, yb)
                y = {k: y[k] - LR * (g[k] - g_client[i][k] + alpha * (y[k] - x[k])) for k in y}
            delta = {k: y[k] - x[k] for k in x}
            g_client[i] = {k: g_client[i][k] - alpha * delta[k] for k in x}
            deltas.append(delta)
        h = {k: h[k] - alpha / m * sum(d[k] for d in deltas) for k in x}
        x = {k: x[k] + sum(d[k] for d in deltas) / len(deltas) - h[k] / alpha for k in x}
    (regularizer,) = [cb for cb in fed.callbacks if isinstance(cb, DynamicRegularizer)]
    torch.testing.assert_close(fed.global_params, flat(x), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(regularizer.h, flat(h), atol=1e-6, rtol=1e-5)
    for i in range(m):
        torch.testing.assert_close(fed.client_row("feddyn_gradient", i), flat(g_client[i]), atol=1e-6, rtol=1e-5)
    assert fed.loop.comm.upload_bytes == 2 * m * 4 * 8  # d = 8 floats per client and round, nothing else


def fednova_reference(x, recorder, sizes, weighted, momentum=0.0):
    for batches in recorder.rounds:
        normalised, steps, weights = [], [], []
        for i, client_batches in sorted(batches.items()):
            y = {k: v.clone() for k, v in x.items()}
            buf = None
            for xb, yb in client_batches:
                g = grad(y, xb, yb)
                buf = g if buf is None else {k: momentum * buf[k] + g[k] for k in g}
                y = {k: y[k] - LR * buf[k] for k in y}
            a = effective_steps(len(client_batches), momentum)
            normalised.append({k: (y[k] - x[k]) / a for k in x})
            steps.append(a)
            weights.append(sizes[i] if weighted else 1.0)
        p = [w / sum(weights) for w in weights]
        tau_eff = sum(pi * a for pi, a in zip(p, steps))
        x = {k: x[k] + tau_eff * sum(pi * d[k] for pi, d in zip(p, normalised)) for k in x}
    return x


def test_fednova_two_rounds_match_the_paper_with_unequal_steps(tmp_path):
    for weighted in (False, True):
        fed, x, recorder = toy(FedNova(), tmp_path / str(weighted), weighted_aggregation=weighted)
        assert {i: len(b) for i, b in recorder.rounds[0].items()} == {0: 2, 1: 3, 2: 1}  # τ_i differ
        expected = fednova_reference(x, recorder, sizes=(4, 6, 2), weighted=weighted)
        torch.testing.assert_close(fed.global_params, flat(expected), atol=1e-6, rtol=1e-5)
    assert fed.loop.comm.upload_bytes == 2 * 3 * 4 * (8 + 1)  # d floats + τ_i per client and round


def test_fednova_with_local_momentum_normalises_by_the_effective_steps(tmp_path):
    fed, x, recorder = toy(FedNova(), tmp_path, momentum=0.5)
    expected = fednova_reference(x, recorder, sizes=(4, 6, 2), weighted=False, momentum=0.5)
    torch.testing.assert_close(fed.global_params, flat(expected), atol=1e-6, rtol=1e-5)
    assert effective_steps(3, 0.5) == 1 + 1.5 + 1.75


def test_fednova_differs_from_fedavg_only_when_steps_differ(tmp_path):
    nova, _, _ = toy(FedNova(), tmp_path / "nova")
    avg, _, _ = toy(FedAvg(), tmp_path / "avg")
    assert not torch.allclose(nova.global_params, avg.global_params, atol=1e-4)
    torch.manual_seed(0)
    equal = clients((4, 4, 4))
    results = []
    for algorithm in (FedNova(), FedAvg()):
        torch.manual_seed(0)
        fed = ToyFederation(nn.Linear(3, 2), algorithm, equal, str(tmp_path / type(algorithm).__name__), lr=LR)
        fed.run_round(0)
        results.append(fed.global_params.clone())
    torch.testing.assert_close(results[0], results[1], atol=1e-7, rtol=1e-6)
