"""``fl-lightning sweep``: a grid of ordinary ``fit`` runs (docs/sweep_and_report.md, "Grids of runs").

    fl-lightning sweep --config X --grid model.algorithm=fedavg,fedbcgd --grid seed_everything=0,1,2 \\
        [--jobs J] [--threads T] [--print] [any fit option ...]

Every combination becomes one ``fl-lightning fit`` run whose logger name is
``<the config's logger name>/<key=value,...>``, in its run folder ``<key=value,...>/<label>/version_N`` (the label
as every fit's: ``fedavg,seed=0``; fl_lightning.runs.identity). J runs at a time share
the CPU threads (each gets cores // J, or ``--threads``). A run that finished leaves a marker in
``<save_dir>/<name>/.sweep/`` and is skipped next time; an interrupted one resumes from its newest
checkpoint (``--ckpt_path last``), so a killed sweep picks up where it stopped. ``--print`` only
prints the commands, one per line, for a cluster scheduler (e.g. a SLURM job array) to run.

``--keep DIR`` keeps every finished run's metrics.csv and config.yaml (no checkpoints) in
``DIR/<grid values>/version_N/`` — small text to commit, e.g. under docs/ — and skips a grid point
whose run is kept there already (the same run id, a budget and round limit at least as large, the
same evaluation spacing), so a set of runs can be completed over several sittings and machines
(``--print`` then lists only the runs not kept yet).
``fl-lightning report DIR`` reads the kept runs as it reads runs/. A run refused for its configuration (exit code 2)
stops the sweep in one line: no further run starts.
"""
from __future__ import annotations

import itertools
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import yaml

from fl_lightning.errors import ConfigError
from fl_lightning.cli.options import check_option_names
from fl_lightning.runs import kept as kept_runs

TOP_LEVEL = {"seed_everything"}


def parse(args: list[str]) -> tuple[list[tuple[str, list[str]]], int, int, bool, Path | None, list[str]]:
    """(grid, jobs, threads per job, print only, keep directory, the other fit arguments); bad grids fail here."""
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        raise SystemExit(0)
    grid, jobs, threads, print_only, keep, rest = [], 1, 0, False, None, []
    words = iter(args)
    for word in words:
        if word in ("--grid", "--jobs", "--threads", "--keep"):
            value = next(words, None)
            if value is None:
                raise ConfigError(word, "needs a value")
            word = f"{word}={value}"
        if word.startswith("--grid="):
            key, sep, values = word[len("--grid="):].partition("=")
            choices = [v.strip() for v in values.split(",") if v.strip()]
            if not sep or not key:
                raise ConfigError("--grid", f"{word[7:]!r}: write key=value1,value2 (e.g. model.lr=0.05,0.1)")
            if not choices:
                raise ConfigError(f"--grid {key}", "empty list of values")
            if key in (k for k, _ in grid):
                raise ConfigError(f"--grid {key}", "given twice; list every value in one (--grid key=v1,v2)")
            if key not in TOP_LEVEL:
                if key.split(".")[0] not in ("model", "data", "trainer") or "." not in key:
                    raise ConfigError(f"--grid {key}", "unknown key; grid over model.*, data.*, trainer.* or "
                                      "seed_everything")
                check_option_names([f"--{key}"])
            grid.append((key, choices))
        elif word.startswith("--jobs="):
            jobs = int(word[len("--jobs="):])
            if jobs < 1:
                raise ConfigError("--jobs", f"must be ≥ 1, got {jobs}")
        elif word.startswith("--threads="):
            threads = int(word[len("--threads="):])
            if threads < 1:
                raise ConfigError("--threads", f"must be ≥ 1, got {threads}")
        elif word.startswith("--keep="):
            given = word[len("--keep="):]
            if not given.strip() or Path(given).exists() and not Path(given).is_dir():
                raise ConfigError("--keep", f"give a directory for the kept runs (e.g. docs/runs/NAME), got {given!r}")
            keep = Path(given)
        elif word == "--print":
            print_only = True
        else:
            rest.append(word)
    if not grid:
        raise ConfigError("--grid", "give at least one, e.g. --grid seed_everything=0,1,2")
    return grid, jobs, threads, print_only, keep, rest


