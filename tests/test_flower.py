"""The same algorithms deployed on Flower — a SuperLink and one SuperNode per client started as a user
starts them (real processes on free loopback ports, no Ray), three runs (FedAvg, FedBCGD, SCAFFOLD) against
them at once, each compared with ``fl-lightning fit`` of the same config: the same arithmetic, so every
metric but the wall times is equal, bit for bit. The data is scikit-learn's digits (embedded: no download).
CI time: ~70 s on 2 cores. A node restarted mid-run, a node killed mid-round and TLS: tests/test_flower_faults.py."""
import csv
import glob
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("flwr", reason="Flower is an extra: pip install '.[flower]' (make test installs it)")

from fl_lightning.cli import main  # noqa: E402
from fl_lightning.deploy.local import LocalFederation  # noqa: E402

NODES = 3
CONFIG = """\
seed_everything: 0
trainer:
  max_epochs: 3
  enable_progress_bar: false
  enable_model_summary: false
  logger:
    class_path: pytorch_lightning.loggers.CSVLogger
    init_args: {save_dir: runs, name: tiny}
model:
  clients_per_round: 3
  local_epochs: 1
  batch_size: 32
  lr: 0.1
  network:
    class_path: fl_lightning.models.MLP
    init_args: {hidden: [32]}
data:
  dataset: digits
  num_clients: 3
  partition: dirichlet
  dirichlet_rho: 0.5
"""
ALGORITHMS = {"fedavg": [], "fedbcgd": ["--model.algorithm.num_blocks", "2"], "scaffold": []}


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("flower")
    (workdir / "tiny.yaml").write_text(CONFIG)
    with LocalFederation(NODES, str(workdir), threads=1) as started:
        yield started


def options(federation, algorithm: str, save_dir: str) -> list[str]:
    return ["--config", os.path.join(federation.workdir, "tiny.yaml"), "--model.algorithm", algorithm,
            *ALGORITHMS[algorithm], "--threads", "1", "--trainer.logger.init_args.save_dir", save_dir]


def rows(save_dir: str, name: str = "metrics.csv") -> list[dict]:
    """The run's rows, over its version_N folders (a resumed fit logs to the next one)."""
    out = []
    for path in sorted(glob.glob(os.path.join(save_dir, "tiny", "*", "version_*", name))):
        with open(path) as f:
            out += list(csv.DictReader(f))
    return out


def same(got: dict, want: dict, stopped: bool) -> bool:
    """Every metric but the wall times; a run stopped early (resumed later) also logged test/* then."""
    keys = [k for k in want if not k.startswith("time/") and not (stopped and k.startswith("test/"))]
    return [got[k] for k in keys] == [want[k] for k in keys]


def test_three_algorithms_on_flower_equal_the_simulation(federation, monkeypatch):
    monkeypatch.chdir(federation.workdir)
    with ThreadPoolExecutor(len(ALGORITHMS)) as pool:  # three Flower runs at once on the same nodes
        runs = [pool.submit(federation.run, options(federation, a, f"flower_{a}")) for a in ALGORITHMS]
        for algorithm in ALGORITHMS:  # meanwhile (the Flower runs mostly wait), the simulations
            assert main(["fit", *options(federation, algorithm, f"sim_{algorithm}")]) == 0
        assert [run.result() for run in runs] == [0] * len(ALGORITHMS)
    for algorithm in ALGORITHMS:
        deployed, simulated = rows(f"flower_{algorithm}"), rows(f"sim_{algorithm}")
        assert len(deployed) == len(simulated) == 3
        for number, (got, want) in enumerate(zip(deployed, simulated), start=1):
            assert same(got, want, stopped=False), (algorithm, number, got, want)
        sent = rows(f"flower_{algorithm}", "flower.csv")
        assert len(sent) == 3 * NODES and all(r["reported"] == "1" for r in sent)
        in_messages = sum(int(r["sent_message_bytes"]) + int(r["received_message_bytes"]) for r in sent)
        counted = sum(int(r["counted_download_bytes"]) + int(r["counted_upload_bytes"]) for r in sent)
        assert counted == int(float(deployed[-1]["comm/upload_bytes"]) + float(deployed[-1]["comm/download_bytes"]))
        per_message = (in_messages - counted) / (2 * len(sent))  # zip archive entries per tensor, the plan, headers
        print(f"{algorithm}: bytes in Flower's messages / counted bytes = {in_messages / counted:.3f} "
              f"({per_message:.0f} bytes more per message); seconds per round "
              f"{sum(float(r['round_trip_s']) for r in sent[::NODES]) / 3:.2f}")
        assert 0 < per_message < 8192


