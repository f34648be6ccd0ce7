"""``fl-lightning``: the command. It imports nothing heavy until a subcommand needs it, so
``fl-lightning --help`` and a broken ``--config`` answer at once.

    fl-lightning fit|validate|test --config X [--dotted.options ...]   (a LightningCLI: fl_lightning.cli.lightning_cli)
                                      fit --threads N: every thread pool (fl_lightning.federation.threads)
    fl-lightning blocks --config X                                      (the model's block division)
    fl-lightning sweep --config X --grid key=a,b ... [--jobs J] [--print]  (a grid of fit runs: fl_lightning.cli.sweep)
    fl-lightning report RUNS... --target ACC [--out PREFIX]             (tables and plots: fl_lightning.runs.report)
    fl-lightning timeline RUN [--round R]                               (one simulated round: fl_lightning.runs.timeline)
    fl-lightning flower-local --config X --nodes N [fit options]        (on Flower, loopback: fl_lightning.deploy.local)

User mistakes surface as one line naming the field and the fix (exit code 2), checked
before any run directory is created.
"""
from __future__ import annotations

import difflib
import os
import sys
from importlib import import_module

import yaml

from fl_lightning.errors import ConfigError, FLUserError
from fl_lightning.cli.options import check_option_names, pop_count

SUBCOMMANDS = ("fit", "validate", "test", "algorithms", "blocks", "sweep", "report", "privacy", "timeline",
               "flower-local")
HELP = """usage: fl-lightning {fit,validate,test,algorithms,blocks,sweep,report,privacy,timeline,flower-local} [--config FILE] [--dotted.option VALUE ...]

Federated learning on PyTorch Lightning (FedAvg ... FedBCGD+); one epoch is one communication round.

subcommands:
  fit         train: fl-lightning fit --config configs/quickstart.yaml [--model.algorithm fedprox --model.algorithm.mu 0.1]
              [--threads N: intra-op/OpenMP/MKL threads of each process; K parallel clients get N // K each]
  validate    evaluate a checkpoint on the validation set (--ckpt_path FILE)
  test        evaluate a checkpoint on the test set (--ckpt_path FILE)
  algorithms  every algorithm with its summary, upload size and options; algorithms NAME: its options
  blocks      print the model's block division like the paper's Tables 7-11 (no weights are loaded)
  sweep       a grid of fit runs: --grid model.algorithm=fedavg,fedbcgd --grid seed_everything=0,1,2 [--jobs 2]
              (finished runs are skipped, interrupted ones resume; --print lists the commands instead)
  report      paper-style tables (Markdown, CSV, LaTeX) and a plot from runs: RUNS... --target 0.7 [--out PREFIX]
  timeline    one round of a run with model.system: each client's download, compute, upload and latency on
              the simulated clock (RUN [--round R]; from the run folder's timeline.csv)
  privacy     client-level DP before training: --rounds R --cohort M --population K --epsilon 8 (→ noise
              multiplier) or --noise-multiplier Z (→ ε) [--delta D] (fl_lightning.privacy)
  flower-local  fit on Flower on loopback: a SuperLink and --nodes N SuperNodes, then the run, then all stopped
              (pip install 'fl-lightning[flower]'; docs/deployment.md)

every option with its one-line meaning and the algorithms: fl-lightning fit --help
every option with its value: fl-lightning fit --config FILE --print_config
"""


def check_config_files(command: list[str]) -> None:
    """Every --config file exists and is valid YAML (the error names the file, line and column)."""
    paths = [command[i + 1] for i, arg in enumerate(command[:-1]) if arg == "--config"]
    paths += [arg.split("=", 1)[1] for arg in command if arg.startswith("--config=")]
    for path in paths:
        if not os.path.isfile(path):
            raise ConfigError("--config", f"{path}: no such file")
        with open(path) as f:
            try:
                yaml.safe_load(f)
            except yaml.YAMLError as err:
                mark = getattr(err, "problem_mark", None)
                where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
                raise ConfigError("--config", f"{path}{where}: YAML syntax error ({getattr(err, 'problem', err)})"
                                  ) from None


