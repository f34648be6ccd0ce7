import numpy as np
import pytest
import torch

from fl_lightning.data import FederatedDataModule, class_histogram, dirichlet_partition, iid_partition, label_skew
from fl_lightning.errors import ConfigError

LABELS = np.repeat(np.arange(10), 200)  # 2,000 samples, 10 balanced classes


def check_disjoint_cover(parts, n_each, total):
    flat = torch.cat(parts)
    assert all(len(p) == n_each for p in parts)
    assert len(torch.unique(flat)) == len(flat)  # no sample given twice
    assert int(flat.min()) >= 0 and int(flat.max()) < total


def test_dirichlet_sizes_and_disjoint():
    parts = dirichlet_partition(LABELS, 20, 0.5, np.random.default_rng(1), samples_per_client=50)
    check_disjoint_cover(parts, 50, len(LABELS))
    default = dirichlet_partition(LABELS, 20, 0.5, np.random.default_rng(1))
    check_disjoint_cover(default, 100, len(LABELS))  # ⌊N/M⌋: every sample used
    assert len(torch.cat(default)) == len(LABELS)


def test_skew_grows_as_rho_falls():
    labels_t = torch.as_tensor(LABELS)
    skew = {}
    for rho in (0.1, 0.6, 100.0):
        parts = dirichlet_partition(LABELS, 20, rho, np.random.default_rng(0), samples_per_client=50)
        skew[rho] = label_skew(class_histogram(labels_t, parts, 10))
    iid = label_skew(class_histogram(labels_t, iid_partition(LABELS, 20, np.random.default_rng(0), 50), 10))
    assert skew[0.1] > skew[0.6] > skew[100.0]
    assert skew[0.1] > 0.6 and iid < 0.2 and skew[100.0] < 0.2


def test_partition_is_seed_stable():
    a = dirichlet_partition(LABELS, 10, 0.3, np.random.default_rng(7))
    b = dirichlet_partition(LABELS, 10, 0.3, np.random.default_rng(7))
    c = dirichlet_partition(LABELS, 10, 0.3, np.random.default_rng(8))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))


def test_datamodule_partition_follows_run_seed(monkeypatch):
    def parts(seed):
        monkeypatch.setenv("PL_GLOBAL_SEED", str(seed))
        dm = FederatedDataModule("digits", num_clients=10, dirichlet_rho=0.5, val_fraction=0.0)
        dm.setup()
        return dm.client_indices, dm.histogram()

    (a, hist), (b, _), (c, _) = parts(0), parts(0), parts(1)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))
    assert hist.shape == (10, 10) and hist.sum() == 143 * 10  # ⌊1437/10⌋ per client


def test_too_many_samples_is_a_config_error():
    with pytest.raises(ConfigError, match="data.samples_per_client"):
        dirichlet_partition(LABELS, 10, 0.5, np.random.default_rng(0), samples_per_client=300)
