"""FedBCGD, FedBCGD+ and SCAFFOLD against an independent re-implementation of the spec.

The reference below is plain tensor arithmetic on a dict of parameters, written from
ALGORITHMS.md: it never calls the library. From the library run it takes only *which*
clients were sampled, which block each got and which minibatches they drew (recorded by
an FLCallback), then checks the assignment rule and recomputes every number.
"""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fl_lightning import FederatedDataModule, FederatedModule
from fl_lightning.callbacks import ControlVariates, FLCallback, ServerMomentum
from fl_lightning.data import DataSplit
from tests.conftest import make_trainer

M, S, N = 4, 3, 2          # clients, sampled per round, blocks
LR, DECAY, WD, LAM = 0.1, 0.9, 0.01, 0.5
BLOCKS = {"blocks": [["a"], ["b"]], "shared": ["head"]}
BLOCK_OF = {"a.weight": 0, "a.bias": 0, "b.weight": 1, "b.bias": 1, "head.weight": "s", "head.bias": "s"}


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.head = nn.Linear(3, 4), nn.Linear(4, 4), nn.Linear(4, 3)

    def forward(self, x):
        return self.head(torch.tanh(self.b(torch.tanh(self.a(x)))))


def reference_loss(p, x, y):
    h = torch.tanh(torch.tanh(x @ p["a.weight"].T + p["a.bias"]) @ p["b.weight"].T + p["b.bias"])
    return F.cross_entropy(h @ p["head.weight"].T + p["head.bias"], y)


def grad(p, x, y):
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in p.items()}
    grads = torch.autograd.grad(reference_loss(leaves, x, y), list(leaves.values()))
    return dict(zip(leaves, grads))


class Recorder(FLCallback):
    """Records what the reference needs to replay: clients, blocks, minibatches, final local models."""

    def __init__(self):
        self.rounds = []

    def configure_round(self, loop, plan):
        self.rounds.append([])

    def on_client_start(self, loop, client):
        self.rounds[-1].append({"client": client.client_id, "block": client.info.get("block"), "batches": []})

    def on_local_gradient(self, loop, client):
        self.rounds[-1][-1]["batches"].append(tuple(t.clone() for t in client.batch))

    def on_client_end(self, loop, client):
        self.rounds[-1][-1]["local_change"] = (loop.flat.vector - loop.global_vector).clone()


def data():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(16, 3, generator=g)
    y = torch.randint(0, 3, (16,), generator=g)
    return DataSplit(x, y, x, y, 3), [torch.arange(4 * i, 4 * i + 4) for i in range(M)]


def run_library(algorithm, rounds=2, **hp):
    torch.manual_seed(0)
    split, parts = data()
    settings = dict(clients_per_round=S, local_epochs=1, batch_size=2, lr=LR, lr_decay=DECAY, weight_decay=WD,
                    server_momentum=LAM, block_division=BLOCKS)
    module = FederatedModule(Tiny(), algorithm=algorithm, **{**settings, **hp})
    initial = {k: v.detach().clone() for k, v in module.net.state_dict().items()}
    recorder = Recorder()
    make_trainer(rounds, callbacks=[recorder]).fit(module, FederatedDataModule.from_tensors(split, parts))
    return module, initial, recorder


def run_reference(initial, recorder, *, blocks=True, momentum=True, controls=None, svrg=False, freeze=False,
                  keep_all=True):
    """The spec, written out. ``controls``: None, "option1" or "option2"."""
    split, parts = data()
    x = copy.deepcopy(initial)
    v = {k: torch.zeros_like(t) for k, t in x.items()}
    c = {k: torch.zeros_like(t) for k, t in x.items()}
    c_client = {i: {k: torch.zeros_like(t) for k, t in x.items()} for i in range(M)}
    for r, clients in enumerate(recorder.rounds):
        lr = LR * DECAY ** r
        delta_sum = {k: torch.zeros_like(t) for k, t in x.items()}
        delta_count = {k: 0 for k in x}
        dc_sum = {k: torch.zeros_like(t) for k, t in x.items()}
        for rec in clients:
            i, j = rec["client"], rec["block"]
            sends = [k for k in x if not blocks or BLOCK_OF[k] in (j, "s")]
            y = copy.deepcopy(x)
            data_x, data_y = split.train_x[parts[i]], split.train_y[parts[i]]
            full = grad(x, data_x, data_y)
            for xb, yb in rec["batches"]:
                g = grad(y, xb, yb)
                g_x = grad(x, xb, yb)
                for k in y:
                    if svrg:
                        g[k] = g[k] - g_x[k] + full[k]
                    if controls:
                        g[k] = g[k] - c_client[i][k] + c[k]
                    if freeze and k not in sends:
                        continue
                    y[k] = y[k] - lr * (g[k] + WD * y[k])
            for k in sends:
                delta_sum[k] += y[k] - x[k]
                delta_count[k] += 1
            if controls:
                steps = len(rec["batches"])
                new = {k: full[k] if controls == "option1" else c_client[i][k] - c[k] + (x[k] - y[k]) / (steps * lr)
                       for k in x}
                for k in sends:
                    dc_sum[k] += new[k] - c_client[i][k]
                c_client[i] = new if keep_all else {k: new[k] if k in sends else c_client[i][k] for k in x}
            rec["expected_local_change"] = {k: y[k] - x[k] for k in x}
        for k in x:
            mean = delta_sum[k] / delta_count[k]
            v[k] = LAM * v[k] + mean if momentum else mean
            x[k] = x[k] + v[k]
            if controls:
                coefficient = 1 / (M * N) if blocks and BLOCK_OF[k] == "s" else 1 / M
                c[k] = c[k] + coefficient * dc_sum[k]
    return x, v, c, c_client


