"""The Flower ServerApp: ``fl_lightning.deploy.server_app:app``.

It runs ``fl-lightning fit`` of the run config's ``config`` (and ``args``) as usual — the same run id, run
folder, metrics.csv, checkpoints and ``--ckpt_path last`` resume — with the clients on the SuperNodes that
joined (fl_lightning.deploy.join, fl_lightning.deploy.remote). Run config (``flwr run ... --run-config``):

    config        the fl-lightning YAML (relative to workdir)
    args          more fit options, as on the command line ("--model.algorithm scaffold --threads 1")
    workdir       the directory the fit runs in (its runs/ folder); default: the ServerApp's
    join-timeout  seconds to wait for a node per partition (default 120)
    round-timeout seconds a round waits for its nodes; later replies count as not reported (default 600)
    result-file   where to write {"code", "error"} when done (``fl-lightning flower-local`` reads it)
"""
from __future__ import annotations

import io
import json
import os
import shlex
import sys
from contextlib import redirect_stderr, redirect_stdout
from typing import Optional

from flwr.serverapp import ServerApp

from fl_lightning.errors import FLUserError

app = ServerApp()


def _without_fit_only(args: list[str]) -> tuple[list[str], Optional[str]]:
    """The options a config-only build takes (``--ckpt_path`` is fit's), and the fit's ``--ckpt_path``."""
    out, ckpt_path, skip = [], None, False
    for word in args:
        if skip:
            skip, ckpt_path = False, word
        elif word == "--ckpt_path":
            skip = True
        elif word.startswith("--ckpt_path="):
            ckpt_path = word.split("=", 1)[1]
        else:
            out.append(word)
    return out, None if ckpt_path == "null" else ckpt_path


def configured(fit_args: list[str]):
    """The run's objects built from its fit options (no fit), refused as its fit would refuse them with its clients
    on Flower nodes (``NodeClients.refuse``), before any node joins; and whether it resumes (``--ckpt_path last``:
    only where the fit will find a checkpoint of this run, else its nodes start afresh as its server does)."""
    from fl_lightning.cli import check_config_files, thread_option
    from fl_lightning.cli.checkpoints import newest_checkpoint
    from fl_lightning.cli.lightning_cli import FederatedCLI
    from fl_lightning.class_paths import class_path
    from fl_lightning.deploy.protocol import NodeClients
    from fl_lightning.deploy.remote import FlowerClients

    check_config_files(fit_args)
    options, ckpt_path = _without_fit_only(thread_option(["fit", *fit_args])[1:])
    config = options.index("--config")
    cli = FederatedCLI(args=options[config:], run=False)  # the server runs the command's fit: its objects, unfitted
    cli.model.check_compatible(cli.datamodule, cli.trainer, NodeClients)  # as its fit will, its clients on nodes
    if ckpt_path == "last":  # the fit's own search, in the folder its loggers will name (a copy of its config)
        named = cli.config.clone()
        cli.name_the_run(named, "fit", brought=[class_path(FlowerClients)])
        ckpt_path = newest_checkpoint(named.get("trainer") or {}, cli.run_id)[0]
    return cli, ckpt_path is not None


def serve(grid, fit_args: list[str], join_timeout: float, round_timeout: float) -> int:
    """Joins the nodes, then runs the fit with them; the exit code (2: one line on stderr, nothing written)."""
    from fl_lightning.cli import main as fit
    from fl_lightning.deploy import remote
    from fl_lightning.deploy.join import Membership
    from fl_lightning.deploy.node import data_summary
    from fl_lightning.runs.identity import run_id

    try:
        cli, resume = configured(fit_args)
        summary = data_summary(cli)
        membership = Membership(grid, run_id(cli.config.as_dict()), cli.parser.dump(cli.config), summary,
                                fresh=not resume)
        membership.wait_for(summary["num_clients"], join_timeout)
    except FLUserError as err:
        print(f"fl-lightning: error: {err}", file=sys.stderr, flush=True)
        return 2
    print(f"fl-lightning: {len(membership.node_of)} SuperNodes joined run {membership.run_id}", flush=True)
    return fit(["fit", *fit_args], callbacks=[remote.FlowerClients(remote.RemoteClients(membership, round_timeout))])


class Lines(io.TextIOBase):
    """Passes a stream through and keeps its ``fl-lightning:`` lines (the run's summary or its one-line error),
    which ``flower-local`` prints where the user started it."""

    def __init__(self, stream, kept: list[str]):
        self.stream, self.kept, self.partial = stream, kept, ""

    def write(self, text: str) -> int:
        self.partial += text
        *lines, self.partial = self.partial.split("\n")
        self.kept.extend(line for line in lines if line.startswith("fl-lightning:"))
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def _write_result(path: Optional[str], code: int, lines: list[str]) -> None:
    if path:
        with open(path + ".tmp", "w") as f:
            json.dump({"code": code, "lines": lines}, f)
        os.replace(path + ".tmp", path)


@app.main()
def main(grid, context) -> None:
    config = dict(context.run_config)
    if config.get("workdir"):
        os.chdir(str(config["workdir"]))
    args = ["--config", str(config["config"]), *shlex.split(str(config.get("args", "")))]
    lines: list[str] = []
    with redirect_stdout(Lines(sys.stdout, lines)), redirect_stderr(Lines(sys.stderr, lines)):
        code = serve(grid, args, float(config.get("join-timeout", 120.0)), float(config.get("round-timeout", 600.0)))
    _write_result(str(config.get("result-file", "")) or None, code, lines)