def test_a_node_builds_the_servers_run_without_the_command_line(tmp_path):
    """A SuperNode parses the run's config with the fit's own parser, not the command-line class: the same config
    (its YAML byte for byte, so the same run id), the same model and data, registry names expanded."""
    from fl_lightning.cli.lightning_cli import FederatedCLI
    from fl_lightning.deploy.node import data_summary
    from fl_lightning.deploy.run_config import build_run
    from fl_lightning.runs.identity import run_id

    (tmp_path / "run.yaml").write_text(CONFIG.replace("  lr: 0.1\n", "  lr: 0.1\n  algorithm: fedbcgd\n"
                                                      "  compression: topk\n"))
    options = ["--model.algorithm.num_blocks", "2"]
    server = FederatedCLI(args=["--config", str(tmp_path / "run.yaml"), *options], run=False)
    node = build_run(str(tmp_path / "run.yaml"), options)
    assert node.parser.dump(node.config) == server.parser.dump(server.config)
    assert run_id(node.config.as_dict()) == run_id(server.config.as_dict())
    assert (node.model.algorithm.name, type(node.model.codec).__name__) == ("fedbcgd", "TopK")
    assert node.model.algorithm.num_blocks == 2 and node.config.model.network.init_args.num_classes == 10
    assert data_summary(node, 1) == data_summary(server, 1)
    assert not (tmp_path / "runs").exists() and not hasattr(sys.modules["fl_lightning.deploy.node"], "FederatedCLI")
    from fl_lightning.errors import FLUserError
    with pytest.raises(FLUserError, match=r"^model.lr: must be > 0, got -1.0"):
        build_run(str(tmp_path / "run.yaml"), ["--model.lr", "-1"])


def test_a_node_outside_the_config_answers_one_line_and_keeps_nothing(tmp_path):
    """A SuperNode started with a partition id the config does not have: its answer to the join is the one line
    the server prints before anything is written (exit code 2), and the node keeps nothing of that run."""
    from flwr.app import ConfigRecord, RecordDict

    from fl_lightning.deploy import protocol
    from fl_lightning.cli.lightning_cli import FederatedCLI
    from fl_lightning.deploy.worker import Worker
    from fl_lightning.runs.identity import run_id

    (tmp_path / "server.yaml").write_text(CONFIG)
    server = FederatedCLI(args=["--config", str(tmp_path / "server.yaml")], run=False)
    request = {"run_id": run_id(server.config.as_dict()), "config": server.parser.dump(server.config), "fresh": True}
    answer = Worker(str(tmp_path / "node"), 3, None).handle("join", RecordDict({protocol.JOIN_REQUEST:
                                                                                ConfigRecord(request)}))
    assert list(answer) == [protocol.ERROR] and answer[protocol.ERROR]["line"] == (
        "partition-id: 3 is outside this run's clients 0..2 (data.num_clients 3); start the SuperNode with "
        "--node-config 'partition-id=N' for 0 ≤ N < 3")
    assert os.listdir(tmp_path / "node") == []


