"""FedBuff — the event queue over simulated time, staleness-weighted buffered server steps
(FedAvg and FedBCGD's per-coordinate averaging), determinism, one-line refusals and exact resume after a
real SIGKILL. Real Trainer, no mocks."""
import csv
import glob
import heapq
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from fl_lightning import FederatedDataModule
from fl_lightning.callbacks.base import FLCallback
from fl_lightning.errors import ConfigError
from fl_lightning.systems import Asynchronous
from tests.conftest import fl_module, make_trainer
from tests.test_resume import digit_images
from tests.test_systems import write_trace

BATCH = 16
SPEEDS = [50.0, 80.0, 110.0, 140.0, 170.0, 200.0, 230.0, 260.0]


class Launches(FLCallback):
    """Every launched client (in launch order) and every server step's aggregated update."""

    def __init__(self):
        self.launches, self.updates, self.starts, self.samples = [], [], [], 0

    def on_local_gradient(self, client):
        self.samples += len(client.batch[1])  # the samples its steps went through, partial batches as they are

    def on_client_end(self, client):
        delta = (client.vector - client.global_vector).detach().clone()
        self.launches.append((client.client_id, list(client.upload_ranges), delta, self.samples))
        self.starts.append(client.global_vector.detach().clone())
        self.samples = 0

    def on_server_update(self, server):
        self.updates.append(server.update.detach().clone())


def fit(tmp_path, steps, algorithm="fedavg", name="fb", **hp):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))
    recorder = Launches()
    module = fl_module(net, algorithm, clients_per_round=4, batch_size=BATCH, lr=0.05,
                       system=write_trace(tmp_path / "t.csv", SPEEDS),
                       asynchronous=Asynchronous(buffer_size=2, concurrency=3), **hp)
    train, test = digit_images()
    data = FederatedDataModule.from_datasets(train, test, num_clients=8, dirichlet_rho=0.5, val_fraction=0.0)
    from pytorch_lightning.loggers import CSVLogger
    logger = CSVLogger("runs", name=name)
    make_trainer(steps, logger=logger, callbacks=[recorder]).fit(module, data)
    with open(f"{logger.log_dir}/metrics.csv") as f:
        return module, recorder, list(csv.DictReader(f))


def replay(module, recorder, steps, concurrency=3, buffer_size=2):
    """The event queue by hand: launch i starts at the arrival that freed its slot; its time is the whole-model
    download + samples processed / speed + its block's upload + 0.5 s latency (10 Mbit/s each way); ties: launch
    order. The client launched at the K-th arrival starts after that server step (staleness counted from it)."""
    bandwidth, numel = 10.0 * 1e6 / 8, module.flat.numel
    duration = [4 * numel / bandwidth + n / SPEEDS[c] + 4 * sum(b - a for a, b in r) / bandwidth + 0.5
                for c, r, _, n in recorder.launches]
    queue = sorted((duration[i], i) for i in range(concurrency))  # a heap
    start, launched, times, updates = [0] * concurrency, concurrency, [], []
    for step in range(steps):
        total, count = torch.zeros(numel), torch.zeros(numel)
        for arrival in range(buffer_size):
            now, i = heapq.heappop(queue)
            in_flight = {recorder.launches[j][0] for _, j in queue}
            assert recorder.launches[launched][0] not in in_flight  # a new client is never one still in flight
            heapq.heappush(queue, (now + duration[launched], launched))
            start.append(step + (arrival == buffer_size - 1))
            launched += 1
            weight = (1 + step - start[i]) ** -0.5  # 1/sqrt(1 + staleness)
            for a, b in recorder.launches[i][1]:
                total[a:b] += weight * recorder.launches[i][2][a:b]
                count[a:b] += 1
        times.append(now)
        updates.append((total / count.clamp_min(1))[:module.flat.num_params])
    return times, updates, launched


