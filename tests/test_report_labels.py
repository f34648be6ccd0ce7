"""report's labels and cells: δ in scientific notation, a DP group named by the options that act and its ε, the
non-DP group by what it lacks; partition.csv records the held-out split, from which the label prior is re-made."""
import csv

import numpy as np
import pytest

from fl_lightning.cli import main
from fl_lightning.runs.report import fmt, group_runs
from tests.test_cli import QUICKSTART, QUIET

FIT = ["fit", "--config", QUICKSTART, *QUIET, "--trainer.max_epochs", "1"]


def test_small_values_print_in_scientific_notation():
    assert [fmt(1e-5), fmt(0.0), fmt(0.3472), fmt(0.00012), fmt(12.5)] == ["1e-05", "0.0000", "0.3472", "0.00012",
                                                                           "12.5000"]


def test_dp_and_plain_groups_are_labelled_by_what_acts_and_the_dp_one_by_its_epsilon(capsys):
    assert main([*FIT, "--model.privacy.noise_multiplier", "2"]) == 0
    assert main([*FIT]) == 0
    capsys.readouterr()
    assert main(["report", "runs", "--target", "0.05", "--out", "rep"]) == 0
    rows = {r["group"]: r for r in csv.DictReader(open("rep.csv"))}
    (dp,) = [label for label in rows if "ε=" in label]
    epsilon = float(rows[dp]["final_epsilon"])
    assert dp == f"accountant=rdp, clip=1.0, mechanism=gaussian, noise_multiplier=2.0, sampling=fixed, ε={epsilon:.3g}"
    assert "clip_lr" not in dp and "count_noise" not in dp  # adaptive clipping's options, without it: no effect
    assert set(rows) == {dp, "privacy=none"}
    markdown = open("rep.md").read()
    assert f"| {epsilon:.4f} | 1e-05 | fixed |" in markdown  # δ = 1e-5, not 0.0000
    assert f"& {epsilon:.4f} & 1e-05 & fixed &" in open("rep.tex").read()


def test_group_labels_leave_out_adaptive_clipping_options_without_it():
    settings = {"a": {"model.privacy.clip": 1.0, "model.privacy.clip_lr": 0.2, "model.privacy.noise_multiplier": 1.0},
                "b": {"model.privacy.clip": 1.0, "model.privacy.clip_lr": 0.2, "model.privacy.noise_multiplier": 1.0,
                      "model.privacy.adaptive_quantile": 0.5},
                "c": {}}
    from pathlib import Path
    groups = group_runs({Path("runs/x") / name: s for name, s in settings.items()})
    assert list(groups) == ["clip=1.0, noise_multiplier=1.0", "adaptive_quantile=0.5, clip=1.0, clip_lr=0.2, "
                            "noise_multiplier=1.0", "privacy=none"]


def test_partition_csv_records_the_held_out_split_and_the_label_prior_is_re_made_from_it():
    assert main([*FIT, "--data.personal_fraction", "0.25"]) == 0
    assert main(["report", "runs", "--target", "0.05", "--out", "rep"]) == 0
    (row,) = csv.DictReader(open("rep.csv"))
    import glob
    (path,) = glob.glob("runs/quickstart/*/version_0/partition.csv")
    clients = list(csv.DictReader(open(path)))
    accs = []
    for c in clients:
        whole = np.array([int(c[f"class_{k}"]) for k in range(10)])
        held = np.array([int(c[f"held_class_{k}"]) for k in range(10)])
        assert held.sum() == int(c["held_out"]) and (held <= whole).all()
        if held.sum():
            accs.append(held[int(np.argmax(whole - held))] / held.sum())  # the training share's majority label
    assert float(row["label_prior_acc_mean"]) == pytest.approx(np.mean(accs), abs=1e-12)
