"""Attacked and robust runs as a user meets them (docs/robustness.md): each attack resumes bit for bit with the command
that started it, written in any form; one setting is one run (id, label, hparams, config.yaml, report); what cannot
mean anything is one line before any run file; a group that drops leave too small keeps its coordinates; clients.csv
is the audit trail, the same after a resume."""
import csv
import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest
import pytorch_lightning as pl
import yaml

from fl_lightning import FederatedDataModule, FederatedModule
from fl_lightning.cli import main
from fl_lightning.errors import ConfigError
from fl_lightning.runs.identity import read_run_id
from tests.conftest import make_trainer
from tests.lightning_fixtures import make_regressor, regression_data

QUICKSTART = str(Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml")
SMALL = ["--config", QUICKSTART, "--trainer.enable_progress_bar", "false", "--model.network.init_args.hidden",
         "[16]", "--data.num_clients", "10", "--model.clients_per_round", "5", "--model.batch_size", "20"]
CLI = str(Path(sys.executable).with_name("fl-lightning"))
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}  # the same thread count in every process: bit-identical sums


def rows(name: str) -> list[dict]:
    (path,) = glob.glob(f"runs/{name}/*/version_0/metrics.csv")
    with open(path) as f:
        return [{k: v for k, v in r.items() if v and not k.startswith("time/") and not k.startswith("test/")}
                for r in csv.DictReader(f)]


def clients_csv(name: str) -> str:
    (path,) = glob.glob(f"runs/{name}/*/version_0/clients.csv")
    return Path(path).read_text()


def fit_in_process(name: str, rounds: int, *part, ckpt: bool = False) -> int:
    args = ["fit", *SMALL, "--trainer.max_epochs", str(rounds), "--trainer.logger.init_args.name", name, *part]
    return main(args + (["--ckpt_path", "last"] if ckpt else []))


def fit_process(name: str, rounds: int, *part, ckpt: bool = False) -> subprocess.CompletedProcess:
    args = [CLI, "fit", *SMALL, "--trainer.max_epochs", str(rounds), "--trainer.logger.init_args.name", name, *part]
    return subprocess.run(args + (["--ckpt_path", "last"] if ckpt else []), env=ENV, capture_output=True, text=True)


SIGN_FLIP = ["--model.attack", "sign_flip", "--model.attack.fraction", "0.3"]
SIGN_FLIP_JSON = ["--model.attack", '{"class_path": "sign_flip", "init_args": {"fraction": 0.3}}']


@pytest.mark.parametrize("started, resumed", [
    (["--model.aggregator", "median", *SIGN_FLIP], ["--model.aggregator", "median", *SIGN_FLIP_JSON]),
])
def test_an_attacked_run_killed_after_two_rounds_resumes_with_its_own_command_in_processes(started, resumed):
    """The issue's runs, in real processes: rounds 3–4 of the resumed run, and its clients.csv, equal an uninterrupted
    run's; the resume is written another way (JSON, a default spelled out) and finds the same run."""
    whole = fit_process("whole", 4, *started)
    assert whole.returncode == 0, whole.stderr
    first = fit_process("piece", 2, *started)
    assert first.returncode == 0, first.stderr
    second = fit_process("piece", 4, *resumed, ckpt=True)
    assert second.returncode == 0, second.stderr
    assert "resuming from runs/piece/" in second.stdout
    assert rows("piece") == rows("whole") and len(rows("whole")) == 4
    assert clients_csv("piece") == clients_csv("whole")
    assert len(glob.glob("runs/piece/*/version_*")) == 1


@pytest.mark.parametrize("part", [
    ["--model.aggregator", "krum", "--model.attack", "scale", "--model.attack.fraction", "0.2"],
    ["--model.aggregator", "trimmed_mean", "--model.aggregator.beta", "0.2", "--model.attack", "gaussian",
     "--model.attack.std", "0.5", "--model.attack.fraction", "0.2"],
    ["--model.aggregator", "centered_clip", "--model.aggregator.momentum", "0.9", "--model.aggregator.bucket", "2",
     "--model.attack", "alie", "--model.attack.fraction", "0.2"],
    ["--model.aggregator", "norm_bound", "--model.attack", "ipm", "--model.attack.clients", "[1, 4]"],
    ["--model.aggregator", "multi_krum", "--model.attack", "label_flip", "--model.attack.fraction", "0.2"],
])
def test_each_attack_and_stateful_rule_resumes_bit_for_bit(part):
    assert fit_in_process("whole", 4, *part) == 0
    assert fit_in_process("piece", 2, *part) == 0
    assert fit_in_process("piece", 4, *part, ckpt=True) == 0
    assert rows("piece") == rows("whole")
    assert clients_csv("piece") == clients_csv("whole")


