"""benchmarks/lr_choice.py, which picks each algorithm's lr for reproduce.sh (docs/reproduction.md,
"Learning rates searched on CIFAR-10"): the score is the mean val/acc of the last three evaluations."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "lr_choice.py"


def kept_run(root: Path, algorithm: str, lr: float, accuracies: list[float]) -> None:
    """A kept run as sweep --keep leaves it: <grid values>/version_0/metrics.csv, one row per round."""
    version = root / f"algorithm={algorithm},lr={lr}" / "version_0"
    version.mkdir(parents=True)
    rows = ["round,val/acc,train/loss"] + [f"{r + 1}.0,{acc},1.0" for r, acc in enumerate(accuracies)]
    rows.insert(2, "1.5,,0.9")  # a round without an evaluation counts for nothing
    (version / "metrics.csv").write_text("\n".join(rows) + "\n")


@pytest.fixture
def script():
    spec = importlib.util.spec_from_file_location("lr_choice", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def lr_choice(script, monkeypatch, capsys):
    """Runs the script's main() in this process (as `python benchmarks/lr_choice.py ARGS` would)."""

    def run(*args) -> subprocess.CompletedProcess:
        monkeypatch.setattr(sys, "argv", [str(SCRIPT), *map(str, args)])
        try:
            script.main()
            code = 0
        except SystemExit as exit:
            code = exit.code
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out.out, out.err)
    return run


def test_the_chosen_lr_is_the_best_mean_of_the_last_three_evaluations(tmp_path, lr_choice):
    # lr 0.1 ends higher (0.50) but its last three average 0.30; lr 0.03's average 0.40
    kept_run(tmp_path, "fedbcgd", 0.1, [0.9, 0.1, 0.3, 0.5])
    kept_run(tmp_path, "fedbcgd", 0.03, [0.1, 0.4, 0.4, 0.4])
    kept_run(tmp_path, "fedavg", 0.1, [0.5, 0.25, 0.0])
    kept_run(tmp_path, "fedavg", 0.03, [0.25, 0.25, 0.25])
    table = lr_choice(tmp_path, "--grid", "0.03,0.1")
    assert table.returncode == 0, table.stderr
    assert "| fedbcgd | **40.0** | 30.0 | 0.03 |" in table.stdout.splitlines()
    assert "| fedavg | **25.0** | 25.0 | 0.03 |" in table.stdout.splitlines()  # a tie: the smaller lr
    chosen = lr_choice(tmp_path, "--chosen", "fedbcgd", "--grid", "0.03,0.1")
    assert (chosen.returncode, chosen.stdout) == (0, "0.03\n")
    assert lr_choice(tmp_path, "--chosen", "fedbcgd", "--grid", "0.03,0.1", "--last", "1").stdout == "0.1\n"


def test_of_equal_scores_the_smaller_lr_is_chosen(script):
    assert script.best_lr({0.1: 0.25, 0.03: 0.25, 0.2: 0.1}) == 0.03
    assert script.best_lr({0.1: 0.26, 0.03: 0.25}) == 0.1


def test_an_unfinished_search_is_refused_in_one_line(tmp_path, lr_choice):
    kept_run(tmp_path, "fedavg", 0.03, [0.2, 0.2, 0.2])
    kept_run(tmp_path, "fedavg", 0.1, [0.1, 0.2, 0.2])
    refused = lr_choice(tmp_path, "--chosen", "fedavg")  # the default grid: 0.01, 0.05 and 0.2 are missing
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == (f"lr_choice: --chosen fedavg: lr 0.01, 0.05, 0.2 not kept in {tmp_path} yet; finish "
                              "the search first (benchmarks/reproduce.sh cifar_lr)\n")
    assert lr_choice(tmp_path, "--chosen", "fedavg", "--grid", "0.03,0.1").stdout == "0.03\n"
    table = lr_choice(tmp_path).stdout.splitlines()
    assert table[1] == "| algorithm | lr 0.01 | lr 0.03 | lr 0.05 | lr 0.1 | lr 0.2 | chosen lr |"
    assert table[3] == "| fedavg | — | **20.0** | — | 16.7 | — | — (unfinished) |"
    never = lr_choice(tmp_path, "--chosen", "scaffold")
    assert (never.returncode, never.stderr) == (2, f"lr_choice: --chosen scaffold: no lr search kept for it in "
                                                   f"{tmp_path} (kept: fedavg); run benchmarks/reproduce.sh cifar_lr\n")
    assert lr_choice(tmp_path / "absent", "--chosen", "fedavg").returncode == 2
