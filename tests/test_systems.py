"""Simulated system heterogeneity — client times from the exact bytes, round policies,
availability, the virtual clock in every row, determinism and exact resume. Real Trainer, no mocks."""
import csv
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger

from fl_lightning import FederatedDataModule
from fl_lightning.callbacks.base import FLCallback
from fl_lightning.errors import ConfigError
from fl_lightning.systems import Population, RoundPolicy, RoundSimulator, SystemModel
from fl_lightning.systems.budget import SimulatedTimeBudget
from fl_lightning.systems.profiles import MBIT, samples_processed, steps_within
from tests.conftest import fl_module, make_trainer
from tests.test_resume import SmallConvNet, digit_images

BATCH = 16


def write_trace(path, speeds, up=10.0, down=10.0, extra=""):
    with open(path, "w") as f:
        f.write("speed,up_mbps,down_mbps,latency_s" + extra + "\n")
        for s in speeds:
            f.write(f"{s},{up},{down},0.5\n")
    return str(path)


def run(rounds, name, system=None, round_policy=None, ckpt_path=None, callbacks=(), clients_per_round=4, **hp):
    torch.manual_seed(0)
    module = fl_module(SmallConvNet(), clients_per_round=clients_per_round, batch_size=BATCH, lr=0.05,
                       system=system, round_policy=round_policy, **hp)
    train, test = digit_images()
    data = FederatedDataModule.from_datasets(train, test, num_clients=8, dirichlet_rho=0.5, val_fraction=0.0)
    logger = CSVLogger("runs", name=name)
    trainer = make_trainer(rounds, logger=logger, callbacks=list(callbacks), enable_checkpointing=bool(callbacks))
    trainer.fit(module, data, ckpt_path=ckpt_path)
    with open(f"{logger.log_dir}/metrics.csv") as f:
        return module, data, list(csv.DictReader(f))


def expected_times(module, data, speeds, ids):
    """Hand-computed: download = upload = the whole model in fp32 (FedAvg); one local epoch: each of the client's
    n samples once (its last batch of n − (⌈n/B⌉ − 1)·B samples charged as that, not as B)."""
    nbytes = module.flat.numel * 4
    bandwidth = 10.0 * 1e6 / 8
    out = []
    for cid in ids:
        out.append(nbytes / bandwidth + data.clients.num_samples(cid) / speeds[cid] + nbytes / bandwidth + 0.5)
    return np.array(out)


def test_compute_is_charged_per_sample_processed_partial_batches_included():
    # 7 samples at B = 64 and 10 samples/s: one step of 7 samples, 0.7 s (not 64 / 10 = 6.4 s)
    assert samples_processed([1], [7], 64).tolist() == [7]
    pop = Population(np.array([10.0]), np.array([1e9]), np.array([1e9]), np.zeros(1), np.full(1, np.inf),
                     np.zeros(1), np.zeros(1))
    assert pop.client_segments([0], [0], [0], samples_processed([1], [7], 64))[0, 1] == pytest.approx(0.7)
    # 70 samples at B = 32: epochs of 32 + 32 + 6; 5 steps = one epoch (70) + 2 full batches (64) = 134 samples
    assert samples_processed([0, 1, 2, 3, 5, 6], [70] * 6, 32).tolist() == [0, 32, 64, 70, 134, 140]
    # the steps that fit a sample budget: 69.9 samples → 2 steps (64); 70 → 3; 133 → 4 (102 ≤ 133 < 134); 134 → 5
    assert steps_within([69.9, 70.0, 133.0, 134.0, 10.0], [70] * 5, 32).tolist() == [2, 3, 4, 5, 0]


def test_client_time_is_bytes_over_bandwidth_plus_compute_plus_latency():
    pop = Population(np.array([100.0, 50.0]), np.array([1e6, 2e6]), np.array([4e6, 8e6]), np.array([0.1, 0.2]),
                     np.full(2, np.inf), np.zeros(2), np.zeros(2))
    times = pop.client_times([1, 0], download_bytes=[8e6, 4e6], upload_bytes=[2e6, 3e6], samples=[500, 200])
    assert times.tolist() == pytest.approx([8e6 / 8e6 + 500 / 50 + 2e6 / 2e6 + 0.2, 4e6 / 4e6 + 200 / 100 + 3 + 0.1])
    segments = pop.client_segments([1, 0], download_bytes=[8e6, 4e6], upload_bytes=[2e6, 3e6], samples=[500, 200])
    assert segments.tolist() == [[1.0, 10.0, 1.0, 0.2], [1.0, 2.0, 3.0, 0.1]]  # download, compute, upload, latency