@pytest.mark.parametrize("algorithm,options", [("fedavg", {}), ("fedbcgd", {"num_blocks": 2})])
def test_fedbuff_server_steps_are_the_staleness_weighted_buffer_at_its_kth_arrival(tmp_path, algorithm, options):
    module, recorder, rows = fit(tmp_path, 4, algorithm, **options)
    times, updates, launched = replay(module, recorder, 4)
    assert len(recorder.launches) == launched == 3 + 4 * 2  # C at the start, one more after every arrival
    assert [float(r["time/sim_s"]) for r in rows] == pytest.approx(times, rel=1e-12)
    assert max(float(r["sys/staleness_max"]) for r in rows) >= 1  # some updates really were stale
    # launches 3 and 4 come at step 1's two arrivals, 5 at step 2's first: 4 gets the model after step 1, as 5 does
    assert torch.equal(recorder.starts[4], recorder.starts[5]) and not torch.equal(recorder.starts[3], recorder.starts[4])
    if algorithm == "fedavg":  # x¹ = x⁰ + Δ̄ (η_g = 1, no server momentum)
        d = module.flat.num_params
        torch.testing.assert_close(recorder.starts[4][:d] - recorder.starts[3][:d], recorder.updates[0],
                                   rtol=1e-5, atol=1e-6)
    for got, expected in zip(recorder.updates, updates):
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7)
    with open("runs/fb/version_0/timeline.csv") as f:  # each step's K arrivals: the last one is the step's time
        timeline = list(csv.DictReader(f))
    assert [int(r["round"]) for r in timeline] == [1, 1, 2, 2, 3, 3, 4, 4]
    for step, row in enumerate(rows):
        arrivals = [float(r["end_s"]) for r in timeline[2 * step:2 * step + 2]]
        assert arrivals[-1] == pytest.approx(float(row["time/sim_s"]), rel=1e-12) and arrivals == sorted(arrivals)
    assert float(rows[-1]["sys/available"]) == 8  # the trace's clients are always online
    if algorithm == "fedbcgd":  # a block update carries its block: about half the model per client
        assert all(0 < sum(b - a for a, b in r) < module.flat.numel for _, r, _, _ in recorder.launches)
    _, again, rows_again = fit(tmp_path, 4, algorithm, name="again", **options)
    wall = lambda rs: [{k: v for k, v in r.items() if k not in ("time/round_s", "time/wall_s")} for r in rs]
    assert wall(rows_again) == wall(rows)  # deterministic for a seed


def test_fedbuff_refuses_what_does_not_combine_in_one_line(tmp_path):
    """Clashes between options when the module is built; clashes with the fit's parts (its hooks' and codec's
    traits, fl_lightning.assembly.fit) once the fit is described, before any run file."""
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    data = FederatedDataModule("digits", num_clients=20)

    def checked(*args, **kwargs):
        fl_module(*args, clients_per_round=5, **kwargs).check_compatible(data)

    with pytest.raises(ConfigError, match=r"^model.asynchronous: .*scaffold has per-client hooks"):
        checked(net, "scaffold", system="uniform", asynchronous="fedbuff")
    with pytest.raises(ConfigError, match=r"^model.asynchronous: .*fedbcgd_freezing has per-client hooks"):
        checked(net, "fedbcgd_freezing", system="uniform", asynchronous="fedbuff")
    with pytest.raises(ConfigError, match=r"^model.asynchronous: needs a simulated system"):
        fl_module(net, "fedavg", asynchronous="fedbuff")
    with pytest.raises(ConfigError, match=r"^model.round_policy: is for synchronous rounds"):
        checked(net, "fedavg", system="uniform", round_policy="over_selection", asynchronous="fedbuff")
    with pytest.raises(ConfigError, match=r"^model.compression: keeps per-client state"):
        checked(net, "topk", error_feedback=True, system="uniform", asynchronous="fedbuff")
    with pytest.raises(ConfigError, match=r"^model.client_dropout: is not supported with model.asynchronous"):
        checked(net, "fedavg", system="uniform", asynchronous="fedbuff", client_dropout=0.1)
    checked(net, "topk", error_feedback=False, system="uniform", asynchronous="fedbuff")  # stateless: accepted
    checked(net, "fedbcgd", system="uniform", asynchronous="fedbuff")  # one block each, the whole model trained
    with pytest.raises(ConfigError, match=r"^model.asynchronous.buffer_size: must be an integer ≥ 1"):
        Asynchronous(buffer_size=0)
    with pytest.raises(ConfigError, match=r"^model.asynchronous.buffer_size: K=6 exceeds concurrency C=5: .*choose "
                                          r"K ≤ C$"):
        Asynchronous(buffer_size=6, concurrency=5)


