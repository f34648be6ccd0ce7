"""The `fl-lightning` command: end to end, and one clear line for every bad input."""
import csv
import glob
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from fl_lightning.cli import main
from tests.test_images import make_folder

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")
FL = str(Path(sys.executable).parent / "fl-lightning")
QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def test_fit_then_validate_end_to_end():
    fit = subprocess.run([FL, "fit", "--config", QUICKSTART, "--trainer.max_epochs", "3", *QUIET],
                         capture_output=True, text=True, timeout=300)
    assert fit.returncode == 0, fit.stderr[-2000:]
    summary = fit.stdout.strip().splitlines()[-1]
    assert summary.startswith("fl-lightning: 3 rounds, final val/acc ") and "comm/upload_d 3.00" in summary
    run_dir = Path(summary.split("run dir ")[1])
    assert run_dir == Path.cwd() / "runs" / "quickstart" / "fedavgm,seed=0" / "version_0"  # the run says what it is
    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))
    assert [r["round"] for r in rows] == ["1.0", "2.0", "3.0"]
    for key in ("val/acc", "val/loss", "train/loss", "lr", "comm/upload_d", "comm/upload_bytes", "comm/download_bytes"):
        assert rows[-1][key] != ""
    assert (run_dir / "config.yaml").exists() and (run_dir / "partition.csv").exists()
    (ckpt,) = glob.glob(str(run_dir / "checkpoints" / "*.ckpt"))

    val = subprocess.run([FL, "validate", "--config", QUICKSTART, "--ckpt_path", ckpt, *QUIET],
                         capture_output=True, text=True, timeout=300)
    assert val.returncode == 0, val.stderr[-2000:]
    assert f"{float(rows[-1]['val/acc']):.4f}"[:5] in val.stdout  # the saved global model, re-evaluated


