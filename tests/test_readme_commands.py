"""Every command README.md shows runs as written, at the fewest rounds that reach its code path (one round for
fit, ``--trainer.max_epochs 1``; the sweep's grid printed and two of its fits run), in the order a newcomer types them: a changed default cannot break one
silently. The Python block runs as written. (The example script's command: tests/test_lightning_client.py;
``flower-local``: tests/test_flower.py.)"""
import re
import shlex
from pathlib import Path

import pytest

from fl_lightning.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
ONE_ROUND = ["--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false"]


def readme_commands() -> list[list[str]]:
    """The ``fl-lightning …`` lines of the README's bash blocks and inline tour commands, continuation lines joined."""
    blocks = re.findall(r"```bash\n(.*?)```", README, re.S)
    lines = " ".join(blocks).replace("\\\n", " ").splitlines()
    commands = [line.split("#")[0].strip() for line in lines if line.strip().startswith("fl-lightning ")]
    tour = README.split("## A five-minute tour", 1)[1]
    commands += [" ".join(c.split()) for c in re.findall(r"`(fl-lightning (?:fit|blocks) [^`]+)`", tour, re.S)]
    return [shlex.split(c)[1:] for c in commands]


def test_the_readme_shows_the_commands_this_test_runs():
    subcommands = [c[0] for c in readme_commands()]
    assert subcommands.count("fit") >= 2 and {"sweep", "report", "blocks", "flower-local"} <= set(subcommands)


def test_every_readme_command_runs_as_written(capsys):
    """The sweep's six fits are each an ordinary fit (tests/test_sweep_report.py runs whole sweeps): its command
    runs with --print, and its first two printed fits run at one round."""
    (Path.cwd() / "configs").symlink_to(ROOT / "configs")  # the README's commands run from the repository root
    for args in readme_commands():
        if args[0] == "flower-local":
            continue  # tests/test_flower.py runs it (SuperNodes, minutes)
        if args[0] == "sweep":
            capsys.readouterr()
            assert main(args + ONE_ROUND + ["--print"]) == 0
            printed = [shlex.split(line) for line in capsys.readouterr().out.splitlines() if " fit " in line]
            assert len(printed) == 6
            for command in printed[:2]:
                assert main(command[command.index("fit"):]) == 0, command
            continue
        assert main(args + (ONE_ROUND if args[0] == "fit" else [])) == 0, args
    out = capsys.readouterr().out
    # the report reads the README's first fit and the sweep's two (one round each: below its 0.8 target)
    assert "fl-lightning report: 3 runs in 2 groups → my_table" in out  # FedBCGD N = 3, ρ 0.1; the two sweep seeds
    assert "∞" in Path("my_table.md").read_text()
    assert "Block division" in out


def test_the_readmes_python_block_runs_as_written():
    (code,) = re.findall(r"```python\n(.*?)```", README, re.S)
    exec(compile(code, "README.md", "exec"), {})
