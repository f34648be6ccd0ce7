"""FedAvg and FedAvgM rounds on a 2×2 linear model against values computed by hand.

Two clients, one sample each, batch = the sample, one local step per round, so each
client's update is one exact gradient step: for logits z = W x and cross-entropy,
∇_W = (softmax(z) − e_y) xᵀ.
"""
import math

import torch
from torch import nn

from fl_lightning import FederatedDataModule
from fl_lightning.data import DataSplit
from tests.conftest import fl_module, make_trainer

X = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
Y = torch.tensor([0, 1])


def run(algorithm: str, rounds: int, **hparams):
    net = nn.Linear(2, 2, bias=False)
    nn.init.zeros_(net.weight)
    module = fl_module(net, algorithm=algorithm, clients_per_round=2, local_epochs=1, batch_size=1,
                             lr=0.1, lr_decay=0.5, weight_decay=0.0, **hparams)
    data = FederatedDataModule.from_tensors(DataSplit(X, Y, X, Y, 2), [torch.tensor([0]), torch.tensor([1])])
    make_trainer(rounds).fit(module, data)
    return module


def sigmoid(t):
    return 1.0 / (1.0 + math.exp(-t))


# Round 1 from W = 0 (softmax = ½,½), lr 0.1:
#   client 0: x=(1,0), y=0: ∇ = [[-½,0],[½,0]] → Δ0 = [[0.05,0],[-0.05,0]]
#   client 1: x=(0,2), y=1: ∇ = [[0,1],[0,-1]] → Δ1 = [[0,-0.1],[0,0.1]]
MEAN_1 = [[0.025, -0.05], [-0.025, 0.05]]


def mean_round_2():
    # W1 = MEAN_1, lr 0.05. Client 0: z = (0.025, -0.025), p(y=0) = σ(0.05);
    # client 1: z = 2·(-0.05, 0.05), p(y=1) = σ(0.2).
    a = 0.05 * (1 - sigmoid(0.05))          # |Δ0| entries in column 0
    b = 0.05 * 2 * (1 - sigmoid(0.2))       # |Δ1| entries in column 1
    return [[a / 2, -b / 2], [-a / 2, b / 2]]


def test_fedavg_one_round():
    module = run("fedavg", 1)
    torch.testing.assert_close(module.net.weight.detach(), torch.tensor(MEAN_1), atol=1e-7, rtol=0)


def test_fedavg_two_rounds_with_server_lr():
    module = run("fedavg", 2, server_lr=2.0)
    # server lr 2 doubles round 1; round 2 then starts from W1 = 2·MEAN_1.
    w1 = [[2 * v for v in row] for row in MEAN_1]
    a = 0.05 * (1 - sigmoid(2 * w1[0][0]))
    b = 0.05 * 2 * (1 - sigmoid(2 * 2 * w1[1][1]))
    expected = [[w1[0][0] + a, w1[0][1] - b], [w1[1][0] - a, w1[1][1] + b]]
    torch.testing.assert_close(module.net.weight.detach(), torch.tensor(expected), atol=1e-6, rtol=0)


def test_fedavgm_two_rounds():
    lam = 0.5
    module = run("fedavgm", 2, server_momentum=lam)
    m2 = mean_round_2()
    v2 = [[lam * MEAN_1[i][j] + m2[i][j] for j in range(2)] for i in range(2)]
    w2 = [[MEAN_1[i][j] + v2[i][j] for j in range(2)] for i in range(2)]
    torch.testing.assert_close(module.net.weight.detach(), torch.tensor(w2), atol=1e-7, rtol=0)
    server = module.trainer.optimizers[0]  # SGD with momentum λ on the pseudo-gradient −Δ̄ keeps b = −v
    buffer = server.state[server.param_groups[0]["params"][0]]["momentum_buffer"]
    torch.testing.assert_close(-buffer, torch.tensor(v2).flatten(), atol=1e-7, rtol=0)
    assert module.trainer.global_step == 2  # one Lightning optimizer step per round
    assert module.loop.comm.upload_d == 2.0


def test_fedavg_two_rounds_with_lr_decay():
    fedavg = run("fedavg", 2)
    m2 = mean_round_2()
    expected = [[MEAN_1[i][j] + m2[i][j] for j in range(2)] for i in range(2)]
    torch.testing.assert_close(fedavg.net.weight.detach(), torch.tensor(expected), atol=1e-7, rtol=0)
