"""The baselines beside pval/*: the label prior on a hand-built partition, and `fl-lightning report`'s
label-prior, Local and gain columns from real CLI fits (the prior re-made from each run's config.yaml)."""
import csv
from collections import Counter

import numpy as np
import pytest
import torch

from fl_lightning import FederatedDataModule
from fl_lightning.cli import main
from fl_lightning.data.datamodule import ClientData
from fl_lightning.personalization.prior import label_prior, majority_accuracy
from fl_lightning.personalization.split import hold_out_per_client
from fl_lightning.runs import report
from fl_lightning.federation.seeding import run_seed_set
from tests.test_cli import QUICKSTART, QUIET


def client_data(parts):
    y = torch.tensor([label for part in parts for label in part])
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).tolist()
    return ClientData(torch.zeros(len(y), 1), y, offsets)


def test_label_prior_of_a_hand_built_partition():
    train = client_data([[1, 1, 2], [0, 3, 3, 0, 0], [5], [2, 1]])
    held = client_data([[1, 2], [0, 0, 3], [], [1, 2, 2]])
    assert majority_accuracy(torch.tensor([2, 1]), torch.tensor([1, 2, 2])) == pytest.approx(1 / 3)  # tie: label 1
    prior = label_prior(train, held, [0, 1, 2, 3])  # client 2 holds nothing out: skipped, as pval/* skips it
    accs = sorted([1 / 2, 2 / 3, 1 / 3])
    assert prior["clients"] == 3 and prior["acc_mean"] == pytest.approx(sum(accs) / 3)
    assert prior["acc_p10"] == pytest.approx(accs[0] + 0.2 * (accs[1] - accs[0]))  # numpy's linear interpolation
    assert label_prior(train, held, [1])["acc_mean"] == pytest.approx(2 / 3)  # only the clients pval/* evaluates


def fit(name, algorithm):
    assert main(["fit", "--config", QUICKSTART, *QUIET, "--trainer.max_epochs", "1", "--model.algorithm", algorithm,
                 "--data.personal_fraction", "0.25", "--trainer.logger.init_args.save_dir", "runs",
                 "--trainer.logger.init_args.name", name]) == 0


def test_report_adds_the_label_prior_local_and_the_gain_over_the_better():
    fit("local", "local")
    fit("fedavg", "fedavg")
    with open("runs/local/local,personal_fraction=0.25,seed=0/version_0/metrics.csv") as f:  # under the name given
        local_rows = [r for r in csv.DictReader(f)]
    assert float(local_rows[-1]["comm/upload_d"]) == 0  # Local sends nothing
    # the prior by hand: the quickstart's partition (digits, 20 clients, Dirichlet 0.5, seed 0), 25 % held out
    dm = FederatedDataModule(dataset="digits", num_clients=20, partition="dirichlet", dirichlet_rho=0.5,
                             val_fraction=0.1)
    with run_seed_set(0):
        dm.setup()
        train_idx, held_idx = hold_out_per_client(dm.client_indices, 0.25)
    labels = dm.split.train_y.tolist()
    accs = []
    for tr, he in zip(train_idx, held_idx):
        if len(he):
            counts = Counter(labels[i] for i in tr.tolist())
            majority = min(c for c in counts if counts[c] == max(counts.values()))
            accs.append(sum(labels[i] == majority for i in he.tolist()) / len(he))
    assert report.main(["runs", "--target", "0.5", "--out", "rep"]) == 0
    with open("rep.csv") as f:
        rows = {r["group"]: r for r in csv.DictReader(f)}
    assert len(rows) == 2
    for row in rows.values():
        assert float(row["label_prior_acc_mean"]) == pytest.approx(np.mean(accs), abs=1e-12)
        assert float(row["label_prior_acc_p10"]) == pytest.approx(np.percentile(accs, 10), abs=1e-12)
    local = next(r for g, r in rows.items() if "Local" in g or "local" in g)
    other = next(r for g, r in rows.items() if r is not local)
    assert float(other["local_pval_acc_mean"]) == pytest.approx(float(local["final_pval_acc_mean"]))
    better = max(float(local["final_pval_acc_mean"]), np.mean(accs))
    assert float(other["pval_gain"]) == pytest.approx(float(other["final_pval_acc_mean"]) - better)
    assert "label_prior_acc_mean" in open("rep.md").read()