def test_one_setting_is_one_run_however_it_is_written(capsys):
    """The default mean and an explicit mean, an attack by name and options or as JSON: one id, one label, one
    folder that --ckpt_path last finds, one group in report; hparams.yaml and config.yaml hold the same record."""
    assert fit_in_process("same", 1, *SIGN_FLIP) == 0
    assert fit_in_process("same", 2, "--model.aggregator", "mean", *SIGN_FLIP_JSON, ckpt=True) == 0
    assert fit_in_process("same", 1) == 0
    assert fit_in_process("same", 2, "--model.aggregator", "mean", ckpt=True) == 0
    folders = sorted(glob.glob("runs/same/*/version_*"),  # the attacked run first (glob's order is the disk's)
                     key=lambda f: "attack: null" in open(f"{f}/config.yaml").read())
    assert len(folders) == 2 and not any("aggregator" in f for f in folders)  # the explicit mean names nothing
    attacked = Path(folders[0])
    assert "attack: null" in Path(folders[1], "config.yaml").read_text()
    config = yaml.safe_load((attacked / "config.yaml").read_text())
    hparams = yaml.safe_load((attacked / "hparams.yaml").read_text())
    record = {"class_path": "fl_lightning.attacks.sign_flip.SignFlip", "init_args": {"fraction": 0.3, "factor": 1.0}}
    assert config["model"]["attack"] == hparams["attack"] == record
    assert config["model"]["aggregator"] is None and hparams["aggregator"] is None
    assert read_run_id(attacked / "config.yaml") != read_run_id(Path(folders[1]) / "config.yaml")
    capsys.readouterr()
    assert main(["report", "runs/same", "--target", "0.1", "--out", "table"]) == 0
    assert "2 runs in 2 groups" in capsys.readouterr().out


def refused(name: str, *part) -> str:
    done = fit_process(name, 2, *part)
    assert done.returncode == 2 and not os.path.exists(f"runs/{name}"), (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "error" in line]  # beside Lightning's own start lines
    return line


def test_what_cannot_mean_anything_is_one_line_before_any_run_file(capsys):
    assert refused("zero", "--model.attack", "sign_flip", "--model.attack.fraction", "0") == (
        "fl-lightning: error: model.attack.fraction: got 0; needs a fraction in (0, 1]; 0 is no attack: drop "
        "--model.attack")
    assert refused("dropout", "--model.aggregator", "krum", "--model.clients_per_round", "10",
                   "--model.client_dropout", "0.6") == (
        "fl-lightning: error: model.aggregator: krum(f=1) needs at least 5 inputs per group, but with "
        "model.client_dropout 0.6 a round of S=10 uploads expects 4 uploads; lower model.client_dropout or raise "
        "model.clients_per_round")
    capsys.readouterr()
    assert fit_in_process("outside", 1, "--model.attack", "sign_flip", "--model.attack.clients", "[3, 12]") == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "fl-lightning: error: model.attack.clients: ids [12] are not clients 0..9; name clients of the population")
    assert fit_in_process("rounds_to_none", 1, "--model.attack", "sign_flip", "--model.attack.fraction", "0.04") == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "fl-lightning: error: model.attack.fraction: 0.04 of 10 clients rounds to no malicious client, so no attack; "
        "raise it to at least 0.05 or drop --model.attack")
    assert not os.path.exists("runs")


def test_label_flip_on_a_regression_task_is_refused_before_any_run_file():
    train, test = regression_data()
    module = FederatedModule(make_regressor(pl)(), clients_per_round=4, batch_size=25,
                             attack={"class_path": "label_flip", "init_args": {"fraction": 0.25}})
    data = FederatedDataModule.from_datasets(train, test, num_clients=8, partition="iid")
    logger = pl.loggers.CSVLogger("runs", name="regression")
    with pytest.raises(ConfigError, match=r"^model.attack: label_flip relabels classes, but this task's targets are "
                                          r"not class labels"):
        make_trainer(2, logger=logger).fit(module, data)
    assert [files for _, _, files in os.walk("runs") if files] == []  # (Lightning's empty version folder only)


