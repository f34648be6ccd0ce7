"""An independent re-implementation of ALGORITHMS.md as plain tensor arithmetic.

It works on a dict of parameters with gradients by autograd on fresh leaves and never calls
the library. From a library run it takes only *which* clients were sampled, which block each
got and which minibatches they drew (recorded by ``Recorder``), then recomputes every number.
"""
import copy
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from fl_lightning import FederatedDataModule, FederatedModule
from fl_lightning.callbacks import FLCallback
from fl_lightning.data import DataSplit
from tests.conftest import make_trainer, split_options

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

    def __init__(self, blocks=None):
        self.rounds = []
        self.blocks = blocks  # the module's partition: a client's upload ranges name its block

    def configure_round(self, round):
        self.rounds.append([])

    def block_of(self, client):
        if self.blocks is None:
            return None
        return next((j for j in range(self.blocks.num_blocks) if self.blocks.upload_ranges(j) == client.upload_ranges),
                    None)

    def on_client_start(self, client):
        self.rounds[-1].append({"client": client.client_id, "block": self.block_of(client), "batches": [],
                                "lost": client.task.lost, "reported": False})

    def on_client_reported(self, client):
        self.rounds[-1][-1]["reported"] = True

    def on_local_gradient(self, client):
        self.rounds[-1][-1]["batches"].append(tuple(t.clone() for t in client.batch))

    def on_client_end(self, client):
        self.rounds[-1][-1]["local_change"] = (client.vector - client.global_vector).clone()


def data():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(16, 3, generator=g)
    y = torch.randint(0, 3, (16,), generator=g)
    return DataSplit(x, y, x, y, 3), [torch.arange(4 * i, 4 * i + 4) for i in range(M)]


def run_library(algorithm, rounds=2, split_and_parts=None, **hp):
    torch.manual_seed(0)
    split, parts = split_and_parts or data()
    settings = dict(clients_per_round=S, local_epochs=1, batch_size=2, lr=LR, lr_decay=DECAY, weight_decay=WD)
    module = FederatedModule(Tiny(), **split_options(algorithm, {**settings, **hp}, default_blocks=BLOCKS))
    initial = {k: v.detach().clone() for k, v in module.net.state_dict().items()}
    recorder = Recorder(module.blocks)
    make_trainer(rounds, callbacks=[recorder]).fit(module, FederatedDataModule.from_tensors(split, parts))
    return module, initial, recorder


@dataclass
class Rule:
    """What the reference does; every field is one sentence of the spec."""

    blocks: bool = True              # upload block j + shared (FedBCGD) or everything
    momentum: float = 0.0            # server momentum λ
    controls: Optional[str] = None   # None | "option1" | "option2" | "authors"
    svrg: bool = False
    freeze: bool = False
    keep_all: bool = False           # client stores all of c_i⁺ (else only what it uploaded)
    shared_coefficient: str = "mean"  # "mean": 1/M, "paper": 1/(MN) on the shared block's c
    prox_mu: float = 0.0             # FedProx
    feddc_alpha: Optional[float] = None  # FedDC
    clip: Optional[float] = None


def _zeros(x):
    return {k: torch.zeros_like(t) for k, t in x.items()}


def _clip(g, max_norm):
    norm = torch.sqrt(sum((t ** 2).sum() for t in g.values()))
    scale = min(1.0, max_norm / (float(norm) + 1e-6))
    return {k: t * scale for k, t in g.items()}