def test_a_node_with_another_config_or_other_data_is_named_in_one_line(tmp_path):
    """The node's own config must be the server's run (its run id), its data the run's shape and classes."""
    from fl_lightning.deploy.join import Membership, mismatch
    from fl_lightning.deploy.node import data_summary
    from fl_lightning.cli.lightning_cli import FederatedCLI
    from fl_lightning.deploy.worker import Worker
    from fl_lightning.runs.identity import run_id

    (tmp_path / "server.yaml").write_text(CONFIG)
    (tmp_path / "node.yaml").write_text(CONFIG.replace("lr: 0.1", "lr: 0.2"))
    server = FederatedCLI(args=["--config", str(tmp_path / "server.yaml")], run=False)
    request = {"run_id": run_id(server.config.as_dict()), "config": server.parser.dump(server.config), "fresh": True}
    membership = Membership(None, request["run_id"], request["config"], data_summary(server), fresh=True)
    answer = Worker(str(tmp_path / "node"), 1, str(tmp_path / "node.yaml")).join(request)
    assert membership.problem(answer) == (
        f"SuperNode with partition-id 1: its config is run {answer['run_id']}, the server's is run "
        f"{request['run_id']}; start it with the server's config (or none: it then takes the server's)")
    same = Worker(str(tmp_path / "node_same"), 1, str(tmp_path / "server.yaml")).join(request)
    assert membership.problem(same) is None
    assert mismatch({**same, "shape": [28, 28]}, membership.summary) == (
        "SuperNode with partition-id 1: its samples have shape (28, 28), the run's network takes (1, 8, 8); give the "
        "node data of the configured data set")
    assert mismatch({**same, "max_label": 10}, membership.summary).startswith(
        "SuperNode with partition-id 1: its data has 10 classes (largest label 10), the run has 10")


def test_flower_commands_without_flower_say_what_to_install(tmp_path, monkeypatch, capsys):
    (tmp_path / "tiny.yaml").write_text(CONFIG)
    monkeypatch.setitem(sys.modules, "flwr", None)  # as if Flower were not installed
    assert main(["flower-local", "--config", "tiny.yaml", "--nodes", "3"]) == 2
    assert capsys.readouterr().err == "fl-lightning: error: flower-local needs Flower: pip install " \
                                      "'fl-lightning[flower]'\n"


def test_flower_local_refuses_a_bad_node_count_in_one_line(tmp_path, capsys):
    (tmp_path / "tiny.yaml").write_text(CONFIG)
    assert main(["flower-local", "--config", "tiny.yaml", "--nodes", "0"]) == 2
    assert capsys.readouterr().err == "fl-lightning: error: --nodes: must be an integer ≥ 1 (one SuperNode per " \
                                      "client), got '0'\n"



@pytest.mark.parametrize("args,line", [
    (["--nodes", "4"], "--nodes: 4 SuperNodes for data.num_clients 3: flower-local starts one SuperNode per client; "
                       "give --nodes 3"),
    (["--nodes", "2"], "--nodes: 2 SuperNodes for data.num_clients 3: flower-local starts one SuperNode per client; "
                       "give --nodes 3"),
    (["--nodes", "3", "--model.system", "uniform"], "model.system: simulated devices are for simulation; on Flower "
                                                    "the nodes are real: unset it"),
    (["--nodes", "3", "--model.privacy.noise_multiplier", "1.0", "--model.privacy.clip", "0.5"],
     "model.privacy: client-level DP is not deployable on Flower yet; unset it"),
    (["--nodes", "3", "--model.compression", "powersgd"],
     "model.compression: the codec's messages are not deployable on Flower yet; use topk, randk or qsgd"),
])
def test_flower_local_refuses_before_any_process_starts(tmp_path, monkeypatch, capsys, args, line):
    """No SuperLink, no SuperNode: refused from the config alone (no log folder, no run folder)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(CONFIG)
    assert main(["flower-local", "--config", "tiny.yaml", *args]) == 2
    assert capsys.readouterr().err == f"fl-lightning: error: {line}\n"
    assert sorted(os.listdir(tmp_path)) == ["tiny.yaml"]


def test_the_fits_connector_asks_the_deployments_refusal_of_the_runner_its_callback_brings(tmp_path, monkeypatch,
                                                                                           capsys):
    """The ServerApp's fit (``FlowerClients`` brings the nodes' runner): the connector asks ``NodeClients.refuse``
    as it asks the options' runner, so a fit that reaches it without ``server_app.configured`` is refused alike."""
    from fl_lightning.deploy.remote import FlowerClients, RemoteClients

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(CONFIG)
    code = main(["fit", "--config", "tiny.yaml", "--model.system", "uniform"],
                callbacks=[FlowerClients(RemoteClients(None, 1.0))])
    assert code == 2
    assert capsys.readouterr().err == ("fl-lightning: error: model.system: simulated devices are for simulation; on "
                                       "Flower the nodes are real: unset it\n")
    assert sorted(os.listdir(tmp_path)) == ["tiny.yaml"]


