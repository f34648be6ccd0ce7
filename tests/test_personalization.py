"""Personalisation with real Trainers and the real CLI: the shards and quantity partitions, each client's held-out
share, pval/* in metrics.csv, personal state surviving kill and resume bit for bit, and one line for bad input."""
import csv
import glob
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger

from fl_lightning import FederatedDataModule
from fl_lightning.callbacks.base import FLCallback
from fl_lightning.cli import main
from fl_lightning.errors import FLUserError
from fl_lightning.data.partition import quantity_partition, shards_partition
from fl_lightning.personalization.split import hold_out_per_client
from tests.conftest import fl_module, make_trainer
from tests.test_cli import QUICKSTART, QUIET
from tests.test_resume import SmallConvNet, digit_images

LABELS = np.repeat(np.arange(10), 200)


def test_shards_give_each_client_k_classes_disjoint_and_seeded():
    parts = shards_partition(LABELS, 20, 2, np.random.default_rng(3), samples_per_client=60)
    flat = torch.cat(parts)
    assert all(len(p) == 60 for p in parts) and len(torch.unique(flat)) == len(flat)
    classes = [len(np.unique(LABELS[p.numpy()])) for p in parts]
    assert classes == [2] * 20  # exactly k classes, n/k samples of each
    again = shards_partition(LABELS, 20, 2, np.random.default_rng(3), samples_per_client=60)
    assert all(torch.equal(a, b) for a, b in zip(parts, again))


def test_quantity_skew_sizes_are_log_normal_and_cover_the_budget():
    parts = quantity_partition(LABELS, 20, 1.0, np.random.default_rng(0), samples_per_client=50)
    sizes = np.array([len(p) for p in parts])
    flat = torch.cat(parts)
    assert sizes.sum() == 1000 and sizes.min() >= 1 and len(torch.unique(flat)) == len(flat)
    assert sizes.max() > 3 * np.median(sizes)  # skewed, unlike the equal-sized splits
    mild = [len(p) for p in quantity_partition(LABELS, 20, 0.1, np.random.default_rng(0), samples_per_client=50)]
    assert np.std(mild) < np.std(sizes)


def test_held_out_share_is_disjoint_seeded_and_recorded():
    train, test = digit_images()
    dm = FederatedDataModule.from_datasets(train, test, num_clients=8, partition="shards", classes_per_client=2,
                                           val_fraction=0.0, personal_fraction=0.25, samples_per_client=60)
    dm.setup()
    assert dm.settings()["classes_per_client"] == 2 and dm.settings()["personal_fraction"] == 0.25
    plain = FederatedDataModule(num_clients=8).settings()
    assert "classes_per_client" not in plain and "personal_fraction" not in plain  # existing runs' settings as before
    train_idx, held_idx = hold_out_per_client(dm.client_indices, 0.25)  # the same seed: the same split
    for i, idx in enumerate(dm.client_indices):
        n, held = len(idx), dm.personal.num_samples(i)
        assert held == round(0.25 * n) and dm.clients.num_samples(i) == n - held
        assert set(train_idx[i].tolist()).isdisjoint(held_idx[i].tolist())
        assert sorted(train_idx[i].tolist() + held_idx[i].tolist()) == idx.tolist()
        assert torch.equal(dm.personal.of(i)[1], dm.split.train_y[held_idx[i]])
    total = sum(dm.personal.num_samples(i) + dm.clients.num_samples(i) for i in range(8))
    assert total == sum(len(i) for i in dm.client_indices)


def conv_run(rounds, name, algorithm, ckpt_path=None, callbacks=(), table=None, **hp):
    torch.manual_seed(0)
    module = fl_module(SmallConvNet(), algorithm=algorithm, clients_per_round=4, batch_size=16, lr=0.05,
                       personal_eval_every=1, **hp)
    train, test = digit_images()
    data = FederatedDataModule.from_datasets(train, test, num_clients=8, partition="shards", classes_per_client=2,
                                             val_fraction=0.0, personal_fraction=0.2, samples_per_client=60)
    logger = CSVLogger("runs", name=name)
    checkpointing = any(isinstance(cb, ModelCheckpoint) for cb in callbacks)
    trainer = make_trainer(rounds, logger=logger, callbacks=list(callbacks), enable_checkpointing=checkpointing)
    trainer.fit(module, data, ckpt_path=ckpt_path)
    with open(f"{logger.log_dir}/metrics.csv") as f:
        rows = [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(f)]
    if table is not None:  # every client's personal row as this run left it (read before another run writes)
        module.personal_rows = [module.client_state.tables[table].read(i) for i in range(8)]
    return module, rows


