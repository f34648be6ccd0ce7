"""The Flower ClientApp: ``fl_lightning.deploy.client_app:app``.

It answers two message types: ``query`` (join a run: the node checks its partition and data against the
run's config) and ``train`` (one client's round). Under Flower's default ``--isolation subprocess`` (a new
``flwr-clientapp`` process per message) each is forwarded over a local socket to the node's warm worker
(fl_lightning.deploy.worker), started on the first message; under ``--isolation process`` that worker runs
this app itself (fl_lightning.deploy.executor), which saves the process start of every message. The SuperNode's node config says what
the node holds and where it keeps its clients' state:

    flower-supernode ... --node-config 'partition-id=0 state-dir="node0" threads=1 config="my.yaml"'

``partition-id`` (required): the simulation's client with that index; ``state-dir`` (default
``fl_node_state/partition-<id>``): c_i, residuals and node.log, kept across rounds and restarts; ``threads``:
torch threads; ``config`` (optional): the node's own copy of the run's config, which must be the same run.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from flwr.app import Message
from flwr.clientapp import ClientApp

from fl_lightning.deploy import framing

START_TIMEOUT_S = 300.0
IN_PROCESS = None  # the node's worker when it runs this app itself (--isolation process: fl_lightning.deploy.executor)
app = ClientApp()


def node_settings(node_config: dict) -> dict:
    if "partition-id" not in node_config:
        raise ValueError("the SuperNode has no partition-id; start it with --node-config 'partition-id=N'")
    partition = node_config["partition-id"]
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise ValueError(f"partition-id must be an integer, got {partition!r}; start the SuperNode with "
                         "--node-config 'partition-id=N'")
    state_dir = str(node_config.get("state-dir", os.path.join("fl_node_state", f"partition-{partition}")))
    return {"partition": partition, "state_dir": os.path.abspath(state_dir), "threads": node_config.get("threads"),
            "config": node_config.get("config")}


def _start_worker(settings: dict) -> None:
    os.makedirs(settings["state_dir"], exist_ok=True)
    command = [sys.executable, "-m", "fl_lightning.deploy.worker", "--state-dir", settings["state_dir"],
               "--partition-id", str(settings["partition"]), "--watch-pid", str(os.getppid())]
    if settings["threads"]:
        command += ["--threads", str(int(settings["threads"]))]
    if settings["config"]:
        command += ["--config", os.path.abspath(str(settings["config"]))]
    with open(os.path.join(settings["state_dir"], "node.log"), "a") as log:
        subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                         start_new_session=True)


def _connect(settings: dict) -> socket.socket:
    path, started = framing.socket_path(settings["state_dir"]), None
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(path)
            return conn
        except (FileNotFoundError, ConnectionRefusedError):
            conn.close()
        if started is None:
            _start_worker(settings)
            started = time.monotonic()
        elif time.monotonic() - started > START_TIMEOUT_S:
            raise TimeoutError(f"the node's worker did not start; see {settings['state_dir']}/node.log")
        time.sleep(0.05)


def forward(message, context, kind: str):
    """The message's records to the node's worker, its reply's records back (fl_lightning.deploy.protocol: the
    worker reads them; this process imports no torch)."""
    try:
        settings = node_settings(dict(context.node_config))
    except ValueError as err:
        return Message(framing.error_content(str(err)), reply_to=message)
    if IN_PROCESS is not None:
        content = IN_PROCESS.handle(settings, kind, message.content)
    else:
        with _connect(settings) as conn:
            framing.send_records(conn, {"kind": kind}, message.content)
            _, content = framing.receive_records(conn)
    return Message(content, reply_to=message)


@app.query()
def join(message, context):
    return forward(message, context, "join")


@app.train()
def train(message, context):
    return forward(message, context, "train")