def run_reference(initial, recorder, rule: Rule, split_and_parts=None):
    """The spec, written out. Returns the final server state and every client's state.

    Failures: a client whose upload was lost (the library's seeded draw, recorded) or whose
    update is not finite (decided here) reports nothing and keeps its state; a coordinate nobody
    reported keeps x and v; a round where nobody reported changes nothing."""
    split, parts = split_and_parts or data()
    x = copy.deepcopy(initial)
    v, c = _zeros(x), _zeros(x)
    c_client = {i: _zeros(x) for i in range(M)}
    drift = {i: _zeros(x) for i in range(M)}
    server_updates = 0
    for r, clients in enumerate(recorder.rounds):
        lr = LR * DECAY ** r
        delta_sum, dc_sum = _zeros(x), _zeros(x)
        delta_count = {k: 0 for k in x}
        for rec in clients:
            i, j = rec["client"], rec["block"]
            sends = [k for k in x if not rule.blocks or BLOCK_OF[k] in (j, "s")]
            y = copy.deepcopy(x)
            data_x, data_y = split.train_x[parts[i]], split.train_y[parts[i]]
            full = grad(x, data_x, data_y)
            for xb, yb in rec["batches"]:
                g = grad(y, xb, yb)
                if rule.clip is not None:
                    g = _clip(g, rule.clip)
                g_x = grad(x, xb, yb)
                for k in y:
                    if rule.svrg:
                        g[k] = g[k] - g_x[k] + full[k]
                    if rule.controls in ("option1", "option2"):
                        g[k] = g[k] - c_client[i][k] + c[k]
                    g[k] = g[k] + rule.prox_mu * (y[k] - x[k])
                    if rule.feddc_alpha is not None:
                        g[k] = g[k] + rule.feddc_alpha * (y[k] + drift[i][k] - x[k]) + c[k] - c_client[i][k]
                    if rule.freeze and k not in sends:
                        continue
                    y[k] = y[k] - lr * (g[k] + WD * y[k])
                    if rule.controls == "authors":
                        y[k] = y[k] - (c[k] - c_client[i][k])
            rec["expected_local_change"] = {k: y[k] - x[k] for k in x}
            rec["expected_reported"] = not rec["lost"] and all(bool(torch.isfinite(y[k]).all()) for k in x)
            if not rec["expected_reported"]:
                continue
            for k in sends:
                delta_sum[k] += y[k] - x[k]
                delta_count[k] += 1
            steps = len(rec["batches"])
            if rule.controls == "option1":
                new = {k: full[k] + WD * x[k] for k in x}
            elif rule.controls in ("option2", "authors") or rule.feddc_alpha is not None:
                step = steps if rule.controls == "authors" else steps * lr
                new = {k: c_client[i][k] - c[k] + (x[k] - y[k]) / step for k in x}
            if rule.controls or rule.feddc_alpha is not None:
                for k in sends:
                    dc_sum[k] += new[k] - (c[k] if rule.controls == "authors" else c_client[i][k])
                keep = rule.keep_all or rule.feddc_alpha is not None
                c_client[i] = new if keep else {k: new[k] if k in sends else c_client[i][k] for k in x}
            if rule.feddc_alpha is not None:
                drift[i] = {k: drift[i][k] + y[k] - x[k] for k in x}
        if not any(rec["expected_reported"] for rec in clients):
            continue
        for k in x:
            if delta_count[k] == 0:
                continue  # a block nobody reported: x, v and c keep their values
            update = delta_sum[k] / delta_count[k]
            if rule.feddc_alpha is not None:
                update = update + sum(drift[i][k] for i in range(M)) / M
            v[k] = rule.momentum * v[k] + update
            x[k] = x[k] + v[k]
            if rule.controls == "authors":
                mean = dc_sum[k] / delta_count[k]
                c[k] = mean if server_updates == 0 else c[k] + 0.1 * mean
            elif rule.controls or rule.feddc_alpha is not None:
                paper = rule.blocks and rule.shared_coefficient == "paper" and BLOCK_OF[k] == "s"
                c[k] = c[k] + dc_sum[k] / (M * N if paper else M)
        server_updates += 1
    return {"x": x, "v": v, "c": c, "c_client": c_client, "drift": drift}


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


def server_velocity(module):
    """v of the server's SGD momentum: torch keeps b = −v (the pseudo-gradient is −Δ̄)."""
    server = module.trainer.optimizers[0]
    return -server.state[server.param_groups[0]["params"][0]]["momentum_buffer"]


def check_local_models(module, recorder, freeze=False):
    """Every client's local model, including frozen blocks that must not move."""
    for clients in recorder.rounds:
        for rec in clients:
            assert_params(flat_state(module, rec["local_change"]), rec["expected_local_change"])
            if freeze:
                frozen = [k for k in BLOCK_OF if BLOCK_OF[k] not in (rec["block"], "s")]
                assert all(flat_state(module, rec["local_change"])[k].abs().max() == 0 for k in frozen)
