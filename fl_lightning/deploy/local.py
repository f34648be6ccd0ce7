"""``fl-lightning flower-local --config X --nodes N [fit options]``: a deployment on loopback in one
command. It starts a SuperLink and N SuperNodes (partition-id 0..N-1) on free loopback ports, runs the Flower
app (``flwr run``) with the config, stops them all — also on Ctrl-C — and leaves the same run folder and
metrics.csv as ``fit``, plus flower.csv (bytes in Flower's messages, seconds per node) and the processes'
logs under ``<workdir>/flower_local/``. Insecure (no TLS): loopback only.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Optional

import tomli_w

from fl_lightning.cli.options import pop_count
from fl_lightning.deploy.project import write_app
from fl_lightning.deploy.server_app import configured
from fl_lightning.errors import ConfigError

POLL_ENV = {"FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.2"}  # the SuperLink starts ServerApps; Flower polls every 1 s


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tool(name: str) -> str:
    """A Flower command installed beside this Python (the same environment), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), name)
    return beside if os.path.exists(beside) else (shutil.which(name) or name)


def wait_for_port(port: int, process: subprocess.Popen, log: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the SuperLink exited (code {process.returncode}); see {log}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"the SuperLink did not listen on 127.0.0.1:{port} within {timeout:.0f} s; see {log}")