def logger_place(rest: list[str]) -> tuple[str, str]:
    """(save_dir, name) of the logger the config files (and command line) set; CSV defaults runs/fl."""
    save_dir, name = "runs", "fl"
    for i, word in enumerate(rest[:-1]):
        if word == "--config":
            config = yaml.safe_load(Path(rest[i + 1]).read_text()) or {}
            logger = (config.get("trainer") or {}).get("logger")
            init_args = logger.get("init_args", {}) if isinstance(logger, dict) else {}
            save_dir, name = init_args.get("save_dir", save_dir), init_args.get("name", name)
        elif word == "--trainer.logger.init_args.save_dir":
            save_dir = rest[i + 1]
        elif word == "--trainer.logger.init_args.name":
            name = rest[i + 1]
    return str(save_dir), str(name)


def label(combination: tuple[tuple[str, str], ...]) -> str:
    return ",".join(f"{key.split('.')[-1]}={value}".replace("/", "_") for key, value in combination)


def algorithm_class(value: str):
    """The Algorithm class a grid value names (a registry name or a class path), or None."""
    from fl_lightning.algorithms import REGISTRY
    from fl_lightning.algorithms.names import import_class

    return REGISTRY[value].algorithm if value in REGISTRY else import_class(value)


def options_for(algorithm: str, rest: list[str], swept: list[str]) -> list[str]:
    """``rest`` without the ``--model.algorithm.OPTION V`` that ``algorithm`` lacks but another swept algorithm
    has: a sweep over FedAvg and your own algorithm gives your algorithm's options to it alone. An option no
    swept algorithm has stays, and is refused in one line."""
    classes = [algorithm_class(name) for name in swept]
    mine = algorithm_class(algorithm)
    out, index = [], 0
    while index < len(rest):
        word = rest[index]
        key, inline, _ = word.partition("=")
        option = key[len("--model.algorithm."):] if key.startswith("--model.algorithm.") else None
        width = 1 if inline or option is None or index + 1 >= len(rest) else 2
        if option and mine is not None and option not in mine.option_names() and any(
                cls is not None and option in cls.option_names() for cls in classes):
            index += width
            continue
        out += rest[index:index + width]
        index += width
    return out


def check_every_point(runs: list[tuple[str, list[str]]]) -> list[dict]:
    """Each grid point's complete configuration is parsed, and its algorithm, codec and module options
    checked, before the first run starts: a bad value stops the sweep in one line with nothing trained.
    Returns each point's configuration."""
    import contextlib
    import io

    from fl_lightning.aggregation import settle_config
    from fl_lightning.cli.lightning_cli import FederatedCLI, argument_error
    from fl_lightning.module_options import check_module_options, resolve

    configs = []
    for tag, command in runs:
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
                FederatedCLI(args=[word for word in command if word not in ("--ckpt_path", "last")] + ["--print_config"])
        except SystemExit as done:
            if done.code not in (0, None):
                raise ConfigError(f"sweep {tag}", "its configuration does not parse") from None
        except ConfigError as err:
            raise ConfigError(f"sweep {tag}", str(err)) from None
        except Exception as err:  # jsonargparse's ArgumentError: unknown option, wrong type, bad class path
            raise ConfigError(f"sweep {tag}", argument_error(err, command)) from None
        configs.append(yaml.safe_load(printed.getvalue()) or {})
        model = configs[-1].get("model") or {}
        try:
            settle_config(model, command)  # the aggregator and attack as a fit records them (its run id)
            resolve(model.get("algorithm"), model.get("compression"))
            check_module_options({k: v for k, v in model.items() if not isinstance(v, dict)})
        except ConfigError as err:
            raise ConfigError(f"sweep {tag}", str(err)) from None
    return configs