def thread_option(command: list[str]) -> list[str]:
    """``fit --threads N`` → the ``fl_lightning.federation.threads.Threads`` trainer callback (recorded in config.yaml),
    and ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` set to N before torch is imported: the count comes into being as
    ``OMP_NUM_THREADS=N`` makes it, before any thread pool exists (docs/scale_out.md, "Same numbers in every thread layout")."""
    threads, rest = pop_count(command, "--threads")
    if threads is None:
        return rest
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    return rest + ["--trainer.callbacks+=fl_lightning.federation.threads.Threads", "--trainer.callbacks.threads",
                   str(threads)]


def main(args=None, callbacks=()) -> int:
    """The ``fl-lightning`` command; ``callbacks``: Lightning callbacks (objects) added to a fit's Trainer."""
    command = sys.argv[1:] if args is None else list(args)
    if command[:1] in ([], ["-h"], ["--help"]):
        print(HELP, end="")
        return 0
    if not command[0].startswith("-") and command[0] not in SUBCOMMANDS + ("predict",):
        close = difflib.get_close_matches(command[0], SUBCOMMANDS, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        print(f"fl-lightning: error: unknown subcommand {command[0]!r}; {hint}choose one of {', '.join(SUBCOMMANDS)} "
              "(fl-lightning --help)", file=sys.stderr)
        return 2
    try:
        check_config_files(command)
        if command[:1] == ["flower-local"]:
            try:
                import_module("flwr")
            except ImportError:
                raise FLUserError("flower-local needs Flower: pip install 'fl-lightning[flower]'") from None
            return import_module("fl_lightning.deploy.local").main(command[1:])
        if command[:1] in (["sweep"], ["report"], ["algorithms"], ["privacy"], ["timeline"]):  # imported on use: the others stay fast
            module = {"algorithms": "fl_lightning.algorithms.describe", "privacy": "fl_lightning.privacy.calculator",
                      "sweep": "fl_lightning.cli.sweep"}.get(command[0], f"fl_lightning.runs.{command[0]}")
            return import_module(module).main(command[1:])
        if command[:1] == ["fit"]:
            command = thread_option(command)
        if command[:1] in (["fit"], ["validate"], ["test"], ["blocks"]):
            check_option_names([w for w in command[1:] if not w.startswith("--trainer.callbacks")])
        from jsonargparse import ArgumentError

        lightning_cli = import_module("fl_lightning.cli.lightning_cli")
    except FLUserError as err:
        print(f"fl-lightning: error: {err}", file=sys.stderr)
        return 2
    try:
        if command[:1] == ["blocks"]:
            lightning_cli.print_blocks(command[1:])
        else:
            lightning_cli.FederatedCLI(args=command, callbacks=callbacks)
    except FLUserError as err:
        print(f"fl-lightning: error: {err}", file=sys.stderr)
        if getattr(err, "exit_now", False):  # the other ranks are gone: exit before Lightning's launcher,
            sys.stdout.flush()             # which watches them, SIGKILLs this process mid-shutdown
            sys.stderr.flush()
            os._exit(2)
        return 2
    except PermissionError as err:  # a run or save directory that turned out not writable
        print(f"fl-lightning: error: cannot write {err.filename}: permission denied; choose a writable "
              "trainer.logger.init_args.save_dir", file=sys.stderr)
        return 2
    except ArgumentError as err:  # jsonargparse: unknown option, wrong type, bad class_path
        print(f"fl-lightning: error: {lightning_cli.argument_error(err, command)}", file=sys.stderr)
        return 2
    return 0


def __getattr__(name: str):
    """``from fl_lightning.cli import FederatedCLI`` keeps working, imported on first use."""
    if name == "FederatedCLI":
        return import_module("fl_lightning.cli.lightning_cli").FederatedCLI
    raise AttributeError(name)


if __name__ == "__main__":
    sys.exit(main())