@pytest.mark.parametrize("algorithm,table", [("fedper", "personal_part"), ("ditto", "ditto_personal"),
                                             ("fedbn", "personal_part"), ("fedrep", "personal_part"),
                                             ("apfl", "apfl_personal")])
def test_personal_state_survives_kill_and_resume_bit_identically(algorithm, table):
    every = ModelCheckpoint(dirpath=f"ckpts_{algorithm}", filename="{epoch}", save_top_k=-1, every_n_epochs=1)
    full_module, full = conv_run(4, "full", algorithm, callbacks=[every], table=table)
    assert all(row["pval/acc_mean"] for row in full) and float(full[-1]["pval/clients"]) == 8
    torch.manual_seed(1234)
    resumed_module, resumed = conv_run(4, "resumed", algorithm, ckpt_path=f"ckpts_{algorithm}/epoch=1.ckpt",
                                       table=table)
    assert [r["round"] for r in resumed] == ["3.0", "4.0"]
    assert resumed == full[2:]  # pval/* included: every client's personal model as in the uninterrupted run
    assert torch.equal(resumed_module.flat.vector, full_module.flat.vector)
    rows = list(zip(full_module.personal_rows, resumed_module.personal_rows))
    assert all(torch.equal(a, b) for a, b in rows) and any(a.abs().sum() > 0 for a, _ in rows)


def test_personal_parts_are_not_uploaded_and_fedavg_is_evaluated_per_client():
    _, fedavg = conv_run(1, "avg", "fedavg")
    module, fedper = conv_run(1, "per", "fedper")
    d, numel, head = module.flat.num_params, module.flat.numel, 64 * 10 + 10  # parameters, + BN statistics, head
    assert float(fedavg[-1]["comm/upload_d"]) == pytest.approx(numel / d)  # FedAvg sends Δ and the BN statistics
    assert float(fedper[-1]["comm/upload_d"]) == pytest.approx((numel - head) / d)  # all of it but the head
    assert 0 <= float(fedavg[-1]["pval/acc_p10"]) <= float(fedavg[-1]["pval/acc_mean"]) <= 1
    assert os.path.exists("runs/avg/version_0/pval_clients.csv")
    # report: a histogram of the clients' own accuracies, with the counts of pval_clients.csv's last round
    from fl_lightning.runs import report
    from fl_lightning.runs.pval_histogram import counts, write_histogram
    with open("runs/avg/version_0/pval_clients.csv") as f:
        accs = [float(r["acc"]) for r in csv.DictReader(f)]
    assert counts([0.0, 0.05, 0.1, 0.95, 1.0]) == [2, 1, 0, 0, 0, 0, 0, 0, 0, 2]
    written = write_histogram({"fedavg": [[Path("runs/avg/version_0")]]}, Path("hist"))
    assert written == {"fedavg": counts(accs)} and sum(written["fedavg"]) == 8 and os.path.exists("hist_pval_hist.png")
    assert report.main(["runs/avg", "--target", "0.5", "--out", "rep"]) == 0 and os.path.exists("rep_pval_hist.png")


