"""examples/flower_app in Flower's simulation engine, as a user runs it: ``flwr run <app dir> local-simulation``
(Flower starts its own local SuperLink with ``--simulation``; Ray runs the ClientApps), 2 simulated SuperNodes, 1 CPU
for Ray and per ClientApp, one thread. Its ServerApp (``AlgorithmStrategy``, FedBCGD N = 2) saves the same global
model as ``fl-lightning fit`` of the same settings. Needs Ray (``pip install '.[simulation]'``); every process Flower
and Ray started is stopped at the end (found by this run's own FLWR_HOME in their environment, killed by pid: never
``ray stop``, which would stop every Ray on the machine)."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

pytest.importorskip("flwr", reason="Flower is an extra: pip install '.[flower]' (make test installs it)")
pytest.importorskip("ray", reason="Flower's simulation engine needs Ray: pip install '.[simulation]' "
                                  "(make test installs it)")

from fl_lightning.deploy.local import POLL_ENV, free_port, tool  # noqa: E402
from tests.test_flower_app_deployment import REPO, alive, fit_model  # noqa: E402

NODES, ROUNDS = 2, 2
FLWR_RUN_TIMEOUT_S = 110


def tagged(home: str) -> list[int]:
    """Every live process whose environment holds this run's FLWR_HOME: Flower's local SuperLink (detached, a
    session of its own), its SuperExec and simulation process, and Ray's raylet, GCS and workers under them."""
    tag, pids = f"FLWR_HOME={home}".encode(), []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if tag in f.read().split(b"\0"):
                    pids.append(int(entry))
        except OSError:
            continue
    return [pid for pid in pids if pid != os.getpid()]


def stop(home: str, wait_s: float = 15.0) -> list[int]:
    """SIGTERM to each of them, SIGKILL to any left after ``wait_s``; returns those that needed SIGKILL."""
    pids = tagged(home)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    left = alive(pids, wait_s)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def test_the_flower_app_under_flwr_run_in_simulation_ends_with_the_fits_model(tmp_path):
    app = tmp_path / "flower-app"  # a copy: `flwr run` comments out the pyproject's federations once it moved them
    shutil.copytree(REPO / "examples" / "flower_app", app, ignore=shutil.ignore_patterns("__pycache__"))
    saved = tmp_path / "final_model.pt"
    home = str(tmp_path / "flwr-home")
    ray_tmp = tempfile.mkdtemp(prefix="fl-ray-")  # short: Ray's socket paths must stay under 107 characters
    env = {**os.environ, **POLL_ENV, "FLWR_HOME": home, "RAY_TMPDIR": ray_tmp, "OMP_NUM_THREADS": "1",
           "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]),
           # the local SuperLink on free ports (Flower's default 39091/39093 may be another user's)
           "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port()), "FLWR_LOCAL_CONTROL_API_PORT": str(free_port()),
           # else Flower `uv sync`s the app's dependencies into a fresh environment per run (fl-lightning is not
           # on an index; this environment already has them)
           "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    env.pop("RAY_ADDRESS", None)  # a Ray of its own, not a cluster this shell may point at
    overrides = (f"num-server-rounds={ROUNDS} num-clients={NODES} per-round={NODES} fraction-evaluate=0.0 "
                 f"save='{saved}'")
    try:
        done = subprocess.run([tool("flwr"), "run", str(app), "local-simulation", "--stream",
                               "--federation-config", f"num-supernodes={NODES} client-resources-num-cpus=1 "
                               "init-args-num-cpus=1", "--run-config", overrides],
                              cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=FLWR_RUN_TIMEOUT_S)
    finally:
        started = tagged(home)
        killed = stop(home)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    log = Path(home) / "local-superlink" / "superlink.log"
    assert saved.exists(), (done.stdout[-4000:], done.stderr[-2000:], log.read_text()[-2000:] if log.exists() else "")
    assert "Using SuperLink: local-simulation" in done.stdout
    assert f"Federation `@none/default` ({NODES} simulated SuperNodes)" in done.stdout
    assert "ClientAppActor" in done.stdout  # Ray ran the ClientApps
    assert "uploaded 1.137 d per client" in done.stdout  # FedBCGD N = 2 on LitDigits, 2 rounds (the fit's comm)
    final, want = torch.load(saved, weights_only=True), fit_model(ROUNDS, NODES)
    assert final.keys() == want.keys()
    for key, value in want.items():
        assert torch.equal(final[key], value), (key, (final[key] - value).abs().max())
    assert started and tagged(home) == [], killed  # the local SuperLink, SuperExec, simulation and Ray: all stopped
