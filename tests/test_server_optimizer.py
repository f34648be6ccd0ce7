"""The server step as a torch optimizer: existing presets unchanged bit for bit, any torch.optim
class from the CLI, optimizer state in checkpoints, and option clashes refused."""
import csv

import pytest

from fl_lightning.cli import main

# Recorded on main before the server step became an optimizer (commit 53500f3):
# `fl-lightning fit --config configs/quickstart.yaml --model.algorithm A --trainer.max_epochs 5`
# (+ `--model.num_blocks 3 --model.block_division balanced` for the block algorithms; today with
# `--data.val_fraction 0`, which validates on the test set as main did);
# final row of metrics.csv: train/loss, val/acc, val/loss, exactly as written.
RECORDED = {
    "fedavg": ("1.247252106666565", "0.625", "1.5981665717230902"),
    "fedavgm": ("0.9860197901725769", "0.7138888888888889", "1.1516072591145834"),
    "fedbcgd": ("1.008270263671875", "0.7027777777777777", "1.1798088073730468"),
    "fedbcgd_freezing": ("1.1311932802200317", "0.6444444444444445", "1.2692996554904514"),
    "scaffold": ("1.4175159931182861", "0.575", "1.5754852294921875"),
}
QUICKSTART = __import__("pathlib").Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"


def quickstart(algorithm, *extra):
    blocks = ["--model.num_blocks", "3", "--model.block_division", "balanced"] if "fedbcgd" in algorithm else []
    args = ["fit", "--config", str(QUICKSTART), "--model.algorithm", algorithm, "--trainer.max_epochs", "5",
            "--trainer.enable_progress_bar", "false", "--trainer.logger.init_args.save_dir", "runs",
            "--trainer.logger.init_args.name", algorithm, "--data.val_fraction", "0", *blocks, *extra]
    assert main(args) == 0
    with open(f"runs/{algorithm}/version_0/metrics.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("algorithm", list(RECORDED))
def test_presets_bit_identical_to_recorded_main(algorithm):
    rows = quickstart(algorithm)
    assert [r["step"] for r in rows] == ["0", "1", "2", "3", "4"]  # global_step counts rounds
    assert (rows[-1]["train/loss"], rows[-1]["val/acc"], rows[-1]["val/loss"]) == RECORDED[algorithm]


def test_any_torch_optimizer_from_the_cli(capsys):
    rows = quickstart("fedavg", "--model.server_momentum", "null", "--model.server_optimizer", "torch.optim.Adam",
                      "--model.server_optimizer.lr", "0.01")
    assert len(rows) == 5 and float(rows[-1]["val/acc"]) > 0.5


def test_server_lr_and_server_optimizer_clash(capsys):
    code = main(["fit", "--config", str(QUICKSTART), "--model.server_optimizer", "torch.optim.SGD",
                 "--model.server_optimizer.lr", "1.0", "--model.server_lr", "0.5"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "model.server_optimizer" in err[0] and "server_lr" in err[0]


def test_help_lists_every_algorithm(capsys):
    from fl_lightning.algorithms import ALGORITHMS

    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name, algorithm in ALGORITHMS.items():
        assert f"{name}: {' '.join(algorithm.summary.split())}" in text


def test_floating_buffers_are_averaged_never_stepped():
    """FedAdam steps the parameters; BatchNorm statistics take the plain mean of the clients'."""
    import torch
    from torch import nn

    from fl_lightning import FederatedDataModule, FederatedModule
    from tests.conftest import make_trainer
    from tests.reference import Recorder, data

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 3))
    module = FederatedModule(net, algorithm="fedadam", clients_per_round=3, batch_size=2, server_lr=0.05)
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
