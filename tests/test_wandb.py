"""W&B offline: real run files, with comm/upload_d as the x-axis of every round metric."""
import csv
import glob
import json
import os
import time

import torch
from pytorch_lightning.loggers import WandbLogger

from fl_lightning import FederatedDataModule
from fl_lightning.models import MLP
from tests.conftest import fl_module, make_trainer
from tests.wandb_records import history_rows, read_records


def test_wandb_offline_run_files():
    assert os.environ["WANDB_MODE"] == "offline"
    torch.manual_seed(0)
    module = fl_module(MLP(64, 10, hidden=[32]), algorithm="fedavgm", clients_per_round=4, batch_size=16,
                             server_momentum=0.5)
    data = FederatedDataModule("digits", num_clients=8)
    logger = WandbLogger(project="fl-test", save_dir=".", offline=True)
    make_trainer(3, logger=logger).fit(module, data)
    files_dir = logger.experiment.dir
    logger.experiment.finish()

    (run_file,) = glob.glob("wandb/offline-run-*/run-*.wandb")
    for _ in range(40):  # wandb-core writes the file from its own process: wait until it holds the run's end
        records = list(read_records(run_file))
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            break
        time.sleep(0.25)
    steps = {r.metric.name or r.metric.glob_name: r.metric.step_metric for r in records
             if r.WhichOneof("record_type") == "metric"}
    for key in ("val/*", "train/*", "lr", "round", "comm/upload_bytes", "comm/download_bytes"):
        assert steps[key] == "comm/upload_d"
    rows = history_rows(records)
    assert [float(r["comm/upload_d"]) for r in rows] == [1.0, 2.0, 3.0]
    assert all({"val/acc", "val/loss", "train/loss", "lr", "round"} <= set(r) for r in rows)
    assert float(rows[0]["comm/upload_bytes"]) == 4 * 4 * module.flat.num_params
    partition = open(os.path.join(files_dir, "partition.csv")).read().splitlines()
    assert partition[0].startswith("client,samples,class_0") and len(partition) == 1 + 8


def wait_for_records(run_dir):
    records = []
    for _ in range(80):  # wandb-core writes the file from its own process: wait until it holds the run's end
        files = glob.glob(f"{run_dir}/run-*.wandb")
        records = list(read_records(files[0])) if files else []
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            return records
        time.sleep(0.25)
    return records


