"""Less work and memory per client: the clients' inputs are a view of the data set when they hold it in
order; the loop's plain local SGD steps without torch's Python wrapper, with torch's own numbers bit for bit."""
import torch
import torch.nn.functional as F
from torch import nn

from fl_lightning import FederatedDataModule
from fl_lightning.data import DataSplit
from fl_lightning.federation.contexts import ClientTask
from fl_lightning.federation.flat import FlatModel
from fl_lightning.federation.local_training import LocalConfig, LocalTrainer, plain_sgd_step
from fl_lightning.data.datamodule import ClientData


def split_of(n=12):
    x = torch.arange(n * 2, dtype=torch.float32).view(n, 2)
    return DataSplit(x, torch.arange(n) % 3, x[:2], torch.arange(2), 3)


def test_clients_holding_the_rows_in_order_read_the_data_set_itself():
    split = split_of()
    data = FederatedDataModule.from_tensors(split, [torch.arange(0, 5), torch.arange(5, 12)])
    assert data.clients.x.data_ptr() == split.train_x.data_ptr()  # no second copy of the inputs
    assert data.clients.offsets == [0, 5, 12]
    assert data.clients.of(1)[0].tolist() == [[10.0, 11.0], [12.0, 13.0], [14.0, 15.0], [16.0, 17.0],
                                              [18.0, 19.0], [20.0, 21.0], [22.0, 23.0]]
    part = FederatedDataModule.from_tensors(split, [torch.arange(3, 6), torch.arange(6, 8)])  # a run inside
    assert part.clients.x.data_ptr() == split.train_x[3].data_ptr() and part.clients.x[:, 0].tolist() == [6, 8, 10,
                                                                                                         12, 14]


def test_clients_in_any_other_order_get_the_gathered_copy():
    split = split_of()
    data = FederatedDataModule.from_tensors(split, [torch.tensor([4, 0]), torch.tensor([1, 2, 3])])
    assert data.clients.x.data_ptr() != split.train_x.data_ptr()
    assert data.clients.x[:, 0].tolist() == [8.0, 0.0, 2.0, 4.0, 6.0]
    assert data.clients.y.tolist() == [1, 0, 1, 2, 0]


def sgd_pair(**options):
    """Two flat tensors with the same values and gradient, each with its own SGD(**options)."""
    g = torch.Generator().manual_seed(0)
    values, grad = torch.randn(7, generator=g), torch.randn(7, generator=g)
    params = [values.clone(), values.clone()]
    for p in params:
        p.grad = grad.clone()
    return params, [torch.optim.SGD([p], **options) for p in params]


def test_plain_sgd_step_gives_torchs_numbers_bit_for_bit():
    (mine, torchs), (fast, reference) = sgd_pair(lr=0.1, weight_decay=0.01)
    step = plain_sgd_step(fast)
    for lr in (0.1, 0.1, 0.037):  # the lr is read at every step (a schedule changes it between rounds)
        fast.param_groups[0]["lr"] = reference.param_groups[0]["lr"] = lr
        step()
        reference.step()
    assert torch.equal(mine, torchs)
    p = torch.tensor([2.0])  # by hand: p ← p − lr·(g + λ·p), g = 0.5, λ = 0.25, lr = 0.5: 2 → 1.5 → 1.0625
    p.grad = torch.tensor([0.5])
    step = plain_sgd_step(torch.optim.SGD([p], lr=0.5, weight_decay=0.25))
    step()
    assert p.item() == 1.5
    step()
    assert p.item() == 1.0625


def test_plain_sgd_step_is_none_where_torchs_step_must_run():
    assert plain_sgd_step(sgd_pair(lr=0.1, momentum=0.9)[1][0]) is None
    assert plain_sgd_step(torch.optim.Adam([torch.zeros(3, requires_grad=True)])) is None
    assert plain_sgd_step(torch.optim.SGD([torch.zeros(3), torch.zeros(2)], lr=0.1)) is None  # two tensors
    _, (hooked, _) = sgd_pair(lr=0.1)
    handle = hooked.register_step_pre_hook(lambda *args: None)
    assert plain_sgd_step(hooked) is None
    handle.remove()
    assert plain_sgd_step(hooked) is not None


def test_a_client_trains_to_the_same_weights_as_with_torchs_step():
    """LocalTrainer with the fast step against the same client with ``optimizer.step()`` (the fast path off)."""
    import fl_lightning.federation.local_training as local_training

    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(20, 4, generator=g), torch.randint(0, 3, (20,), generator=g)
    clients = ClientData(x, y, [0, 8, 20])
    results = []
    for fast in (True, False):
        torch.manual_seed(0)
        flat = FlatModel(nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3)))
        optimizer = torch.optim.SGD([flat.params], lr=0.2, weight_decay=0.05)
        trainer = LocalTrainer(flat, optimizer, lambda net, xb, yb: F.cross_entropy(net(xb), yb), clients,
                               LocalConfig(clients_per_round=2, batch_size=3), [], flat.vector.clone())
        saved = local_training.plain_sgd_step
        local_training.plain_sgd_step = saved if fast else (lambda optimizer: None)
        try:
            plan = type("Plan", (), {"round": 0, "lr": 0.2})()
            client, loss_sum, _ = trainer.run_client(ClientTask(1, 0, 123, 12, [(0, flat.numel)], 2), plan)
        finally:
            local_training.plain_sgd_step = saved
        results.append((client.upload.parts[0].values(), flat.vector.clone(), loss_sum.item(), client.steps))
    (upload, weights, loss, steps), (upload_ref, weights_ref, loss_ref, steps_ref) = results
    assert steps == steps_ref == 8  # 2 epochs × ⌈12 / 3⌉ minibatches
    assert loss == loss_ref and torch.equal(weights, weights_ref) and torch.equal(upload, upload_ref)
    assert not torch.equal(upload, torch.zeros_like(upload))