def test_ckpt_path_last_resumes_the_nodes_only_where_the_deployed_runs_fit_finds_a_checkpoint(tmp_path, monkeypatch):
    """The ServerApp tells its nodes to keep their rows (resume) only where its fit will resume: ``--ckpt_path
    last`` with a checkpoint of this run in the deployed run's folder (``...,deployed=flower``); the simulation's
    checkpoint of the same run id, in its own folder, is not the deployed run's."""
    from fl_lightning.deploy.server_app import configured

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(CONFIG)
    args = ["--config", "tiny.yaml", "--trainer.max_epochs", "1", "--threads", "1"]
    assert configured([*args, "--ckpt_path", "last"])[1] is False  # nothing written yet
    assert main(["fit", *args]) == 0
    assert configured([*args, "--ckpt_path", "last"])[1] is False  # the simulation's folder only
    [simulated] = glob.glob(os.path.join("runs", "tiny", "*"))
    os.rename(simulated, simulated + ",deployed=flower")
    assert configured([*args, "--ckpt_path", "last"])[1] is True
    assert configured([*args, "--ckpt_path=null"])[1] is False
    [checkpoint] = glob.glob(os.path.join("runs", "tiny", "*", "version_0", "checkpoints", "*.ckpt"))
    assert configured([*args, "--ckpt_path", checkpoint])[1] is True


def test_the_clientapp_forwards_records_to_the_nodes_warm_worker_over_its_socket(tmp_path):
    """Flower's default ``--isolation subprocess``: the ClientApp process starts the node's worker on the first
    message and forwards each message's records over the local socket; the worker's answer (here the one-line
    refusal of a partition outside the config) comes back as the reply's records."""
    from flwr.app import ConfigRecord, Message, RecordDict

    from fl_lightning.cli.lightning_cli import FederatedCLI
    from fl_lightning.deploy import client_app, protocol
    from fl_lightning.deploy.inline_grid import InlineGrid
    from fl_lightning.runs.identity import run_id

    (tmp_path / "server.yaml").write_text(CONFIG)
    server = FederatedCLI(args=["--config", str(tmp_path / "server.yaml")], run=False)
    request = {"run_id": run_id(server.config.as_dict()), "config": server.parser.dump(server.config), "fresh": True}
    grid = InlineGrid(client_app.app, 4)  # node i holds partition i; partition 3 is outside the config's 3 clients
    node = next(n for n, c in grid.contexts.items() if c.node_config["partition-id"] == 3)
    grid.contexts[node].node_config["state-dir"] = str(tmp_path / "node")
    message = Message(RecordDict({protocol.JOIN_REQUEST: ConfigRecord(request)}), dst_node_id=node,
                      message_type="query")
    worker = None
    try:
        (reply,) = grid.send_and_receive([message])
        worker = subprocess.run(["pgrep", "-f", f"state-dir {tmp_path / 'node'}"], capture_output=True, text=True)
        assert protocol.failure(reply) == ("partition-id: 3 is outside this run's clients 0..2 (data.num_clients 3); "
                                           "start the SuperNode with --node-config 'partition-id=N' for 0 ≤ N < 3")
    finally:
        for pid in (worker.stdout.split() if worker is not None else []):
            os.kill(int(pid), 9)