def main(args: list[str]) -> int:
    grid, jobs, threads, print_only, keep, rest = parse(args)
    check_option_names(rest)
    save_dir, name = logger_place(rest)
    root = Path(save_dir) / name  # the runs' own folders: root/<grid values>/<label>/version_N
    markers = root / ".sweep"
    runs = []
    swept = next((choices for key, choices in grid if key == "model.algorithm"), [])
    for values in itertools.product(*(choices for _, choices in grid)):
        combination = tuple((key, value) for (key, _), value in zip(grid, values))
        options = [word for key, value in combination for word in (f"--{key}", value)]
        algorithm = dict(combination).get("model.algorithm")
        given = options_for(algorithm, rest, swept) if algorithm is not None else rest
        command = ["fit", *given, *options, "--trainer.logger.init_args.name", f"{name}/{label(combination)}",
                   "--ckpt_path", "last"]
        runs.append((label(combination), command))
    configs = check_every_point(runs)
    if keep is not None:
        kept_runs.check_apart(keep, root)
    # every point's verdict before anything is printed, copied or run (a kept run of other settings stops all)
    verdicts = [kept_runs.serves(keep / tag, config) if keep is not None else None for (tag, _), config in
                zip(runs, configs)]
    if print_only:  # with --keep: only the runs not kept yet
        for (tag, command), why in zip(runs, verdicts):
            if keep is None or why is not None:
                print(shlex.join(["fl-lightning", *command]))
        return 0
    markers.mkdir(parents=True, exist_ok=True)
    pending, finished, collected, kept = [], 0, 0, 0
    for (tag, command), config, why in zip(runs, configs, verdicts):
        done, run_dir = markers / f"{tag}.done", root / tag
        if keep is None:
            finished += done.exists()
            pending += [] if done.exists() else [(tag, command)]
            continue
        if why == kept_runs.NOT_KEPT and done.exists() and kept_runs.is_run_of(run_dir, config):
            kept_runs.keep(run_dir, keep / tag, markers)  # finished before --keep was given
            why = kept_runs.serves(keep / tag, config)
            collected += why is None
        if why is None:
            kept += 1
            continue
        if why != kept_runs.NOT_KEPT:
            print(f"fl-lightning sweep: {tag} runs again ({why})", flush=True)
        done.unlink(missing_ok=True)
        pending.append((tag, command))
    print(f"fl-lightning sweep: {len(runs)} runs, {finished} finished before"
          + (f", {kept} kept in {keep}" + (f" ({collected} copied there now)" if collected else "") if keep else "")
          + f", {len(pending)} to run, {jobs} at a time (logs: {markers}/)", flush=True)
    threads = threads or max(1, (os.cpu_count() or 1) // jobs)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    running, failed, refused = [], [], None
    while pending or running:
        while pending and len(running) < jobs and refused is None:
            tag, command = pending.pop(0)
            log = open(markers / f"{tag}.log", "a")
            process = subprocess.Popen([sys.executable, "-m", "fl_lightning.cli", *command], stdout=log,
                                       stderr=subprocess.STDOUT, env=env)
            running.append((tag, process, log, time.monotonic()))
        time.sleep(0.2)
        for entry in [e for e in running if e[1].poll() is not None]:
            tag, process, log, started = entry
            running.remove(entry)
            log.close()
            seconds = time.monotonic() - started
            problem = None if process.returncode == 0 else f"exit {process.returncode}"
            if problem is None and keep is not None:
                try:
                    kept_runs.keep(root / tag, keep / tag, markers)
                except ConfigError as err:
                    problem = f"not kept: {err}"
            if problem is None:
                (markers / f"{tag}.done").write_text(f"{seconds:.1f} s wall time\n")
                print(f"fl-lightning sweep: {tag} done in {seconds:.0f} s", flush=True)
            elif process.returncode == 2 and refused is None:  # a configuration error: the next runs would repeat it
                refused = tag
                failed.append(tag)
                print(f"fl-lightning sweep: stopped: {tag} was refused ({refusal(markers / f'{tag}.log')}); "
                      f"{len(pending)} runs not started; fix it and run the sweep again", flush=True)
                pending = []
            else:
                failed.append(tag)
                print(f"fl-lightning sweep: {tag} failed ({problem}); see {markers}/{tag}.log",
                      flush=True)
    return 2 if refused is not None else 1 if failed else 0


def refusal(log: Path) -> str:
    """The run's one-line error (its last ``fl-lightning: error:`` line)."""
    prefix = "fl-lightning: error: "
    lines = [line[len(prefix):].strip() for line in log.read_text().splitlines() if line.startswith(prefix)]
    return lines[-1] if lines else f"exit 2; see {log}"