def test_over_selection_aggregates_the_first_m_to_finish():
    policy = RoundPolicy("over_selection", beta=0.3)
    assert policy.num_sampled(10) == 13 and policy.num_sampled(3) == 4
    accepted, duration = policy.select(np.array([5.0, 1.0, 3.0, 2.0, 4.0]), np.ones(5, bool), 3)
    assert accepted.tolist() == [False, True, True, True, False] and duration == 3.0
    # a client whose upload never arrives (client_dropout) is not among the first M
    accepted, duration = policy.select(np.array([5.0, 1.0, 3.0, 2.0, 4.0]), np.array([1, 0, 1, 1, 1], bool), 3)
    assert accepted.tolist() == [False, False, True, True, True] and duration == 4.0


def test_deadline_policy_drops_exactly_the_late_clients():
    policy = RoundPolicy("deadline", deadline_s=3.0)
    accepted, duration = policy.select(np.array([1.0, 3.0, 3.5, 9.0]), np.ones(4, bool), 4)
    assert accepted.tolist() == [True, True, False, False] and duration == 3.0
    accepted, duration = policy.select(np.array([1.0, 2.0]), np.ones(2, bool), 2)
    assert accepted.all() and duration == 2.0  # nobody late: the round ends with the last client


def test_only_available_clients_are_sampled():
    on, off, phase = np.array([10.0, 10.0, 10.0, np.inf]), np.array([10.0, 10.0, 10.0, 0.0]), np.array([0.0, 15, 5, 0])
    pop = Population(np.ones(4), np.ones(4), np.ones(4), np.zeros(4), on, off, phase)
    assert pop.available(0.0).tolist() == [True, False, True, True]
    assert pop.available(6.0).tolist() == [True, True, False, True]
    sim = RoundSimulator(pop, RoundPolicy(), BATCH)
    for seed in range(20):
        assert set(sim.sample(np.random.default_rng(seed), 3)) == {0, 2, 3}
    nobody = Population(np.ones(2), np.ones(2), np.ones(2), np.zeros(2), np.full(2, 10.0), np.full(2, 10.0),
                        np.array([12.0, 17.0]))
    sim = RoundSimulator(nobody, RoundPolicy(), BATCH)
    assert sim.sample(np.random.default_rng(0), 2) == [1] and sim.clock.now_s == 3.0  # waits for the first


def test_logged_sim_time_is_the_hand_computed_slowest_client(tmp_path):
    speeds = [400.0, 300.0, 200.0, 100.0, 400.0, 300.0, 200.0, 100.0]
    module, data, rows = run(2, "wait", system=write_trace(tmp_path / "t.csv", speeds), clients_per_round=8)
    times = expected_times(module, data, speeds, range(8))
    assert float(rows[0]["time/sim_round_s"]) == pytest.approx(times.max())
    assert float(rows[1]["time/sim_s"]) == pytest.approx(2 * times.max())
    assert float(rows[0]["sys/idle_s"]) == pytest.approx((times.max() - times).mean())
    assert all(r["time/sim_s"] != "" for r in rows) and float(rows[0]["sys/stragglers"]) == 0