@pytest.mark.parametrize("options,message", [
    (["--model.asynchronous.concurrency", "50"], "model.asynchronous.concurrency: C=50 clients in flight exceeds "
                                                 "data.num_clients M=20; choose C ≤ M"),
    (["--model.asynchronous.buffer_size", "30"], "model.asynchronous.buffer_size: K=30 exceeds concurrency C=20: "
                                                 "a server step waits for K of the C clients in flight; choose K ≤ C"),
])
def test_fedbuff_sizes_beyond_the_clients_are_refused_before_any_run_directory(options, message, capsys):
    from fl_lightning.cli import main
    config = str(Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml")
    code = main(["fit", "--config", config, "--model.system", "uniform", "--model.algorithm", "fedavg",
                 "--model.asynchronous", "fedbuff", *options])
    assert code == 2 and capsys.readouterr().err.strip().splitlines() == [f"fl-lightning: error: {message}"]
    assert not os.path.exists("runs")


def cli(name, *extra):
    exe = str(Path(sys.executable).with_name("fl-lightning"))
    config = str(Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml")
    return [exe, "fit", "--config", config, "--trainer.max_epochs", "5", "--trainer.enable_progress_bar", "false",
            "--trainer.logger.init_args.name", name, "--model.local_epochs", "1", "--model.system", "slow_uplink",
            "--model.algorithm", "fedavgm", "--model.asynchronous", "fedbuff", "--model.asynchronous.buffer_size", "3",
            "--model.asynchronous.concurrency", "5", *extra]


def logged(name):
    rows = {}
    for path in sorted(glob.glob(f"runs/{name}/*/version_*/metrics.csv")):
        with open(path) as f:
            for row in csv.DictReader(f):
                if None not in row.values() and None not in row and row.get("round"):
                    rows.setdefault(row["round"], []).append(
                        {k: v for k, v in row.items() if v != "" and k not in ("time/round_s", "time/wall_s")})
    return rows


def test_fedbuff_resumes_exactly_after_a_sigkill_mid_run():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cli("full"), env=env, check=True, capture_output=True, text=True)
    assert done.stdout.splitlines()[-1].startswith("fl-lightning: 5 server steps, final val/acc ")  # not "rounds"
    with open("stderr.txt", "w") as stderr:
        process = subprocess.Popen(cli("killed"), env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    deadline, saved = time.monotonic() + 120, lambda: glob.glob("runs/killed/*/version_0/checkpoints/epoch=[1-9]*")
    while process.poll() is None and not saved() and time.monotonic() < deadline:
        time.sleep(0.01)  # the second server step checkpointed (clients in flight, a stale queue): kill it now
    assert process.poll() is None, Path("stderr.txt").read_text()[-2000:]
    process.send_signal(signal.SIGKILL)
    process.wait()
    resumed = subprocess.run(cli("killed", "--ckpt_path", "last"), env=env, check=True, capture_output=True, text=True)
    full, killed = logged("full"), logged("killed")
    assert len(full) == 5 and sorted(killed, key=float) == sorted(full, key=float)
    (folder,) = glob.glob("runs/killed/*/version_*")  # resumed in its checkpoint's folder
    assert folder.endswith("/version_0") and f"resuming from {folder}/checkpoints/epoch=" in resumed.stdout
    assert not resumed.stdout.split("checkpoints/epoch=")[1].startswith("0-")  # resumed mid-run
    for step, rows in killed.items():
        for row in rows:  # every value logged, time/sim_s and staleness included, before and after the kill
            assert row == full[step][0], step
    assert any(float(r[0]["sys/staleness_max"]) > 0 for r in full.values())