def test_a_block_that_drops_leave_below_krums_minimum_keeps_its_coordinates_and_clients_csv_says_why():
    """FedBCGD N = 2, S = 14, Krum f = 1 (5 per block), 20 % dropout: expected 5.6 per block, served; in a round
    where a block's reports fall below 5 the block is skipped: skipped_groups counts exactly those rounds' blocks,
    as clients.csv's uploads per block show, and the run goes on to its last round."""
    assert fit_in_process("drops", 12, "--model.algorithm", "fedbcgd", "--model.algorithm.num_blocks", "2",
                          "--model.algorithm.block_division", "balanced", "--data.num_clients", "20",
                          "--model.clients_per_round", "14", "--model.client_dropout", "0.2",
                          "--model.aggregator", "krum") == 0
    per_round = {}
    for row in csv.DictReader(clients_csv("drops").splitlines()):
        counts = per_round.setdefault(int(row["round"]), {"0": 0, "1": 0, "shared": 0})
        for group in filter(None, row["uploaded"].split("+")):
            counts[group] += 1
    skipped = [float(r["aggregation/skipped_groups"]) for r in rows("drops")]
    expected = [float(sum(n < 5 for n in per_round[r].values())) for r in sorted(per_round)]
    assert len(skipped) == 12 and skipped == expected and sum(expected) > 0


def test_the_docs_own_rule_runs_by_class_path_and_mistyped_options_name_the_part(tmp_path, monkeypatch, capsys):
    """docs/robustness.md's GeometricMedian, saved as my_rules.py and given by class path, runs with its own option;
    its value at one group equals Weiszfeld's fixed point by hand. Mistyped options of a part are one line each."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "robustness.md").read_text()
    code = page.split("### A rule of your own", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "my_rules.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    from my_rules import GeometricMedian

    import torch
    x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [100.0, 100.0]])
    z = GeometricMedian(iterations=200).aggregate(x, torch.ones(4))
    assert float(((x - z) / (x - z).norm(dim=1, keepdim=True)).sum(0).norm()) < 1e-3  # Σ unit vectors = 0
    assert fit_in_process("own", 2, "--model.aggregator", "my_rules.GeometricMedian", "--model.aggregator.iterations",
                          "5", "--model.attack", "sign_flip") == 0
    config = yaml.safe_load(Path(glob.glob("runs/own/*/version_0/config.yaml")[0]).read_text())
    assert config["model"]["aggregator"] == {"class_path": "my_rules.GeometricMedian", "init_args": {"iterations": 5}}
    assert "aggregator geometric_median(iterations=5)" in capsys.readouterr().out
    for args, line in [
        (["--model.aggregator", "trimmed_mean", "--model.aggregator.betta", "0.2"],
         "model.aggregator.betta: trimmed_mean has no option 'betta'; did you mean beta? its options: beta, bucket, "
         "momentum"),
        (["--model.attack", "ipm", "--model.attack.epsilon", "abc"],
         "model.attack.epsilon: ipm's epsilon takes a number, got 'abc'"),
        (["--model.attack", "alie", "--model.attack.epsilon", "1"],
         "model.attack.epsilon: alie has no option 'epsilon'; its options: fraction, clients, z"),
        (["--model.aggregator", "medain"], "model.aggregator: unknown aggregator 'medain'; did you mean median? "
         "choose one of mean, median, trimmed_mean, krum, multi_krum, bulyan, centered_clip, norm_bound, or give a "
         "class path (my_package.module.MyClass)"),
        (["--model.aggregator", "my_rules.Nothing"], "model.aggregator: cannot import 'my_rules.Nothing' as an "
         "aggregator: give an aggregator name (mean, median, trimmed_mean, krum, multi_krum, bulyan, centered_clip, "
         "norm_bound) or the class path of a subclass of fl_lightning.aggregation.base.Aggregator"),
    ]:
        assert fit_in_process("typo", 1, *args) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == f"fl-lightning: error: {line}"
    assert not os.path.exists("runs/typo")
