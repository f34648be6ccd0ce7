"""examples/flower_app under real Flower, as a user runs it: a SuperLink and one SuperNode per partition on loopback
(127.0.0.1 ports only, insecure), Flower's own ClientApp processes (``--isolation subprocess``) or the nodes' warm
workers (``--isolation process``: fl_lightning.deploy.executor loads the user's ClientApp once), the app submitted
with ``flwr run <app dir> local-deployment``. Its ServerApp (``AlgorithmStrategy``, FedBCGD N = 2) saves the same
global model as ``fl-lightning fit`` of the same settings, bit for bit. (Flower's simulation engine, with Ray:
tests/test_flower_app_simulation.py.) Every process is stopped at the end, also on a failure or timeout."""
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("flwr", reason="Flower is an extra: pip install '.[flower]' (make test installs it)")

from fl_lightning.deploy.local import LocalFederation, tool  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NODES, ROUNDS = 2, 2
FLWR_RUN_TIMEOUT_S = 240


class UserAppNodes(LocalFederation):
    """SuperNodes as a user starts them for their own app: Flower launches the ClientApp per message, node config
    ``partition-id`` and ``num-partitions``; one thread per process (the fit below too), so the sums are the same."""

    def __init__(self, nodes: int, workdir: str, isolation: str = "subprocess"):
        super().__init__(nodes, workdir, isolation=isolation)
        self.env["OMP_NUM_THREADS"] = "1"

    def node_config(self, partition: int) -> str:
        return f"partition-id={partition} num-partitions={self.nodes}"

    def stop(self) -> None:
        """The SuperLink's SuperExec runs in a session of its own (and the ServerApp under it): they watch their
        parent's pid and exit after it; any still alive 15 s later is killed here, by its pid."""
        spawned = [pid for process in self.processes.values() for pid in descendants(process.pid)]
        super().stop()
        self.left_over = alive(spawned, wait_s=15.0)
        for pid in self.left_over:
            os.kill(pid, signal.SIGKILL)


def descendants(root: int) -> list[int]:
    """Every process under ``root`` (by parent pid, whatever its session)."""
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def alive(pids: list[int], wait_s: float) -> list[int]:
    def running(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    deadline = time.monotonic() + wait_s
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [p for p in pids if running(p)]


def fit_model(rounds: int, clients: int) -> dict:
    """``fl-lightning fit`` of the app's settings (its task.py: LitDigits, digits, batch 32, SGD 0.1), one thread."""
    import sys

    import lightning.pytorch as L

    from fl_lightning import FederatedDataModule, FederatedModule
    from fl_lightning.algorithms import FedBCGD
    from tests.conftest import make_trainer

    sys.path.insert(0, str(REPO / "examples" / "flower_app"))
    try:
        from flower_app.task import LitDigits
    finally:
        sys.path.remove(str(REPO / "examples" / "flower_app"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        L.seed_everything(0, verbose=False)
        module = FederatedModule(LitDigits(), algorithm=FedBCGD(num_blocks=2), clients_per_round=clients,
                                 local_epochs=1, batch_size=32, lr=0.1, lr_decay=1.0, weight_decay=0.0)
        module.prints_summary = False
        make_trainer(rounds).fit(module, FederatedDataModule("digits", num_clients=clients))
    finally:
        torch.set_num_threads(threads)
    return module.net.state_dict()


@pytest.mark.parametrize("isolation", ["subprocess", "process"])
def test_the_flower_app_under_flwr_run_on_a_superlink_ends_with_the_fits_model(tmp_path, isolation):
    """``subprocess``: Flower starts a ClientApp process per message; ``process``: the node's warm worker
    (fl_lightning.deploy.executor) loads the user's ClientApp once and answers every message."""
    app = tmp_path / "flower-app"  # a copy: `flwr run` comments out the pyproject's federations once it moved them
    shutil.copytree(REPO / "examples" / "flower_app", app, ignore=shutil.ignore_patterns("__pycache__"))
    saved = tmp_path / "final_model.pt"
    overrides = (f"num-server-rounds={ROUNDS} num-clients={NODES} per-round={NODES} fraction-evaluate=0.0 "
                 f"save='{saved}'")
    with UserAppNodes(NODES, str(tmp_path), isolation) as nodes:
        pyproject = app / "pyproject.toml"
        pyproject.write_text(pyproject.read_text().replace("127.0.0.1:8000", f"127.0.0.1:{nodes.port}"))
        begun = time.monotonic()
        done = subprocess.run([tool("flwr"), "run", str(app), "local-deployment", "--stream", "--run-config",
                               overrides], cwd=tmp_path, env=nodes.env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=FLWR_RUN_TIMEOUT_S)
        print(f"{isolation}: flwr run of {ROUNDS} rounds on {NODES} SuperNodes took {time.monotonic() - begun:.1f} s")
        started = list(nodes.processes.values())
        logs = {path.name: path.read_text()[-2000:] for path in Path(nodes.logs).glob("*0.log")}
    assert saved.exists(), (logs, done.stdout[-3000:], done.stderr[-2000:])
    assert "Using SuperLink: local-deployment" in done.stdout
    assert "uploaded 1.137 d per client" in done.stdout  # FedBCGD N = 2 on LitDigits, 2 rounds (the fit's comm)
    final, want = torch.load(saved, weights_only=True), fit_model(ROUNDS, NODES)
    assert final.keys() == want.keys()
    for key, value in want.items():
        assert torch.equal(final[key], value), (key, (final[key] - value).abs().max())
    workers = NODES if isolation == "process" else 0  # the warm worker beside each SuperNode
    assert len(started) == 1 + NODES + workers and all(p.poll() is not None for p in started)  # all stopped
    assert nodes.left_over == []  # and every process Flower started under them (SuperExecs, ServerApp, ClientApps)
    assert "\n# [tool.flwr.federations.local-deployment]" in pyproject.read_text()  # Flower moved it to FLWR_HOME
    assert "\n[tool.flwr.federations.local-deployment]" in (REPO / "examples/flower_app/pyproject.toml").read_text()
