"""Issue 34, faults: a SuperNode killed during a run. Its own federation, ~40 s on 2 cores: beyond CI's time
for the Flower tests (tests/test_flower.py), so it runs when FL_FLOWER_FAULTS=1 is set."""
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("flwr", reason="Flower is an extra: pip install '.[flower]' (make test installs it)")
if os.environ.get("FL_FLOWER_FAULTS") != "1":
    pytest.skip("set FL_FLOWER_FAULTS=1 to kill a SuperNode during a run (~40 s)", allow_module_level=True)

from fl_lightning.deploy.local import LocalFederation  # noqa: E402
from test_flower import CONFIG, NODES, options, rows  # noqa: E402


def test_a_killed_node_is_a_client_that_did_not_report_and_rejoins(tmp_path, monkeypatch):
    """Node 0's machine goes down while it answers round 1: the round completes with the 2 clients that
    reported (as model.client_dropout does in a simulation); the node comes back under a new node id, joins
    again (keeping what is on its disk) and reports in the last round."""
    (tmp_path / "tiny.yaml").write_text(CONFIG)
    with LocalFederation(NODES, str(tmp_path), threads=1) as federation:
        log = os.path.join(federation.logs, "worker0.log")
        with ThreadPoolExecutor(1) as pool:
            run = pool.submit(federation.run, options(federation, "scaffold", "killed")
                              + ["--trainer.max_epochs", "5"], round_timeout=5.0)
            while not os.path.exists(log) or "round 1: client 0" not in open(log).read():
                assert not run.done(), "the run ended before node 0 trained round 1"
                time.sleep(0.02)
            federation.stop_node(0)
            federation.start_node(0)
            assert run.result() == 0
    reported = [(r["comm/clients_reported"], r["comm/clients_dropped"]) for r in rows(str(tmp_path / "killed"))]
    assert len(reported) == 5 and reported[0] == ("2.0", "1.0") and reported[-1] == ("3.0", "0.0")
    assert "joined run" in open(log).read().split("round 1: client 0")[-1]  # the restarted node joined again
