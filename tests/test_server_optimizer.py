"""The server step as a torch optimizer: any torch.optim class from the CLI, optimizer state in
checkpoints, and option clashes refused (every preset unchanged bit for bit: test_preset_golden.py)."""
import csv
import glob

import pytest

from fl_lightning.cli import main

QUICKSTART = __import__("pathlib").Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"


def quickstart(algorithm, *extra):
    blocks = ["--model.algorithm.num_blocks", "3", "--model.algorithm.block_division", "balanced"] if "fedbcgd" in algorithm else []
    args = ["fit", "--config", str(QUICKSTART), "--model.algorithm", algorithm, "--trainer.max_epochs", "5",
            "--trainer.enable_progress_bar", "false", "--trainer.logger.init_args.save_dir", "runs",
            "--trainer.logger.init_args.name", algorithm, "--data.val_fraction", "0", *blocks, *extra]
    assert main(args) == 0
    (metrics,) = glob.glob(f"runs/{algorithm}/*/version_0/metrics.csv")  # runs/<name>/<label>/version_0
    with open(metrics) as f:
        return list(csv.DictReader(f))


def test_any_torch_optimizer_from_the_cli(capsys):
    rows = quickstart("fedavg", "--model.server_optimizer", "torch.optim.Adam",
                      "--model.server_optimizer.lr", "0.01")
    assert len(rows) == 5 and float(rows[-1]["val/acc"]) > 0.5


def test_server_lr_and_server_optimizer_clash(capsys):
    code = main(["fit", "--config", str(QUICKSTART), "--model.server_optimizer", "torch.optim.SGD",
                 "--model.server_optimizer.lr", "1.0", "--model.algorithm.server_momentum", "0.7"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "model.server_optimizer" in err[0] and "server_momentum" in err[0]


def test_help_lists_every_algorithm(capsys):
    from fl_lightning.algorithms import REGISTRY

    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name, algorithm in REGISTRY.items():
        assert f"{name}: {' '.join(algorithm.summary.split())}" in text


def test_floating_buffers_are_averaged_never_stepped():
    """FedAdam steps the parameters; BatchNorm statistics take the plain mean of the clients'."""
    import torch
    from torch import nn

    from fl_lightning import FederatedDataModule
    from tests.conftest import fl_module
    from tests.conftest import make_trainer
    from tests.reference import Recorder, data

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 3))
    module = fl_module(net, algorithm="fedadam", clients_per_round=3, batch_size=2, server_lr=0.05)
    d = module.flat.num_params
    before = module.flat.vector.detach().clone()
    recorder = Recorder()
    split, parts = data()
    make_trainer(1, callbacks=[recorder]).fit(module, FederatedDataModule.from_tensors(split, parts))
    changes = torch.stack([rec["local_change"] for rec in recorder.rounds[0]])
    after = torch.cat([p.detach().reshape(-1) for p in net.parameters()] +
                      [b.reshape(-1) for b in (net[1].running_mean, net[1].running_var)])
    torch.testing.assert_close(after[d:], before[d:] + changes[:, d:].mean(0), rtol=0, atol=1e-6)
    assert not torch.allclose(after[:d], before[:d] + changes[:, :d].mean(0), atol=1e-4)  # params: Adam's step
