"""Data sets through their ordinary code paths, and client data as device tensors."""
import torch

from fl_lightning.data import FederatedDataModule
from tests.conftest import SHARED_DATA, requires_shared_data


def test_digits_clients_are_slices_of_one_tensor():
    dm = FederatedDataModule("digits", num_clients=10, partition="iid", val_fraction=0.0)
    dm.setup()
    assert dm.split.train_x.shape == (1437, 1, 8, 8) and dm.split.test_x.shape == (360, 1, 8, 8)
    assert len(dm.clients) == 10 and dm.clients.offsets == list(range(0, 1431, 143))
    x0, y0 = dm.clients.of(0)
    assert x0.data_ptr() == dm.clients.x.data_ptr()  # a view, not a copy
    assert torch.equal(y0, dm.split.train_y[dm.client_indices[0]])


def test_synthetic_generator():
    dm = FederatedDataModule("synthetic", num_clients=6, samples_per_client=50, synthetic_alpha=1.0, val_fraction=0.0,
                             synthetic_beta=1.0)
    dm.setup()
    assert dm.split.train_x.shape == (300, 60) and dm.split.test_x.shape == (60, 60)
    assert [dm.clients.num_samples(i) for i in range(6)] == [50] * 6
    again = FederatedDataModule("synthetic", num_clients=6, samples_per_client=50, val_fraction=0.0)
    again.setup()
    assert torch.equal(dm.split.train_x, again.split.train_x)  # fixed generator seed
    # clients differ in their input distribution (β) and labelling model (α)
    means = torch.stack([dm.clients.of(i)[0].mean(0) for i in range(6)])
    assert means.std(0).mean() > 0.3
    homogeneous = FederatedDataModule("synthetic", val_fraction=0.0, num_clients=6, samples_per_client=50, synthetic_alpha=0.0,
                                      synthetic_beta=0.0)
    homogeneous.setup()
    assert torch.stack([homogeneous.clients.of(i)[0].mean(0) for i in range(6)]).std(0).mean() < means.std(0).mean()


@requires_shared_data
def test_mnist_from_shared_copy_through_torchvision():
    dm = FederatedDataModule("mnist", val_fraction=0.0, num_clients=100, dirichlet_rho=0.1, samples_per_client=500,
                             root=str(SHARED_DATA))
    dm.check()
    dm.setup()
    assert dm.split.train_x.shape == (60000, 1, 28, 28) and dm.split.test_x.shape == (10000, 1, 28, 28)
    assert abs(float(dm.split.train_x.mean())) < 1e-3  # normalised with MNIST's mean/std
    hist = dm.histogram()
    assert hist.shape == (100, 10) and (hist.sum(1) == 500).all()
    assert (hist.max(1).values > 250).float().mean() > 0.5  # ρ = 0.1: most clients dominated by one class


def test_val_fraction_holds_out_training_data():
    dm = FederatedDataModule("digits", num_clients=10, partition="iid", val_fraction=0.1)
    dm.setup()
    assert len(dm.split.val_y) == 144 and len(dm.split.train_y) == 1437 - 144  # round(0.1 · 1437)
    train_rows = {tuple(r.tolist()) for r in dm.split.train_x.flatten(1)}
    assert not any(tuple(r.tolist()) in train_rows for r in dm.split.val_x.flatten(1)[:50])
    (val_x, _), = list(dm.val_dataloader())
    (test_x, _), = list(dm.test_dataloader())
    assert torch.equal(val_x, dm.split.val_x) and torch.equal(test_x, dm.split.test_x)
    again = FederatedDataModule("digits", num_clients=10, partition="iid", val_fraction=0.1)
    again.setup()
    assert torch.equal(again.split.val_y, dm.split.val_y)  # seeded: the same split every time
    paper = FederatedDataModule("digits", num_clients=10, val_fraction=0.0)
    paper.setup()
    (val_x, _), = list(paper.val_dataloader())
    assert paper.split.val_x is None and torch.equal(val_x, paper.split.test_x)  # the paper's protocol