def test_print_config_and_dotted_overrides(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", QUICKSTART, "--model.clients_per_round", "7", "--data.num_clients", "9",
              "--seed_everything", "3", "--print_config"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "clients_per_round: 7" in out and "num_clients: 9" in out and "seed_everything: 3" in out
    assert "class_path: fl_lightning.algorithms.fedavg.FedAvgM" in out and "server_momentum: 0.5" in out


BAD_INPUTS = [
    (["--model.clients_per_round", "21"], "model.clients_per_round", "S=21 exceeds data.num_clients M=20"),
    (["--model.clients_per_round", "0"], "model.clients_per_round", "must be ≥ 1"),
    (["--model.algorithm", "fedfoo"], "model.algorithm", "choose one of fedavg, fedavgm"),
    (["--data.dataset", "imagenet9"], "data.dataset", "choose one of"),
    (["--model.network.class_path", "fl_lightning.models.NoSuchNet"], "model.network", "NoSuchNet"),
    (["--model.network.init_args.num_classes", "7"], "model.network", "returned (2, 7), but val/acc needs class logits (batch, 10)"),
    (["--data.dirichlet_rho", "0"], "data.dirichlet_rho", "must be > 0"),
    (["--data.dirichlet_rho", "-0.5"], "data.dirichlet_rho", "must be > 0"),
    (["--model.lr", "0"], "model.lr", "must be > 0"),
    (["--model.lr", "-0.1"], "model.lr", "must be > 0"),
    (["--data.dataset", "mnist", "--data.root", "nowhere"], "data.root", "set data.download=true"),
    (["--ckpt_path", "missing.ckpt"], "ckpt_path", "'missing.ckpt' is not a readable checkpoint"),
    (["--ckpt_path", "garbage.ckpt"], "ckpt_path", "'garbage.ckpt' is not a readable checkpoint"),
    (["--ckpt_path", "empty.ckpt"], "ckpt_path", "'empty.ckpt' is not a readable checkpoint (the file is empty)"),
    (["--ckpt_path", "truncated.ckpt"], "ckpt_path", "'truncated.ckpt' is not a readable checkpoint"),
    (["--config", "broken.yaml"], "--config", "broken.yaml, line 3, column 1: YAML syntax error"),
    (["--config", "absent.yaml"], "--config", "absent.yaml: no such file"),
    (["--model.algorithm", "fedbcgd", "--model.algorithm.num_blocks", "3", "--model.algorithm.block_division",
      "balanced", "--model.clients_per_round", "2"], "model.clients_per_round", "S=2 < N=3 blocks"),
    (["--model.algorithm", "fedavg", "--model.algorithm.mu", "0.5"], "model.algorithm.mu",
     "FedAvg has no option 'mu'; it is an option of fedprox"),
    (["--model.algorithm.mu", "abc", "--model.algorithm", "fedprox"], "model.algorithm.mu",
     "got 'abc'; FedProx's mu takes a number"),
    (["--model.algorithm", "fedpaq", "--model.compression.k", "5"], "model.compression.k",
     "QSGD has no option 'k'; it is an option of topk, randk"),
    (["--model.algorithm", "no_module.Algo"], "model.algorithm", "cannot import 'no_module.Algo' (No module named"),
    (["--model.algorithm", "fedprox", "--model.algorithm.mu", "-1"], "FedProx(mu=...)", "must be ≥ 0, got -1"),
    (["--model.fedprox_mu", "0.5"], "--model.fedprox_mu", "moved to --model.algorithm fedprox --model.algorithm.mu V"),
    (["--model.bogus", "1"], "--model.bogus", "no such option"),
    (["--trainer.max_epochs", "0"], "trainer.max_epochs", "is 0: a fit needs at least one round"),
    (["--model.target_accuracy", "90"], "model.target_accuracy", "a fraction in (0, 1], got 90; write 0.9 for 90 %"),
    (["--model.network.init_args.in_features", "784"], "model.network",  # a size given explicitly is kept
     "MLP.forward(x) on the batch's first element (x: digits inputs of shape (1, 8, 8)) for val/acc and it failed: mat1 and mat2 shapes cannot be multiplied (2x64 and 784x200); set --model.network.init_args.in_features 64"),
    *([(["--trainer.logger", "pytorch_lightning.loggers.TensorBoardLogger", "--trainer.logger.save_dir", "tb"],
        "trainer.logger", "TensorBoardLogger needs the tensorboard package")]
      if not any(importlib.util.find_spec(m) for m in ("tensorboard", "tensorboardX")) else []),
    (["--trainer.max_epoch", "1"], "--trainer.max_epoch", "did you mean --trainer.max_epochs?"),
]


@pytest.mark.parametrize("args,field,fix", BAD_INPUTS, ids=[" ".join(a) for a, _, _ in BAD_INPUTS])
def test_bad_input_is_one_line_and_nothing_written(args, field, fix, capsys):
    Path("garbage.ckpt").write_text("not a checkpoint")
    Path("empty.ckpt").write_bytes(b"")
    torch.save({"state_dict": {"w": torch.zeros(1000)}}, "whole.ckpt")
    Path("truncated.ckpt").write_bytes(Path("whole.ckpt").read_bytes()[:900])
    Path("broken.yaml").write_text("model:\n  algorithm: [fedavg\n")
    code = main(["fit", "--config", QUICKSTART, *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("fl-lightning: error: "), err
    assert field in err[0] and fix in err[0]
    assert not os.path.exists("runs")  # nothing half-written


def test_built_in_networks_take_their_sizes_from_the_data(tmp_path, capsys):
    """quickstart's MLP leaves its sizes unset: an image folder of 8×8 RGB pets in 3 classes needs
    no network option, and config.yaml records what the data gave (3·8·8 = 192 inputs, 3 classes)."""
    make_folder(tmp_path / "pets")
    args = ["fit", "--config", QUICKSTART, "--trainer.max_epochs", "1", "--data.dataset", "imagefolder",
            "--data.root", str(tmp_path / "pets"), "--data.num_clients", "3", "--model.clients_per_round", "3"]
    assert main(args) == 0
    (config,) = glob.glob("runs/quickstart/*/version_0/config.yaml")
    network = yaml.safe_load(Path(config).read_text())["model"]["network"]["init_args"]
    assert (network["in_features"], network["num_classes"]) == (192, 3)
    assert main([*args, "--model.network", "fl_lightning.models.LeNet5"]) == 2  # 8 pixels: too small for LeNet-5
    err = capsys.readouterr().err
    assert "model.network: fl-lightning calls LeNet5.forward(x) on the batch's first element (x: imagefolder inputs " \
        "of shape (3, 8, 8))" in err and "validation_step logs its own metrics" in err and "set the network's input size" not in err


def test_resume_with_another_network_is_one_line(capsys):
    assert main(["fit", "--config", QUICKSTART, "--trainer.max_epochs", "1", *QUIET]) == 0
    (ckpt,) = glob.glob("runs/quickstart/fedavgm,seed=0/version_0/checkpoints/*.ckpt")
    capsys.readouterr()
    code = main(["fit", "--config", QUICKSTART, "--trainer.max_epochs", "2", "--ckpt_path", ckpt,
                 "--model.network.init_args.hidden", "[100, 200]", *QUIET])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0] == ("fl-lightning: error: ckpt_path: was written by a different network (net.features.1.bias: (200,) "
                      "in the checkpoint, (100,) now); resume with the model.network it was trained with")
    assert not os.path.exists("runs/quickstart/fedavgm,seed=0/version_1")


def test_resume_refuses_changed_algorithm_options_and_takes_the_sound_ones(capsys):
    assert main(["fit", "--config", QUICKSTART, "--trainer.max_epochs", "2", *QUIET]) == 0
    (ckpt,) = glob.glob("runs/quickstart/fedavgm,seed=0/version_0/checkpoints/*.ckpt")
    capsys.readouterr()
    code = main(["fit", "--config", QUICKSTART, "--trainer.max_epochs", "4", "--ckpt_path", ckpt, "--model.lr", "0.05",
                 *QUIET])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["fl-lightning: error: model.lr: is 0.05 now but 0.1 in the checkpoint; resume with "
                                 "0.1, or start a new run without ckpt_path"]
    assert not os.path.exists("runs/quickstart/fedavgm,seed=0/version_1")
    code = main(["fit", "--config", QUICKSTART, "--ckpt_path", ckpt, "--data.dirichlet_rho", "0.1", *QUIET])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["fl-lightning: error: data.dirichlet_rho: is 0.1 now but 0.5 in the checkpoint; "
                                 "resume with 0.5, or start a new run without ckpt_path"]
    code = main(["fit", "--config", QUICKSTART, "--ckpt_path", ckpt, "--seed_everything", "7", *QUIET])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["fl-lightning: error: seed_everything: is 7 now but 0 in the checkpoint; resume "
                                 "with 0, or start a new run without ckpt_path"]
    # max_epochs (trainer) and the upload budget (a stopping rule) take effect
    assert main(["fit", "--config", QUICKSTART, "--trainer.max_epochs", "6", "--ckpt_path", ckpt,
                 "--model.max_upload_d", "3.5", *QUIET]) == 0
    rows = list(csv.DictReader(open("runs/quickstart/fedavgm,seed=0/version_0/metrics.csv")))  # in its own folder
    assert [r["round"] for r in rows] == ["1.0", "2.0", "3.0", "4.0"]  # resumed after round 2, stopped by the budget
    assert not os.path.exists("runs/quickstart/fedavgm,seed=0/version_1")
    code = main(["fit", "--config", QUICKSTART, "--trainer.max_epochs", "1", "--ckpt_path", ckpt, *QUIET])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["fl-lightning: error: trainer.max_epochs: is 1 but the checkpoint has done 2 rounds; "
                                 "resume with trainer.max_epochs > 2"]


class RunsCode:
    """A pickled object that would run code when unpickled."""

    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_checkpoint_with_code_is_refused_without_running_it(capsys):
    torch.save({"state_dict": {}, "payload": RunsCode()}, "evil.ckpt")
    code = main(["fit", "--config", QUICKSTART, "--ckpt_path", "evil.ckpt", *QUIET])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "'evil.ckpt' carries pickled Python objects that could run code" in err[0]
    assert not os.path.exists("pwned") and not os.path.exists("runs")


def test_nan_stops_with_the_round(capsys):
    code = main(["fit", "--config", QUICKSTART, "--model.lr", "1e30", *QUIET])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("fl-lightning: error: round 1: ") and "NaN/inf" in err[-1]


@pytest.mark.parametrize("options, message", [
    (["--model.eval_every_d", "1", "--trainer.check_val_every_n_epoch", "2"],
     "model.eval_every_d: picks the rounds to evaluate itself: set trainer.check_val_every_n_epoch 1"),
    (["--model.client_dropout", "1.5"], "model.client_dropout: must be in [0, 1), got 1.5"),
    (["--model.compression", "top-k"], "model.compression: unknown codec 'top-k'; choose one of topk, randk, qsgd, sign, eden, powersgd, none"),
    (["--trainer.strategy", "dpp", "--trainer.devices", "2"], "trainer: You selected an invalid strategy name: "
     "`strategy='dpp'`. It must be either a string or an instance of `pytorch_lightning.strategies.Strategy`. Example "
     "choices: auto, ddp, ddp_spawn, deepspeed, ... Find a complete list of options in our documentation at "
     "https://lightning.ai"),
    pytest.param(["--trainer.strategy", "ddp", "--trainer.accelerator", "gpu"], "trainer: No supported gpu backend "
                 "found!", marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")),
])
def test_issue_9_to_12_options_fail_in_one_line_before_any_run_directory(capsys, options, message):
    code = main(["fit", "--config", QUICKSTART, *options, *QUIET])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [f"fl-lightning: error: {message}"]
    assert not os.path.exists("runs")