def test_cli_wandb_run_name_group_and_full_config():
    from pathlib import Path

    from fl_lightning.cli import main

    quickstart = str(Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml")
    wandb_args = ["--trainer.logger", "pytorch_lightning.loggers.WandbLogger", "--trainer.logger.project", "t",
                  "--trainer.logger.save_dir", "wb", "--trainer.max_epochs", "1", "--trainer.enable_progress_bar",
                  "false"]
    for seed in ("0", "1"):
        assert main(["fit", "--config", quickstart, *wandb_args, "--seed_everything", seed]) == 0
    runs = sorted(glob.glob("wb/wandb/offline-run-*"))
    assert len(runs) == 2
    names, groups = [], []
    for run_dir in runs:
        records = wait_for_records(run_dir)
        kinds = [r.WhichOneof("record_type") for r in records]
        assert "run" in kinds, (run_dir, os.listdir(run_dir), kinds)
        run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
        names.append(run.display_name)
        groups.append(run.run_group)
        config = {item.key: item.value_json for r in records if r.WhichOneof("record_type") == "config"
                  for item in r.config.update}
        assert {"model", "data", "trainer", "seed_everything"} <= set(config)
        assert json.loads(config["model"])["algorithm"]["class_path"].endswith(".FedAvgM") and json.loads(config["data"])["dirichlet_rho"] == 0.5
        assert names[-1].endswith(f"seed{json.loads(config['seed_everything'])}")  # the run's own seed
        assert os.path.exists(f"{run_dir}/files/config.yaml") and os.path.exists(f"{run_dir}/files/partition.csv")
    assert sorted(names) == ["quickstart-fedavgm-seed0", "quickstart-fedavgm-seed1"]  # dirs sort by time, then id
    assert groups[0] == groups[1] and groups[0].startswith("quickstart-fedavgm-")  # every setting but the seed


def test_wandb_without_api_key_says_offline(monkeypatch, tmp_path, capsys):
    from pathlib import Path

    from fl_lightning.cli import main

    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc
    quickstart = str(Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml")
    code = main(["fit", "--config", quickstart, "--trainer.logger", "pytorch_lightning.loggers.WandbLogger"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "WANDB_MODE=offline" in err[0] and "wandb login" in err[0]
    assert not os.path.exists("wandb") and not os.path.exists("runs")


def test_wandb_run_keeps_metrics_csv_and_plots_every_round_key_against_floats():
    """A W&B-only fit: its run folder <save_dir>/<project>/<id> holds metrics.csv beside config.yaml and
    partition.csv, ``report`` reads it, and every round key is defined by its exact name (after Lightning's
    catch-all "*" → trainer/global_step) with comm/upload_d as its x-axis."""
    from pathlib import Path

    from fl_lightning.cli import main

    quickstart = str(Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml")
    assert main(["fit", "--config", quickstart, "--trainer.logger", "pytorch_lightning.loggers.WandbLogger",
                 "--trainer.logger.project", "t", "--trainer.logger.save_dir", "wb", "--trainer.max_epochs", "2",
                 "--trainer.enable_progress_bar", "false", "--model.test_every_n_rounds", "1"]) == 0
    (folder,) = [p for p in Path("wb/t").iterdir()]
    assert {"metrics.csv", "config.yaml", "partition.csv"} <= {p.name for p in folder.iterdir()}
    rows = list(csv.DictReader(open(folder / "metrics.csv")))
    assert [(r["round"], r["comm/upload_d"], r["epoch"], r["step"]) for r in rows] == [
        ("1.0", "1.0", "0", "0"), ("2.0", "2.0", "1", "1")]
    assert all(float(r["val/acc"]) > 0 and float(r["test/acc"]) > 0 for r in rows)

    (run_dir,) = glob.glob("wb/wandb/offline-run-*")
    records = [r for r in wait_for_records(run_dir) if r.WhichOneof("record_type") == "metric"]
    order = [r.metric.name or r.metric.glob_name for r in records]
    steps = {r.metric.name: r.metric.step_metric for r in records if r.metric.name}
    for key in ("val/acc", "val/loss", "test/acc", "test/loss", "train/loss", "round", "lr", "time/round_s"):
        assert steps[key] == "comm/upload_d" and order.index(key) > order.index("*"), key
    history = history_rows(wait_for_records(run_dir))
    assert [float(r["val/acc"]) for r in history] == [float(r["val/acc"]) for r in rows]  # the same numbers

    assert main(["report", "wb/t", "--target", "0.05", "--out", "table"]) == 0
    table = open("table.csv").read().splitlines()
    assert len(table) == 2 and table[1].startswith("t,1,0.3472")  # one group: the run, one seed


def test_metrics_csv_without_csv_logger_replaces_rows_logged_again_after_a_resume(tmp_path):
    """keep_metrics_csv: a key seen late widens the header; a round logged again (a resumed fit) replaces its row
    and drops the later ones."""
    from pytorch_lightning.loggers import Logger

    from fl_lightning.runs.files import keep_metrics_csv

    class FolderLogger(Logger):  # any logger but the CSVLogger: its run folder <save_dir>/<name>/version_N
        name, version, save_dir = "other", 0, str(tmp_path)
        experiment = None

        def log_hyperparams(self, params):
            pass

        def log_metrics(self, metrics, step=None):
            pass

    class Loggers:
        loggers = [FolderLogger()]

    for row in [{"round": 1, "val/acc": 0.5}, {"round": 2, "val/acc": 0.6, "test/acc": 0.7},
                {"round": 3, "val/acc": 0.8}, {"round": 2, "val/acc": 0.65}]:
        keep_metrics_csv(Loggers(), row, int(row["round"]) - 1)
    text = open(tmp_path / "other" / "version_0" / "metrics.csv").read().splitlines()
    assert text == ["epoch,round,step,test/acc,val/acc", "0,1.0,0,,0.5", "1,2.0,1,,0.65"]
