"""W&B offline: real run files, with comm/upload_d as the x-axis of every round metric."""
import glob
import os
import time

import torch
from pytorch_lightning.loggers import WandbLogger

from fl_lightning import FederatedDataModule, FederatedModule
from fl_lightning.models import MLP
from tests.conftest import make_trainer
from tests.wandb_records import history_rows, read_records


def test_wandb_offline_run_files():
    assert os.environ["WANDB_MODE"] == "offline"
    torch.manual_seed(0)
    module = FederatedModule(MLP(64, 10, hidden=[32]), algorithm="fedavgm", clients_per_round=4, batch_size=16,
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
