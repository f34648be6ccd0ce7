"""The personalised algorithms — written through the public algorithm API — against plain-tensor
re-implementations of their rules, two rounds on a ToyFederation (no Trainer): every global vector, every
client's personal vector, the personalised evaluation and the bytes uploaded are compared."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fl_lightning.algorithms import APFL, Ditto, FedAvgFT, FedBCGDPersonal, FedBN, FedPer, FedRep, Local
from fl_lightning.callbacks import FLCallback
from fl_lightning.data.datamodule import ClientData
from fl_lightning.errors import ConfigError
from fl_lightning.federation.seeding import derive_seed
from fl_lightning.assembly.toy import ToyFederation
from fl_lightning.personalization.evaluation import FINE_TUNE_KEY, PersonalEvaluation

LR, SIZES, M = 0.1, (4, 6, 2), 3


class Recorder(FLCallback):
    """Each client's minibatches and upload ranges, per round (runs after the algorithm's hooks)."""

    def __init__(self):
        self.rounds = []

    def configure_round(self, round):
        self.rounds.append({"batches": {}, "ranges": {c.client_id: list(c.upload_ranges) for c in round.clients}})

    def on_local_gradient(self, client):
        self.rounds[-1]["batches"].setdefault(client.client_id, []).append(tuple(t.clone() for t in client.batch))


def data(sizes=SIZES, seed=5):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(n, 3, generator=g), torch.randint(0, 2, (n,), generator=g)) for n in sizes]


def mlp(norm=False):
    torch.manual_seed(0)
    layers = [nn.Linear(3, 4)] + ([nn.BatchNorm1d(4)] if norm else []) + [nn.ReLU(), nn.Linear(4, 2)]
    return nn.Sequential(*layers)


def run(algorithm, tmp_path, net, rounds=2):
    recorder = Recorder()
    fed = ToyFederation(net, algorithm, data(), str(tmp_path), lr=LR, batch_size=2, extra_callbacks=[recorder])
    initial = as_dict(fed, fed.global_vector.clone())
    for r in range(rounds):
        fed.run_round(r)
    return fed, initial, recorder


def as_dict(fed, vector):
    return {s.name: vector[s.start:s.stop].view(s.shape).clone() for s in fed.flat.segments}


def as_vector(fed, tensors):
    return torch.cat([tensors[s.name].reshape(-1) for s in fed.flat.segments])


def forward(p, x, train=True):
    """The toy MLP as plain tensor algebra (with BatchNorm when p has its weights)."""
    h = x @ p["0.weight"].T + p["0.bias"]
    if "1.weight" in p:
        if train:
            mean, var = h.mean(0), h.var(0, unbiased=False)
            n = len(h)
            p["1.running_mean"] = 0.9 * p["1.running_mean"] + 0.1 * mean.detach()
            p["1.running_var"] = 0.9 * p["1.running_var"] + 0.1 * h.detach().var(0, unbiased=True) * (n > 1)
        else:
            mean, var = p["1.running_mean"], p["1.running_var"]
        h = (h - mean) / torch.sqrt(var + 1e-5) * p["1.weight"] + p["1.bias"]
        last = "3"
    else:
        last = "2"
    return torch.relu(h) @ p[f"{last}.weight"].T + p[f"{last}.bias"]


def sgd_step(p, xb, yb, trainable, extra=None):
    """One SGD step on the names in ``trainable``; ``extra(name, value)``: a term added to the gradient."""
    leaves = {k: v.detach().clone().requires_grad_(k in trainable and not k.endswith(("running_mean", "running_var")))
              for k, v in p.items()}
    loss = F.cross_entropy(forward(leaves, xb), yb)
    names = [k for k in trainable if leaves[k].requires_grad]
    grads = dict(zip(names, torch.autograd.grad(loss, [leaves[k] for k in names])))
    out = {k: (v.detach() if torch.is_tensor(v) else v) for k, v in leaves.items()}
    for k in names:
        out[k] = p[k] - LR * (grads[k] + (extra(k, p[k]) if extra else 0))
    return out


def close(a, b):
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def floats(ranges):
    return sum(b - a for a, b in ranges)


HEAD = ("2.weight", "2.bias")


def test_fedper_two_rounds_every_global_and_personal_vector(tmp_path):
    fed, x, rec = run(FedPer(), tmp_path, mlp())
    heads = {i: {k: x[k].clone() for k in HEAD} for i in range(M)}
    for r in rec.rounds:
        deltas = []
        for i, batches in sorted(r["batches"].items()):
            y = {**x, **heads[i]}
            for xb, yb in batches:
                y = sgd_step(y, xb, yb, list(y))
            heads[i] = {k: y[k] for k in HEAD}
            deltas.append({k: y[k] - x[k] for k in x if k not in HEAD})
        x = {**x, **{k: x[k] + sum(d[k] for d in deltas) / len(deltas) for k in deltas[0]}}
    close(fed.global_vector, as_vector(fed, x))  # the head of x^r stays x^0's: never averaged
    for i in range(M):
        close(fed.client_row("personal_part", i), torch.cat([heads[i][k].reshape(-1) for k in HEAD]))
    body = 3 * 4 + 4
    assert all(floats(ranges) == body for r in rec.rounds for ranges in r["ranges"].values())
    assert fed.loop.comm.upload_bytes == 2 * M * 4 * body  # the head (10 floats) never sent
    evaluation = PersonalEvaluation(fed.flat, lambda n, a, b: F.cross_entropy(n(a), b), held_out(),
                                    fed.loop.clients, fed.client_state, fed.callbacks, lambda v: v, 2, LR)
    accs = [accuracy({**x, **heads[i]}, *held_out().of(i)) for i in range(M)]
    metrics = evaluation.run(fed.global_vector, 1)
    assert metrics["pval/acc_mean"] == pytest.approx(sum(accs) / M)
    assert metrics["pval/acc_p10"] == pytest.approx(sorted(accs)[0] + 0.2 * (sorted(accs)[1] - sorted(accs)[0]))
    close(fed.flat.vector, fed.global_vector)  # the evaluation leaves the working model at x^r


def held_out():
    parts = data(sizes=(5, 5, 5), seed=9)
    return ClientData(torch.cat([a for a, _ in parts]), torch.cat([b for _, b in parts]), [0, 5, 10, 15])


def accuracy(p, xs, ys):
    with torch.no_grad():
        return float((forward(dict(p), xs, train=False).argmax(-1) == ys).float().mean())


def test_fedrep_trains_the_head_first_then_the_body(tmp_path):
    fed, x, rec = run(FedRep(head_epochs=1), tmp_path, mlp())
    heads = {i: {k: x[k].clone() for k in HEAD} for i in range(M)}
    for r in rec.rounds:
        deltas = []
        for i, batches in sorted(r["batches"].items()):
            head_steps = math.ceil(SIZES[i] / 2)  # one epoch of batches of 2
            assert len(batches) == 2 * head_steps
            y = {**x, **heads[i]}
            for step, (xb, yb) in enumerate(batches):
                y = sgd_step(y, xb, yb, list(HEAD) if step < head_steps else [k for k in y if k not in HEAD])
            heads[i] = {k: y[k] for k in HEAD}
            deltas.append({k: y[k] - x[k] for k in x if k not in HEAD})
        x = {**x, **{k: x[k] + sum(d[k] for d in deltas) / len(deltas) for k in deltas[0]}}
    close(fed.global_vector, as_vector(fed, x))
    for i in range(M):
        close(fed.client_row("personal_part", i), torch.cat([heads[i][k].reshape(-1) for k in HEAD]))
    assert fed.loop.comm.upload_bytes == 2 * M * 4 * 16


def test_ditto_personal_models_and_global_model(tmp_path):
    lam = 0.5
    fed, x, rec = run(Ditto(lam=lam, personal_epochs=1), tmp_path, mlp())
    v = {i: dict(x) for i in range(M)}
    for r in rec.rounds:
        deltas = []
        for i, batches in sorted(r["batches"].items()):
            personal_steps = math.ceil(SIZES[i] / 2)
            for xb, yb in batches[:personal_steps]:  # ∇f_i(v) + λ (v − x^r)
                v[i] = sgd_step(v[i], xb, yb, list(x), extra=lambda k, value: lam * (value - x[k]))
            y = dict(x)
            for xb, yb in batches[personal_steps:]:
                y = sgd_step(y, xb, yb, list(x))
            deltas.append({k: y[k] - x[k] for k in x})
        x = {k: x[k] + sum(d[k] for d in deltas) / len(deltas) for k in x}
    close(fed.global_vector, as_vector(fed, x))
    for i in range(M):
        close(fed.client_row("ditto_personal", i), as_vector(fed, v[i]))
    assert fed.loop.comm.upload_bytes == 2 * M * 4 * 26  # Δ only: d = 26


def test_apfl_personal_models_through_the_mixture_and_global_model(tmp_path):
    alpha = 0.25
    fed, x, rec = run(APFL(alpha=alpha, personal_epochs=1), tmp_path, mlp())
    v = {i: dict(x) for i in range(M)}
    for r in rec.rounds:
        deltas = []
        for i, batches in sorted(r["batches"].items()):
            personal_steps = math.ceil(SIZES[i] / 2)
            for xb, yb in batches[:personal_steps]:  # the paper's rule: v ← v − η ∇_v f_i(α v + (1−α) x^r)
                leaves = {k: v[i][k].clone().requires_grad_() for k in x}
                mixed = {k: alpha * leaves[k] + (1 - alpha) * x[k] for k in x}
                grads = torch.autograd.grad(F.cross_entropy(forward(mixed, xb), yb), [leaves[k] for k in x])
                v[i] = {k: v[i][k] - LR * g for k, g in zip(x, grads)}
            y = dict(x)
            for xb, yb in batches[personal_steps:]:
                y = sgd_step(y, xb, yb, list(x))
            deltas.append({k: y[k] - x[k] for k in x})
        x = {k: x[k] + sum(d[k] for d in deltas) / len(deltas) for k in x}
    close(fed.global_vector, as_vector(fed, x))
    for i in range(M):
        close(fed.client_row("apfl_personal", i), as_vector(fed, v[i]))
    assert fed.loop.comm.upload_bytes == 2 * M * 4 * 26  # Δ only: v_i never sent
    evaluation = PersonalEvaluation(fed.flat, lambda n, a, b: F.cross_entropy(n(a), b), held_out(),
                                    fed.loop.clients, fed.client_state, fed.callbacks, lambda t: t, 2, LR)
    for i in range(M):  # the personalised model: α v_i + (1−α) x^r
        close(evaluation.personal_vector(i, fed.global_vector),
              as_vector(fed, {k: alpha * v[i][k] + (1 - alpha) * x[k] for k in x}))
    accs = [accuracy({k: alpha * v[i][k] + (1 - alpha) * x[k] for k in x}, *held_out().of(i)) for i in range(M)]
    assert evaluation.run(fed.global_vector, 1)["pval/acc_mean"] == pytest.approx(sum(accs) / M)
    with pytest.raises(ConfigError, match=r"APFL\(alpha=...\).*must be in \(0, 1\]"):
        APFL(alpha=0.0)


def test_fedbn_keeps_normalisation_weights_and_statistics_local(tmp_path):
    fed, x, rec = run(FedBN(), tmp_path, mlp(norm=True))
    norm = ("1.weight", "1.bias", "1.running_mean", "1.running_var")
    local = {i: {k: x[k].clone() for k in norm} for i in range(M)}
    for r in rec.rounds:
        deltas = []
        for i, batches in sorted(r["batches"].items()):
            y = {**x, **local[i]}
            for xb, yb in batches:
                y = sgd_step(y, xb, yb, list(y))
            local[i] = {k: y[k] for k in norm}
            deltas.append({k: y[k] - x[k] for k in x if k not in norm})
        x = {**x, **{k: x[k] + sum(d[k] for d in deltas) / len(deltas) for k in deltas[0]}}
    close(fed.global_vector, as_vector(fed, x))
    row = {i: fed.client_row("personal_part", i) for i in range(M)}
    for i in range(M):
        close(row[i], torch.cat([local[i][k].reshape(-1) for k in norm]))
    assert fed.loop.comm.upload_bytes == 2 * M * 4 * (16 + 10)  # not the BN's 8 weights nor its 8 statistics


def test_fedbn_on_a_network_without_normalisation_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError) as err:
        ToyFederation(mlp(), FedBN(), data(), str(tmp_path))
    assert str(err.value).startswith("model.algorithm: fedbn keeps normalisation layers local, but Sequential has none")
    assert "\n" not in str(err.value)


def test_fedavg_ft_fine_tunes_x_before_evaluating(tmp_path):
    fed, x, rec = run(FedAvgFT(finetune_epochs=2), tmp_path, mlp())
    for r in rec.rounds:
        deltas = []
        for i, batches in sorted(r["batches"].items()):
            y = dict(x)
            for xb, yb in batches:
                y = sgd_step(y, xb, yb, list(x))
            deltas.append({k: y[k] - x[k] for k in x})
        x = {k: x[k] + sum(d[k] for d in deltas) / len(deltas) for k in x}
    close(fed.global_vector, as_vector(fed, x))
    evaluation = PersonalEvaluation(fed.flat, lambda n, a, b: F.cross_entropy(n(a), b), held_out(),
                                    fed.loop.clients, fed.client_state, fed.callbacks, lambda v: v, 2, LR)
    evaluation.round = 1
    for i, (cx, cy) in enumerate(data()):
        order = torch.Generator().manual_seed(derive_seed(1, FINE_TUNE_KEY, i))
        y = dict(x)
        for _ in range(2):
            perm = torch.randperm(len(cy), generator=order)
            for start in range(0, len(cy), 2):
                idx = perm[start:start + 2]
                y = sgd_step(y, cx[idx], cy[idx], list(x))
        close(evaluation.personal_vector(i, fed.global_vector), as_vector(fed, y))
    assert fed.loop.comm.upload_bytes == 2 * M * 4 * 26


def test_fedbcgd_with_a_personal_classifier_block(tmp_path):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    algorithm = FedBCGDPersonal(num_blocks=2, block_division="balanced", server_momentum=0.8)
    fed, x, rec = run(algorithm, tmp_path, net)
    head = ("4.weight", "4.bias")
    heads = {i: {k: x[k].clone() for k in head} for i in range(M)}
    momentum = None
    for r in rec.rounds:
        ranges = r["ranges"]
        assert sorted(floats(rg) for rg in ranges.values()) == [18, 18, 18]  # one body block (36/2), no classifier
        total, count = torch.zeros(fed.flat.numel), torch.zeros(fed.flat.numel)
        for i, batches in sorted(r["batches"].items()):
            y = {**x, **heads[i]}
            for xb, yb in batches:
                y = sgd_step5(y, xb, yb)
            heads[i] = {k: y[k] for k in head}
            delta = as_vector(fed, y) - as_vector(fed, x)
            for a, b in ranges[i]:
                total[a:b] += delta[a:b]
                count[a:b] += 1
        d = fed.flat.num_params
        g = -(total / count.clamp_min(1))[:d]
        momentum = g if momentum is None else 0.8 * momentum + g
        momentum[count[:d] == 0] = 0.0  # nobody sent the classifier: x and momentum stay as they were
        x = as_dict(fed, torch.cat([as_vector(fed, x)[:d] - momentum, as_vector(fed, x)[d:]]))
    close(fed.global_vector, as_vector(fed, x))
    for i in range(M):
        close(fed.client_row("personal_part", i), torch.cat([heads[i][k].reshape(-1) for k in head]))
    assert fed.loop.comm.upload_bytes == 4 * sum(floats(rg) for r in rec.rounds for rg in r["ranges"].values())


def sgd_step5(p, xb, yb):
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in p.items()}
    h = torch.relu(xb @ leaves["0.weight"].T + leaves["0.bias"])
    h = torch.relu(h @ leaves["2.weight"].T + leaves["2.bias"])
    loss = F.cross_entropy(h @ leaves["4.weight"].T + leaves["4.bias"], yb)
    grads = dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values()))))
    return {k: p[k] - LR * grads[k] for k in p}


def test_local_each_client_trains_alone_and_nothing_moves_the_global_model(tmp_path):
    rounds, epochs = 3, 2
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    two = data(sizes=(4, 3))
    recorder = Recorder()
    fed = ToyFederation(net, Local(), two, str(tmp_path), lr=LR, batch_size=2, local_epochs=epochs,
                        extra_callbacks=[recorder])
    x0 = as_dict(fed, fed.global_vector.clone())
    for r in range(rounds):
        fed.run_round(r)
    close(fed.global_vector, as_vector(fed, x0))  # x^r = x^0: nothing uploaded, nothing averaged
    assert fed.loop.comm.upload_bytes == 0
    assert all(r["ranges"][i] == [] for r in recorder.rounds for i in range(2))
    for i, (cx, cy) in enumerate(two):
        batches = [b for r in recorder.rounds for b in r["batches"][i]]
        assert len(batches) == rounds * epochs * math.ceil(len(cy) / 2)  # R × E epochs of its own data
        assert sorted(torch.cat([yb for _, yb in batches[:2]]).tolist()) == sorted(cy.tolist())
        y = dict(x0)
        for xb, yb in batches:
            y = sgd_step(y, xb, yb, list(y))
        close(fed.client_row("personal_part", i), as_vector(fed, y))
    evaluation = PersonalEvaluation(fed.flat, lambda n, a, b: F.cross_entropy(n(a), b), held_out(),
                                    fed.loop.clients, fed.client_state, fed.callbacks, lambda t: t, 2, LR)
    evaluation.client_ids = [0, 1]
    accs = [accuracy(dict(zip(x0, [fed.client_row("personal_part", i)[s.start:s.stop].view(s.shape)
                                   for s in fed.flat.segments])), *held_out().of(i)) for i in range(2)]
    assert evaluation.run(fed.global_vector, rounds - 1)["pval/acc_mean"] == pytest.approx(sum(accs) / 2)