class LocalFederation:
    """A SuperLink and SuperNodes on loopback, as a user starts them (README, docs/deployment.md)."""

    def __init__(self, nodes: int, workdir: str, threads: Optional[int] = None, logs: Optional[str] = None,
                 isolation: str = "process", tls: Optional[dict] = None):
        """``tls``: {"ca", "cert", "key"} PEM files for the SuperLink's HTTPS (the nodes and ``flwr`` check it
        against "ca"); None: insecure, loopback only."""
        self.nodes, self.workdir, self.threads, self.isolation = nodes, os.path.abspath(workdir), threads, isolation
        self.tls = tls
        self.logs = logs or os.path.join(self.workdir, "flower_local")
        self.home = tempfile.mkdtemp(prefix="fl-flwr-home-")  # FLWR_HOME: the connection, installed app bundles
        self.env = {**os.environ, "FLWR_HOME": self.home, **POLL_ENV,  # Flower starts its helpers by name
                    "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])}
        self.port = free_port()
        self.processes: dict[str, subprocess.Popen] = {}

    def _start(self, name: str, command: list[str]) -> subprocess.Popen:
        os.makedirs(self.logs, exist_ok=True)
        with open(os.path.join(self.logs, f"{name}.log"), "a") as log:
            process = subprocess.Popen(command, cwd=self.workdir, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        self.processes[name] = process
        return process

    def node_config(self, partition: int) -> str:
        state = os.path.join(self.logs, f"node{partition}")
        return f'partition-id={partition} state-dir="{state}"' + (f" threads={self.threads}" if self.threads else "")

    def start_node(self, partition: int) -> None:
        """A SuperNode; with ``isolation="process"`` (default) beside it the node's worker, which runs its
        ClientApp tasks in one warm process (fl_lightning.deploy.executor), else Flower starts a process per message."""
        runtime = free_port()
        self._start(f"supernode{partition}", [
            tool("flower-supernode"), *(["--root-certificates", self.tls["ca"]] if self.tls else ["--insecure"]),
            "--superlink", f"127.0.0.1:{self.port}", "--port", str(runtime),
            "--isolation", self.isolation, "--node-config", self.node_config(partition)])
        if self.isolation == "process":
            self._start(f"worker{partition}", [sys.executable, "-m", "fl_lightning.deploy.worker",
                                               "--runtime-api-address", f"127.0.0.1:{runtime}"])

    def start(self) -> "LocalFederation":
        security = (["--ssl-certfile", self.tls["cert"], "--ssl-keyfile", self.tls["key"], "--ssl-ca-certfile",
                     self.tls["ca"]] if self.tls else ["--insecure"])
        self._start("superlink", [tool("flower-superlink"), *security, "--disable-runtime-dependency-installation",
                                  "--host", "127.0.0.1", "--port", str(self.port)])
        wait_for_port(self.port, self.processes["superlink"], os.path.join(self.logs, "superlink.log"))
        with open(os.path.join(self.home, "config.toml"), "w") as f:
            f.write(f'[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = "127.0.0.1:{self.port}"\n'
                    + (f'root-certificates = "{self.tls["ca"]}"\n' if self.tls else "insecure = true\n"))
        for partition in range(self.nodes):
            self.start_node(partition)
        return self

    def stop_node(self, partition: int, sig: int = signal.SIGKILL) -> None:
        """As if the node's machine went down: its SuperNode and its worker."""
        self._stop(f"supernode{partition}", sig)
        self._stop(f"worker{partition}", sig)

    def _stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        process = self.processes.pop(name, None)
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, sig)  # its own session: the SuperExec and ClientApp processes it started too
            process.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def stop(self) -> None:
        for name in [n for n in self.processes if n != "superlink"] + ["superlink"]:
            self._stop(name)
        shutil.rmtree(self.home, ignore_errors=True)

    def run(self, fit_args: list[str], join_timeout: float = 120.0, round_timeout: float = 600.0) -> int:
        """``flwr run`` of the app with these fit options; the ServerApp's exit code. Several runs may go at once
        (from threads): each has its own run config and result file."""
        app = os.path.join(self.home, "app")
        if not os.path.exists(os.path.join(app, "pyproject.toml")):
            write_app(app)
        tag = f"{os.getpid()}-{time.monotonic_ns()}"
        result, overrides = (os.path.join(self.home, f"{tag}-{name}") for name in ("result.json", "run_config.toml"))
        config_at = fit_args.index("--config") + 1
        with open(overrides, "wb") as f:
            tomli_w.dump({"config": os.path.abspath(fit_args[config_at]), "workdir": self.workdir,
                          "args": shlex.join(fit_args[:config_at - 1] + fit_args[config_at + 1:]),
                          "result-file": result, "join-timeout": float(join_timeout),
                          "round-timeout": float(round_timeout)}, f)
        with open(os.path.join(self.logs, f"flwr_run-{tag}.log"), "w") as log:
            subprocess.run([tool("flwr"), "run", app, "local", "--stream", "--run-config", overrides], cwd=self.workdir,
                           env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, check=False)
        if not os.path.exists(result):
            print(f"fl-lightning: error: the Flower run ended without a result; see {log.name}", file=sys.stderr)
            return 1
        with open(result) as f:
            outcome = json.load(f)
        for line in outcome["lines"]:  # the run's summary, or its one-line error
            print(line, file=sys.stderr if outcome["code"] else sys.stdout)
        return int(outcome["code"])

    def __enter__(self) -> "LocalFederation":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(args: list[str]) -> int:
    """``flower-local --config X --nodes N [fit options]``: the exit code (130 on Ctrl-C)."""
    nodes, rest = pop_count(args, "--nodes", " (one SuperNode per client)")
    if nodes is None or "--config" not in rest:
        raise ConfigError("flower-local", "needs --config FILE and --nodes N (N = data.num_clients: one SuperNode "
                          "per client)")
    num_clients = configured(rest)[0].datamodule.num_clients  # refused here, before any process starts
    if nodes != num_clients:
        raise ConfigError("--nodes", f"{nodes} SuperNodes for data.num_clients {num_clients}: flower-local starts one "
                          f"SuperNode per client; give --nodes {num_clients}")
    threads = next((rest[j + 1] for j, w in enumerate(rest[:-1]) if w == "--threads"), None)
    federation = LocalFederation(nodes, os.getcwd(), int(threads) if threads and threads.isdigit() else None)
    previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        federation.start()
        code = federation.run(rest)
    except KeyboardInterrupt:
        print("fl-lightning: interrupted; the SuperLink and SuperNodes are stopped", file=sys.stderr)
        code = 130
    finally:
        federation.stop()
        signal.signal(signal.SIGTERM, previous)
    return code
