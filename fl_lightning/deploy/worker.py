"""A SuperNode's warm worker: one long-lived process per node that holds torch, the data and the
working model, so that a round costs training, not start-up.

Flower 1.42's SuperNode starts a fresh ``flwr-clientapp`` process for every message (both isolation modes):
importing torch and Lightning and building the run there took seconds per message. The ClientApp
(fl_lightning.deploy.client_app) therefore only forwards each message's bytes over a local socket to this
process, which it starts on the node's first message. It lives as long as the SuperNode (it watches the
SuperNode's process) and logs each join and round to ``<state dir>/node.log``.

    python -m fl_lightning.deploy.worker --state-dir DIR --partition-id N [--threads T] [--config FILE] --watch-pid P
    python -m fl_lightning.deploy.worker --runtime-api-address HOST:PORT     (beside flower-supernode --isolation
                                                                               process: fl_lightning.deploy.executor)
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import time
import traceback

import torch

from flwr.app import ConfigRecord, RecordDict

from fl_lightning.deploy import framing, protocol
from fl_lightning.deploy.node import NodeSession
from fl_lightning.deploy.run_config import build_run
from fl_lightning.errors import FLUserError
from fl_lightning.runs.identity import run_id


class Workers:
    """In ``--isolation process``: the workers of the node's state directories, made on first use."""

    def __init__(self):
        self.workers: dict[str, Worker] = {}

    def handle(self, settings: dict, kind: str, content: RecordDict) -> RecordDict:
        worker = self.workers.get(settings["state_dir"])
        if worker is None:
            os.makedirs(settings["state_dir"], exist_ok=True)
            if settings["threads"]:
                torch.set_num_threads(int(settings["threads"]))
            worker = self.workers[settings["state_dir"]] = Worker(settings["state_dir"], settings["partition"],
                                                                  settings["config"])
        return worker.handle(kind, content)


class Worker:
    """The node's sessions, one per run id (a node may serve several runs in turn)."""

    def __init__(self, state_dir: str, partition_id: int, own_config: str | None):
        self.state_dir, self.partition_id, self.own_config = state_dir, partition_id, own_config
        self.sessions: dict[str, NodeSession] = {}

    def _directory(self, run: str) -> str:
        return os.path.join(self.state_dir, run)

    def join(self, request: dict) -> dict:
        directory = self._directory(request["run_id"])
        new = not os.path.isdir(directory)
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "config.yaml"), "w") as f:
            f.write(request["config"])
        try:
            session = NodeSession(directory, self.partition_id, fresh=request["fresh"])
        except FLUserError:
            if new:  # nothing of a run this node cannot take part in stays on its disk
                shutil.rmtree(directory)
            raise
        self.sessions[request["run_id"]] = session
        own = run_id(build_run(self.own_config).config.as_dict()) if self.own_config else session.run_id
        log(f"joined run {request['run_id']} as partition {self.partition_id} ({'fresh' if request['fresh'] else 'resumed'})")
        return {"partition_id": self.partition_id, "run_id": own, **session.summary}

    def train(self, job: protocol.Job) -> RecordDict:
        session = self.sessions.get(job.run_id)
        if session is None:  # this node restarted since it joined: its state is on its disk
            if not os.path.exists(os.path.join(self._directory(job.run_id), "config.yaml")):
                raise FLUserError(f"this node never joined run {job.run_id}; restart the run")
            session = self.sessions[job.run_id] = NodeSession(self._directory(job.run_id), self.partition_id,
                                                              fresh=False)
            log(f"rejoined run {job.run_id} from {session.directory}")
        reply = session.train(job)
        done = reply[protocol.REPLY]
        log(f"round {job.round + 1}: client {self.partition_id}, {done['steps']} steps, {done['seconds']:.2f} s")
        return reply

    def handle(self, kind: str, content: RecordDict) -> RecordDict:
        """A ``join`` (its request and answer: ConfigRecords) or a ``train`` (a job → its reply), or the one-line
        error the server hears."""
        try:
            if kind == "join":
                answer = self.join(dict(content[protocol.JOIN_REQUEST]))
                return RecordDict({protocol.JOIN_ANSWER: ConfigRecord(answer)})
            return self.train(protocol.read_job(content))
        except FLUserError as err:
            log(f"error: {err}")
            return framing.error_content(str(err))
        except Exception as err:  # the server hears one line; the node's log keeps the traceback
            traceback.print_exc()
            return framing.error_content(f"{type(err).__name__}: {err} (node log: {self.state_dir}/node.log)")


def log(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} fl-lightning node: {line}", flush=True)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fl_lightning.deploy.worker")
    parser.add_argument("--runtime-api-address", default=None)
    parser.add_argument("--state-dir")
    parser.add_argument("--partition-id", type=int)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--config", default=None)
    parser.add_argument("--watch-pid", type=int)
    args = parser.parse_args(argv)
    if args.runtime_api_address:
        from fl_lightning.deploy import client_app, executor

        client_app.IN_PROCESS = Workers()
        log(f"worker {os.getpid()} takes the ClientApp tasks of the SuperNode at {args.runtime_api_address}")
        executor.serve(args.runtime_api_address)
        log("SuperNode gone: worker stops")
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    worker = Worker(args.state_dir, args.partition_id, args.config)
    path = framing.socket_path(args.state_dir)
    if os.path.exists(path):
        os.remove(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)
    server.settimeout(1.0)
    log(f"worker {os.getpid()} for partition {args.partition_id} listening (SuperNode process {args.watch_pid})")
    try:
        while alive(args.watch_pid):
            try:
                conn, _ = server.accept()
            except socket.timeout:
                continue
            with conn:
                conn.settimeout(None)
                try:
                    header, content = framing.receive_records(conn)
                    framing.send_records(conn, {}, worker.handle(header["kind"], content))
                except OSError as err:  # the ClientApp went away mid-message (its SuperNode stopped)
                    log(f"connection lost: {err}")
    finally:
        server.close()
        if os.path.exists(path):
            os.remove(path)
        log("SuperNode gone: worker stops")
    return 0


if __name__ == "__main__":
    sys.exit(main())
