"""The command answers at once where it needs no model: top-level help and broken config files
import neither torch, Lightning, W&B, Flower nor matplotlib (measured by what is imported, not by timing)."""
import subprocess
import sys

PROBE = """
import sys
from fl_lightning.cli import main
code = main({args!r})
heavy = sorted(m for m in ("torch", "pytorch_lightning", "timm", "wandb", "flwr", "matplotlib") if m in sys.modules)
print("HEAVY", heavy, code)
"""


def imported(args, tmp_path):
    run = subprocess.run([sys.executable, "-c", PROBE.format(args=args)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    line = next(line for line in run.stdout.splitlines() if line.startswith("HEAVY"))
    return line, run


def test_help_lists_blocks_without_importing_torch(tmp_path):
    line, run = imported(["--help"], tmp_path)
    assert line == "HEAVY [] 0"
    assert "blocks" in run.stdout and "fit --help" in run.stdout


def test_broken_config_answers_without_importing_torch(tmp_path):
    (tmp_path / "typo.yaml").write_text("model:\n  lr: [0.1\n")
    line, run = imported(["fit", "--config", "typo.yaml"], tmp_path)
    assert line == "HEAVY [] 2"
    assert "typo.yaml, line 3, column 1: YAML syntax error" in run.stderr


def test_option_typo_answers_without_importing_torch(tmp_path):
    line, run = imported(["fit", "--model.lrr", "0.1", "--trainer.max_epoch", "3"], tmp_path)
    assert line == "HEAVY [] 2"
    assert run.stderr.strip() == ("fl-lightning: error: --model.lrr: no such option; did you mean --model.lr? "
                                  "(every option: fl-lightning fit --help)")


def test_known_options_are_the_constructors_arguments():
    import inspect

    import pytorch_lightning as pl

    from fl_lightning import FederatedDataModule, FederatedModule
    from fl_lightning.cli.options import known_options

    known = known_options()
    for group, cls in (("model", FederatedModule), ("data", FederatedDataModule), ("trainer", pl.Trainer)):
        assert known[group] == set(inspect.signature(cls).parameters) | {"help"}


def test_an_option_that_moved_into_the_algorithm_answers_without_importing_torch(tmp_path):
    line, run = imported(["fit", "--model.num_blocks", "3"], tmp_path)
    assert line == "HEAVY [] 2"
    assert run.stderr.strip().startswith("fl-lightning: error: --model.num_blocks: moved to "
                                         "--model.algorithm.num_blocks V (fedbcgd*)")
