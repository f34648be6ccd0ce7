"""jsonargparse's refusals as one line naming the option, what it got and what it takes (fl_lightning.cli.messages):
a type error in a config file, a network's unknown option, a Union of scalars, a class missing its arguments."""
import os
import subprocess
from pathlib import Path

import pytest

from fl_lightning.cli import main
from tests.test_cli import FL, QUICKSTART, QUIET

BAD = [
    (["--model.network.init_args.dropout", "0.5"],
     "model.network.dropout: MLP has no option 'dropout'; its options: in_features, num_classes, hidden"),
    (["--model.network", "fl_lightning.models.LeNet5", "--model.network.dropout", "0.5"],
     "model.network.dropout: LeNet5 has no option 'dropout'; its options: num_classes, in_channels, image_size, norm"),
    (["--seed_everything", "abc"], "seed_everything: got 'abc'; it takes true/false or an integer (the run's seed, "
     "e.g. 0)"),
    (["--model.network", "torch.nn.Linear"],
     "model.network: torch.nn.Linear needs in_features, out_features, which nothing fills in; give them "
     "(--model.network.init_args.in_features V --model.network.init_args.out_features V) or a built-in network "
     "(fl-lightning fills in its sizes from the data: fl_lightning.models)"),
    (["--model.lr", "abc"], "model.lr: got 'abc'; it takes a number"),
    (["--model.clients_per_round", "2.5"], "model.clients_per_round: got '2.5'; it takes an integer"),
    (["--trainer.max_epochs", "x"], "trainer.max_epochs: got 'x'; it takes an integer or null (rounds; -1: until the "
     "budget)"),
    (["--model.network.init_args.hidden", "abc"], "model.network.hidden: got 'abc'; MLP's hidden takes a list "
     "(e.g. [200, 200])"),
    (["--model.privacy.clip", "abc"], "model.privacy.clip: got 'abc'; PrivacyOptions's clip takes a number"),
    (["--model.compression", "topk", "--model.compression.k", "abc"], "model.compression.k: got 'abc'; TopK's k "
     "takes a number"),
    (["--model.algorithm", "fedbcgd", "--model.algorithm.num_blocks", "three"],
     "model.algorithm.num_blocks: got 'three'; FedBCGD's num_blocks takes an integer or null"),
]


@pytest.mark.parametrize("args, message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_refused_value_or_option_is_one_line_naming_it(args, message, capsys):
    code = main(["fit", "--config", QUICKSTART, *QUIET, *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [f"fl-lightning: error: {message}"]
    assert not os.path.exists("runs")


def test_a_type_error_in_a_config_file_names_the_option_not_an_import():
    """The `fl-lightning` command itself: a YAML num_blocks: "three" is a value FedBCGD refuses, not a class that does
    not import."""
    Path("bad.yaml").write_text('model:\n  algorithm:\n    class_path: fedbcgd\n    init_args:\n      num_blocks: "three"\n')
    run = subprocess.run([FL, "fit", "--config", QUICKSTART, "--config", "bad.yaml", *QUIET], capture_output=True,
                         text=True)
    assert run.returncode == 2 and run.stderr.strip().splitlines() == [
        "fl-lightning: error: model.algorithm.num_blocks: got 'three'; FedBCGD's num_blocks takes an integer or null"]
    assert not os.path.exists("runs")


def test_a_fit_and_the_calculator_print_no_library_noise():
    """No Lightning tip, no LeafSpec deprecation, and dp-accounting's non-converging orders as one line at most."""
    fit = subprocess.run([FL, "fit", "--config", QUICKSTART, *QUIET, "--trainer.max_epochs", "1",
                          "--model.privacy.noise_multiplier", "1", "--model.privacy.sampling", "poisson"],
                         capture_output=True, text=True)
    assert fit.returncode == 0, fit.stderr
    out = fit.stdout + fit.stderr
    assert "Tip:" not in out and "LeafSpec" not in out and "absl" not in out
    assert sum("dp-accounting left out" in line for line in out.splitlines()) <= 1
    calc = subprocess.run([FL, "privacy", "--rounds", "1000", "--cohort", "100", "--population", "1000", "--epsilon", "1",
                           "--sampling", "poisson"], capture_output=True, text=True)
    lines = (calc.stdout + calc.stderr).strip().splitlines()
    assert calc.returncode == 0 and "absl" not in calc.stderr and len(lines) == 2, lines
    assert lines[0].startswith("noise_multiplier 12.8752 gives ε = 0.9994 ≤ 1 after R=1000 rounds")
    assert lines[1].startswith("fl-lightning: dp-accounting left out ") and "(still an upper bound)" in lines[1]