def check_assignment(recorder, blocks=True):
    for clients in recorder.rounds:
        ids = [rec["client"] for rec in clients]
        assert len(ids) == S and len(set(ids)) == S and set(ids) <= set(range(M))
        if blocks:  # shuffled clients, position i → block i mod N: K = (2, 1) for S=3, N=2
            assert sorted(rec["block"] for rec in clients) == [0, 0, 1]


def flat_state(module, vector):
    """Map a flat server vector back to parameter names (reads the layout only)."""
    return {s.name: vector[s.start:s.stop].view(s.shape) for s in module.flat.segments if s.is_param}


def assert_params(actual, expected):
    for k in expected:
        torch.testing.assert_close(actual[k], expected[k], atol=2e-6, rtol=1e-5, msg=k)


CASES = {
    "fedbcgd": dict(algorithm="fedbcgd", hp={}, ref={}),
    "fedbcgd_no_momentum": dict(algorithm="fedbcgd", hp={"server_momentum": 0.0}, ref={"momentum": False}),
    "fedbcgd_freezing": dict(algorithm="fedbcgd_freezing", hp={}, ref={"freeze": True}),
    "fedbcgd_plus_opt1_svrg": dict(algorithm="fedbcgd_plus", hp={"control_variate": "option1"},
                                   ref={"controls": "option1", "svrg": True}),
    "fedbcgd_plus_opt1": dict(algorithm="fedbcgd_plus", hp={"control_variate": "option1", "variance_reduction": False},
                              ref={"controls": "option1"}),
    "fedbcgd_plus_opt2_svrg": dict(algorithm="fedbcgd_plus", hp={"control_variate": "option2"},
                                   ref={"controls": "option2", "svrg": True}),
    "fedbcgd_plus_opt2": dict(algorithm="fedbcgd_plus", hp={"control_variate": "option2", "variance_reduction": False},
                              ref={"controls": "option2"}),
    "fedbcgd_plus_keep_uploaded": dict(algorithm="fedbcgd_plus", hp={"control_keep": "uploaded"},
                                       ref={"controls": "option1", "svrg": True, "keep_all": False}),
    "scaffold": dict(algorithm="scaffold", hp={"server_momentum": 0.0}, ref={"blocks": False, "momentum": False,
                                                                            "controls": "option2"}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_two_rounds_match_reference(case):
    spec = CASES[case]
    module, initial, recorder = run_library(spec["algorithm"], **spec["hp"])
    ref = spec["ref"]
    check_assignment(recorder, blocks=ref.get("blocks", True))
    x, v, c, c_client = run_reference(initial, recorder, **ref)
    assert_params(dict(module.net.named_parameters()), x)
    callbacks = {type(cb): cb for cb in module.loop.callbacks}
    if ref.get("momentum", True):
        assert_params(flat_state(module, callbacks[ServerMomentum].velocity), v)
    if ref.get("controls"):
        controls = callbacks[ControlVariates]
        assert_params(flat_state(module, controls.server_control), c)
        assert set(controls.client_controls) == {rec["client"] for rnd in recorder.rounds for rec in rnd}
        for i, stored in controls.client_controls.items():
            assert_params(flat_state(module, stored), c_client[i])
    # every client's local model, including frozen blocks that must not move
    for clients in recorder.rounds:
        for rec in clients:
            assert_params(flat_state(module, rec["local_change"]), rec["expected_local_change"])
            if ref.get("freeze"):
                frozen = [k for k in BLOCK_OF if BLOCK_OF[k] not in (rec["block"], "s")]
                assert all(flat_state(module, rec["local_change"])[k].abs().max() == 0 for k in frozen)


def test_upload_counts_on_tiny_model():
    sizes = {0: 3 * 4 + 4, 1: 4 * 4 + 4, "s": 4 * 3 + 3}
    for algorithm, factor, down in (("fedbcgd", 1, 1), ("fedbcgd_plus", 2, 2)):
        module, _, recorder = run_library(algorithm, rounds=1)
        floats = sum(sizes[rec["block"]] + sizes["s"] for rec in recorder.rounds[0])
        assert module.loop.comm.upload_bytes == 4 * factor * floats
        assert module.loop.comm.download_bytes == 4 * down * S * sum(sizes.values())