def test_deadline_run_drops_the_late_clients_and_its_timeline_has_each_client(tmp_path):
    speeds = [1000.0, 1000.0, 1000.0, 1000.0, 5.0, 5.0, 5.0, 5.0]
    trace = write_trace(tmp_path / "t.csv", speeds)
    module, data, rows = run(1, "probe", system=trace, clients_per_round=8)
    times = expected_times(module, data, speeds, range(8))
    deadline = float((times[:4].max() + times[4:].min()) / 2)
    _, _, rows = run(2, "deadline", system=trace, clients_per_round=8,
                     round_policy=RoundPolicy("deadline", deadline_s=deadline))
    late = int((times > deadline).sum())
    assert late == 4 and float(rows[0]["sys/stragglers"]) == late
    assert float(rows[0]["comm/clients_reported"]) == 8 - late
    assert float(rows[0]["time/sim_round_s"]) == pytest.approx(deadline)

    # timeline.csv: each client of each round, its four segments by hand; fl-lightning timeline draws a round
    with open("runs/deadline/version_0/timeline.csv") as f:
        timeline = list(csv.DictReader(f))
    assert [int(r["round"]) for r in timeline] == [1] * 8 + [2] * 8
    assert [int(r["client_id"]) for r in timeline[:8]] == list(range(8))
    assert [r["status"] for r in timeline[:8]] == ["aggregated"] * 4 + ["straggler"] * 4
    nbytes, bandwidth = module.flat.numel * 4, 10.0 * 1e6 / 8
    for row, total in zip(timeline, np.concatenate([times, times])):
        cid = int(row["client_id"])
        assert int(row["steps"]) == math.ceil(data.clients.num_samples(cid) / BATCH)
        segments = [float(row[k]) for k in ("download_s", "compute_s", "upload_s", "latency_s")]
        assert segments == pytest.approx([nbytes / bandwidth, data.clients.num_samples(cid) / speeds[cid],
                                          nbytes / bandwidth, 0.5])
        assert float(row["end_s"]) - float(row["start_s"]) == pytest.approx(total)
    assert {float(r["start_s"]) for r in timeline[8:]} == {float(rows[0]["time/sim_s"])}  # round 2 starts there
    assert {float(r["round_end_s"]) for r in timeline[8:]} == {float(rows[1]["time/sim_s"])}

    cli = [sys.executable, "-m", "fl_lightning.cli", "timeline", "runs/deadline/version_0"]
    done = subprocess.run(cli + ["--round", "1"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "runs/deadline/version_0/timeline_round_1.png").stat().st_size > 10_000
    bad = subprocess.run(cli + ["--round", "7"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "it has rounds 1..2" in bad.stderr


class StepsTaken(FLCallback):
    def __init__(self):
        self.steps = {}

    def on_client_end(self, client):
        self.steps[client.client_id] = client.steps

    def on_server_update(self, server):
        self.tau_sum = float(server.received.sum("weighted_steps")[0])  # FedNova's Σ p_i τ_i (p_i = 1 here)


def test_partial_work_uses_the_steps_done_by_the_deadline_and_fednova_sees_them(tmp_path):
    speeds = [1000.0, 1000.0, 1000.0, 1000.0, 20.0, 20.0, 10.0, 10.0]
    trace = write_trace(tmp_path / "t.csv", speeds)
    probe, data, _ = run(1, "probe", system=trace, clients_per_round=8)
    transfer = 2 * probe.flat.numel * 4 / (10.0 * 1e6 / 8) + 0.5  # download + upload of the model, latency
    full = [math.ceil(data.clients.num_samples(c) / BATCH) for c in range(8)]
    deadline = transfer + 3.5 * BATCH / 20.0  # the speed-20 clients fit 3 steps, the speed-10 ones 1
    recorder = StepsTaken()
    module, _, rows = run(1, "partial", system=trace, clients_per_round=8, algorithm="fednova", callbacks=[recorder],
                          round_policy=RoundPolicy("deadline", deadline_s=deadline, partial_work=True))
    expected = [min(f, k) for f, k in zip(full, [full[0], full[1], full[2], full[3], 3, 3, 1, 1])]
    print("steps per client:", expected)
    assert [recorder.steps[c] for c in range(8)] == expected and len(set(expected)) > 2  # τ_i really differ
    assert float(rows[0]["sys/stragglers"]) == 0 and float(rows[0]["comm/clients_reported"]) == 8
    assert recorder.tau_sum == sum(expected)  # FedNova's τ_eff = Σ τ_i / 8 uses the partial step counts
    with pytest.raises(ConfigError, match=r"^model.round_policy.partial_work: .*deadline_s"):
        RoundPolicy("over_selection", partial_work=True)


def test_same_seed_same_simulation_and_resume_is_exact(tmp_path):
    every = ModelCheckpoint(dirpath="ckpts", filename="{epoch}", save_top_k=-1, every_n_epochs=1)
    policy = RoundPolicy("over_selection", beta=0.5, deadline_s=60.0)
    full_module, _, full = run(4, "full", system="mobile", round_policy=policy, callbacks=[every])
    _, _, again = run(4, "again", system="mobile", round_policy=policy)
    wall = lambda rows: [{k: v for k, v in r.items() if k not in ("time/round_s", "time/wall_s")} for r in rows]
    assert wall(again) == wall(full)
    assert float(full[-1]["time/sim_s"]) > 0
    torch.manual_seed(1234)
    resumed_module, _, resumed = run(4, "resumed", system="mobile", round_policy=policy, ckpt_path="ckpts/epoch=1.ckpt")
    assert [r["round"] for r in resumed] == ["3.0", "4.0"]
    assert wall(resumed) == wall(full)[2:]  # time/sim_s, stragglers, idle time included
    assert torch.equal(resumed_module.flat.vector, full_module.flat.vector)


def test_bad_trace_is_one_line_naming_the_column(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("speed,down_mbps\n1,2\n")
    with pytest.raises(ConfigError, match=r"^model.system.trace: .*no column 'up_mbps'"):
        SystemModel(trace=str(path))
    path.write_text("speed,up_mbps,down_mbps\n1,fast,2\n")
    with pytest.raises(ConfigError, match=r"line 2: column 'up_mbps' is 'fast', not a number"):
        SystemModel(trace=str(path))
    with pytest.raises(ConfigError, match="unknown profile 'moblie'"):
        SystemModel(profile="moblie")
    with pytest.raises(ConfigError, match="model.round_policy.deadline_s"):
        RoundPolicy("deadline")


def test_cli_bad_trace_exits_2_with_one_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("speed,down_mbps\n1,2\n")
    proc = subprocess.run([sys.executable, "-m", "fl_lightning.cli", "fit", "--config", "configs/quickstart.yaml",
                           "--model.system", "SystemModel", "--model.system.trace", str(path)], capture_output=True, text=True,
                          cwd=str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    assert proc.returncode == 2
    assert "model.system.trace" in proc.stderr and "'up_mbps'" in proc.stderr


def test_population_of_10000_clients_is_a_few_arrays():
    pop = SystemModel("mobile").population(10_000)
    assert pop.nbytes == 7 * 8 * 10_000
    assert 0.2 < pop.available(0.0).mean() < 0.5  # on 600 s / off 1200 s: about a third online
    assert pop.up_Bps.min() > 0 and np.median(pop.up_Bps) == pytest.approx(2 * MBIT, rel=0.1)


def test_a_simulated_system_under_ddp_is_refused_before_any_run_folder():
    import pytorch_lightning as pl

    from fl_lightning.errors import ConfigError
    from fl_lightning.module_options import check_trainer

    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False, enable_checkpointing=False)
    with pytest.raises(ConfigError, match="model.system: simulates one process's rounds"):
        check_trainer({"system": {"class_path": "fl_lightning.systems.model.SystemModel"}}, trainer)
    check_trainer({"system": None}, trainer)  # off: nothing to refuse


def test_simulated_time_budget_stops_at_the_first_round_that_reaches_it(tmp_path):
    speeds = [400.0, 300.0, 200.0, 100.0, 400.0, 300.0, 200.0, 100.0]
    trace = write_trace(tmp_path / "t.csv", speeds)
    module, data, rows = run(1, "probe", system=trace, clients_per_round=8)
    slowest = expected_times(module, data, speeds, range(8)).max()  # every round: wait for all 8
    _, _, rows = run(10, "budget", system=trace, clients_per_round=8,
                     callbacks=[SimulatedTimeBudget(seconds=2.5 * slowest)])
    assert [float(r["round"]) for r in rows] == [1.0, 2.0, 3.0]  # 2 × slowest < 2.5 × slowest ≤ 3 × slowest
    assert float(rows[-1]["time/sim_s"]) == pytest.approx(3 * slowest)
    with pytest.raises(ConfigError, match=r"SimulatedTimeBudget\(seconds=...\): must be > 0"):
        SimulatedTimeBudget(seconds=0)