@pytest.mark.parametrize("args,field,fix", [
    (["--data.classes_per_client", "2"], "data.classes_per_client", "needs data.partition shards"),
    (["--data.partition", "quantity", "--data.quantity_sigma", "0"], "data.quantity_sigma", "σ > 0"),
    (["--data.personal_fraction", "1.5"], "data.personal_fraction", "must be in (0, 1)"),
    (["--model.personal_eval_every", "0"], "model.personal_eval_every", "must be ≥ 1 round"),
    (["--model.algorithm", "fedbn"], "model.algorithm", "fedbn keeps normalisation layers local, but MLP has none"),
    (["--model.algorithm", "fedper", "--model.algorithm.personal_layers", "[nope]"],
     "FedPer(personal_layers=...)", "has no module 'nope'"),
    (["--model.algorithm", "fedbcgd_personal", "--model.algorithm.personal_blocks", "[shared, 7]"],
     "FedBCGDPersonal(personal_blocks=...)", "block 7 of a division with 5 blocks"),
    (["--model.algorithm", "fedbcgd_personal", "--model.algorithm.personal_blocks", "[1, 2, 3, 4, 5]"],
     "FedBCGDPersonal(personal_blocks=...)", "all 5 blocks are personal: nothing would be federated"),
    (["--model.algorithm", "fedrep", "--model.network.init_args.hidden", "[]"], "model.algorithm",
     "fedrep keeps ['head'] on each client, but they hold every parameter of MLP: nothing would be federated"),
    (["--model.algorithm", "fedper", "--model.network.init_args.hidden", "[]"], "model.algorithm",
     "fedper keeps ['head'] on each client, but they hold every parameter of MLP"),
    (["--data.partition", "shards"], "data.samples_per_client", "64 samples per client (data.samples_per_client "
     "unset: the 1293 samples over 20 clients) with 2 classes each need more samples of a class than the data has; "
     "set --data.samples_per_client 60 (or less) or lower data.num_clients"),
    (["--model.personal_eval_every", "2"], "model.personal_eval_every", "set data.personal_fraction"),
    (["--model.personal_eval_clients", "5"], "model.personal_eval_clients", "set data.personal_fraction"),
])
def test_bad_personalisation_input_is_one_line(args, field, fix, capsys):
    code = main(["fit", "--config", QUICKSTART, "--trainer.max_epochs", "1", *QUIET, *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and field in err[0] and fix in err[0], err
    assert not os.path.exists("runs")  # refused before any run directory


def test_personal_algorithm_without_held_out_data_says_so_once(capsys):
    code = main(["fit", "--config", QUICKSTART, "--trainer.max_epochs", "1", *QUIET, "--model.algorithm", "fedper",
                 "--model.local_epochs", "1"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert [line for line in out if "pval" in line] == [
        "fl-lightning: fedper keeps a personal model on each client, but no client holds data out: no personal "
        "metric (pval/*) will be logged; set data.personal_fraction (e.g. 0.2) for it"]


class Sampled(FLCallback):
    def __init__(self):
        self.ids = set()

    def configure_round(self, round):
        self.ids |= {task.client_id for task in round.clients}


def test_new_clients_never_train_and_are_evaluated_after_fine_tuning():
    from fl_lightning.personalization.evaluation import new_client_ids

    sampled = Sampled()
    module, rows = conv_run(3, "new", "fedper", callbacks=[sampled], personal_new_clients=2)
    new = new_client_ids(8, 2)
    assert len(new) == 2 and sampled.ids.isdisjoint(new) and len(sampled.ids) > 4  # only the other 6 trained
    assert float(rows[-1]["pval/clients"]) == 6 and float(rows[-1]["pval_new/clients"]) == 2
    # pval_new: x^r fine-tuned for local_epochs on each new client's data, by the evaluation's own fine_tune
    evaluation, = module.round_evaluations
    expected = []
    for cid in new:
        vector = module.global_vector.clone()
        evaluation.fine_tune(vector, cid, 1, None)
        module.flat.load(vector)
        module.flat.net.eval()
        expected.append(evaluation.client_accuracy(cid)[0])
    assert float(rows[-1]["pval_new/acc_mean"]) == pytest.approx(float(np.mean(expected)), abs=1e-12)
    with pytest.raises(FLUserError, match=r"^model.personal_new_clients: 7 clients held out of M=8 leave fewer"):
        conv_run(1, "too_many", "fedavg", personal_new_clients=7)


def glob_one(pattern: str) -> str:
    (path,) = glob.glob(pattern)
    return path


def test_the_documented_shards_example_runs_on_the_quickstart(capsys):
    """docs/personalization.md, "Partitions": the command shown, one round."""
    command = next(line for line in (Path(__file__).resolve().parents[1] / "docs" / "personalization.md").read_text()
                   .splitlines() if line.startswith("fl-lightning fit") and "shards" in line).split()[1:]
    command[command.index("configs/quickstart.yaml")] = QUICKSTART
    assert main([*command, "--trainer.max_epochs", "1", *QUIET]) == 0
    with open(glob_one("runs/quickstart/*/version_0/partition.csv")) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 20 and {r["samples"] for r in rows} == {"60"}
    assert all(sorted(int(v) for k, v in r.items() if k.startswith("class_"))[-3:] == [0, 30, 30] for r in rows)
