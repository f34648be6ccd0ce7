"""Client-level DP (fl_lightning.privacy): clip bound, noise std, ε against dp-accounting and a
published value, the budget stop, refusals, the calculator, and exact resume. Real Trainer, real numbers."""
import csv
import math

import dp_accounting
import numpy as np
import pytest
import torch
from dp_accounting import pld, rdp
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

from fl_lightning import FederatedDataModule
from fl_lightning.algorithms import create
from fl_lightning.callbacks.base import FLCallback
from fl_lightning.cli import main as cli_main
from fl_lightning.errors import ConfigError
from fl_lightning.federation.seeding import Purpose, derive_seed
from fl_lightning.privacy import ClientDP, PrivacyOptions, accountant
from fl_lightning.assembly.toy import ToyFederation
from tests.conftest import fl_module, make_trainer

CLIENTS, COHORT = 20, 5


def digits():
    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target)
    return TensorDataset(x[:1500], y[:1500]), TensorDataset(x[1500:], y[1500:])


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))


class ArrivedNorms(FLCallback):
    """The L2 norm of what the server sums from each reported client (decoded, after any codec)."""

    def __init__(self):
        self.norms, self.covered = [], []

    def on_client_reported(self, client):
        parts = [p for p in client.upload.parts if p.channel == "delta"]
        self.norms.append(float(torch.sqrt(sum(p.values().double().pow(2).sum() for p in parts))))
        self.covered.append(sum(b - a for p in parts for a, b in p.ranges))


def fit(rounds, name="dp", callbacks=(), ckpt_path=None, privacy=None, **hp):
    module = fl_module(mlp(), clients_per_round=COHORT, batch_size=20, lr=0.5, weight_decay=0.0,
                       privacy=privacy or PrivacyOptions(noise_multiplier=1.0, clip=0.05), **hp)
    train, test = digits()
    data = FederatedDataModule.from_datasets(train, test, num_clients=CLIENTS, val_fraction=0.0)
    logger = CSVLogger("runs", name=name)
    checkpointing = any(isinstance(cb, ModelCheckpoint) for cb in callbacks)
    trainer = make_trainer(rounds, logger=logger, callbacks=list(callbacks), enable_checkpointing=checkpointing)
    trainer.fit(module, data, ckpt_path=ckpt_path)
    with open(f"{logger.log_dir}/metrics.csv") as f:
        rows = [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(f)]
    return module, rows


@pytest.mark.parametrize("algorithm,hp", [("fedavg", {}), ("fedbcgd", {"num_blocks": 2}),
                                          ("fedavg", {"compression": "topk", "compression_k": 0.3,
                                                      "error_feedback": False})])
def test_every_upload_the_server_sums_is_within_the_clip(algorithm, hp):
    recorder = ArrivedNorms()
    clip = 1.1  # round 1's unclipped norms are 0.76-1.39 (fedavg, fedbcgd): the clip binds for some, not all
    module, rows = fit(3, callbacks=[recorder], privacy=PrivacyOptions(noise_multiplier=1.0, clip=clip),
                       algorithm=algorithm, **hp)
    assert len(recorder.norms) == 3 * COHORT
    assert max(recorder.norms) <= clip * (1 + 1e-6)
    assert 0 < float(rows[0]["privacy/clipped_fraction"]) < 1  # so a bound off by a factor would show
    if algorithm == "fedbcgd":  # each client sends its block and the shared block only, clipped together
        assert max(recorder.covered) < module.flat.num_params


def test_logged_epsilon_is_dp_accounting_on_the_same_event():
    _, rows = fit(3)
    logged = [float(r["privacy/epsilon"]) for r in rows]
    delta = 1e-5  # min(1e-5, 1/K^1.1)
    for rounds, eps in enumerate(logged, start=1):
        # std z·C = 1·C on a sum of replace-one sensitivity 2C: dp-accounting's multiplier is std/sensitivity = 0.5
        direct = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
        direct.compose(dp_accounting.SampledWithoutReplacementDpEvent(
            CLIENTS, COHORT, dp_accounting.GaussianDpEvent(0.5)), rounds)
        assert eps == pytest.approx(direct.get_epsilon(delta), rel=1e-6)
    assert logged[0] < logged[1] < logged[2]
    assert float(rows[0]["privacy/delta"]) == pytest.approx(delta)


class CohortSizes(FLCallback):
    def __init__(self):
        self.cohorts = []

    def configure_round(self, round):
        self.cohorts.append([task.client_id for task in round.clients])


def test_poisson_sampling_draws_each_client_with_q_and_is_accounted_as_poisson():
    recorder = CohortSizes()
    _, rows = fit(4, callbacks=[recorder], privacy=PrivacyOptions(noise_multiplier=1.0, clip=0.05, sampling="poisson",
                                                                  accountant="pld"))
    # the round-r draw: every client independently with q = M/K, from the round's sampling stream
    expected = [np.flatnonzero(np.random.default_rng(derive_seed(r, Purpose.SAMPLING)).random(CLIENTS) < COHORT / CLIENTS)
                .tolist() for r in range(4)]
    assert recorder.cohorts == expected and len({len(c) for c in expected}) > 1  # cohort sizes vary
    logged = [float(r["privacy/epsilon"]) for r in rows]
    for rounds, eps in enumerate(logged, start=1):
        direct = pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
        direct.compose(dp_accounting.PoissonSampledDpEvent(COHORT / CLIENTS, dp_accounting.GaussianDpEvent(1.0)),
                       rounds)
        assert eps == pytest.approx(direct.get_epsilon(1e-5), rel=1e-6)  # add/remove-one: sensitivity C
    with pytest.raises(ConfigError, match="^model.privacy.sampling: poisson divides every coordinate's noised sum"):
        fl_module(mlp(), compression="topk", compression_k=0.3, error_feedback=False,
                  privacy=PrivacyOptions(noise_multiplier=1.0, sampling="poisson"))


def analytic_gaussian_delta(eps, sigma):
    """δ(ε) of one Gaussian release with sensitivity 1 and std σ, exactly (Balle & Wang, ICML 2018, Thm. 8)."""
    phi = lambda t: 0.5 * math.erfc(-t / math.sqrt(2))
    return phi(-eps * sigma + 1 / (2 * sigma)) - math.exp(eps) * phi(-eps * sigma - 1 / (2 * sigma))


def test_published_values():
    """(a) dp-accounting's own test (rdp_privacy_accountant_test.test_compute_epsilon_delta_gaussian):
    noise multiplier 4.530877117 gives RDP ε = 1 at δ = 1e-6 for one Gaussian release of sensitivity 1 (here
    add/remove-one, everyone joining: q = 1). (b) PLD, which is tight, agrees with the exact analytic Gaussian
    of Balle & Wang 2018 (Thm. 8) at the same σ and δ."""
    sigma = 4.530877117
    assert accountant.epsilon(sigma, 1, 100, 100, 1e-6, sampling="poisson") == pytest.approx(1.0, abs=1e-4)
    pld_eps = accountant.epsilon(sigma, 1, 100, 100, 1e-6, sampling="poisson", accountant="pld")
    low, high = 0.0, 2.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if analytic_gaussian_delta(middle, sigma) > 1e-6 else (low, middle)
    assert pld_eps == pytest.approx(high, abs=1e-2)
    assert pld_eps < 1.0  # RDP's conversion is an upper bound


def test_calibration_inverts_epsilon():
    z = accountant.noise_multiplier_for(8.0, 100, 50, 1000)
    assert accountant.epsilon(z, 100, 50, 1000) <= 8.0 < accountant.epsilon(z * 0.995, 100, 50, 1000)


def test_noise_has_std_z_times_clip_over_cohort():
    """Clients that do not move (lr 0) upload Δ = 0: the server step is exactly the noise / M. With
    n = 20 rounds × 1,010 coordinates, (s²/σ² − 1)·√(n/2) is N(0, 1) to a good approximation; |·| < 4.5
    falsely alarms with probability 7e-6 per seed, and a 5 % error in the std moves it by ≈ 10 (measured: 9.1)."""
    torch.manual_seed(0)
    net = nn.Linear(100, 10)
    x, y = torch.randn(8, 100), torch.randint(0, 10, (8,))
    algorithm, _ = create("fedavg")
    z, clip, m, rounds = 1.3, 0.7, 4, 20
    dp = ClientDP(PrivacyOptions(noise_multiplier=z, clip=clip), rounds=rounds)
    fed = ToyFederation(net, algorithm, [(x[i:i + 2], y[i:i + 2]) for i in range(0, 8, 2)], "state", lr=0.0,
                        extra_callbacks=[dp])
    steps = []
    for r in range(rounds):
        before = fed.global_params.clone()
        fed.run_round(r)
        steps.append((fed.global_params - before).double())
    sample = torch.cat(steps)
    n, sigma = sample.numel(), z * clip / m
    statistic = (sample.pow(2).mean() / sigma ** 2 - 1) * math.sqrt(n / 2)
    assert abs(float(statistic)) < 4.5
    assert abs(float(sample.mean())) < 4.5 * sigma / math.sqrt(n)


def test_budget_stops_before_the_round_that_would_pass_it():
    eps = [accountant.epsilon(1.0, r, COHORT, CLIENTS) for r in (2, 3)]
    budget = (eps[0] + eps[1]) / 2
    _, rows = fit(6, privacy=PrivacyOptions(noise_multiplier=1.0, clip=0.05, epsilon_budget=budget))
    assert [r["round"] for r in rows] == ["1.0", "2.0"]
    assert float(rows[-1]["privacy/epsilon"]) <= budget


def test_target_epsilon_is_met_after_max_epochs():
    _, rows = fit(3, privacy=PrivacyOptions(target_epsilon=5.0, clip=0.05))
    assert float(rows[-1]["privacy/epsilon"]) == pytest.approx(5.0, rel=2e-3)
    assert float(rows[-1]["privacy/epsilon"]) <= 5.0
    # report: ε at the end is a column of the summary
    from fl_lightning.runs import report
    assert report.main(["runs/dp", "--target", "0.5", "--out", "rep"]) == 0
    (row,) = list(csv.DictReader(open("rep.csv")))
    assert float(row["final_epsilon"]) == float(rows[-1]["privacy/epsilon"]) and row["seeds"] == "1"


@pytest.mark.parametrize("hp,field", [({"algorithm": "scaffold", "rule": "authors"}, "model.algorithm.rule"),
                                      ({"algorithm": "fednova"}, "model.privacy"),
                                      ({"algorithm": "feddyn"}, "model.privacy"),
                                      ({"compression": "qsgd"}, "model.compression"),
                                      ({"weighted_aggregation": True}, "model.weighted_aggregation")])
def test_refused_in_one_line(hp, field):
    with pytest.raises(ConfigError, match=f"^{field}: "):
        fl_module(mlp(), privacy=PrivacyOptions(noise_multiplier=1.0), **hp)


class ArrivedSums(FLCallback):
    """Σ over reported clients of each channel as the server sums it, and every Δc's norm (a trainer
    callback: it runs before the module's, after every client hook has clipped the upload)."""

    def __init__(self):
        self.sums, self.control_norms, self.control_covered = {}, [], []

    def on_client_reported(self, client):
        for part in client.upload.parts:
            total = self.sums.setdefault(part.channel, torch.zeros(10_000, dtype=torch.float64))
            values, offset = part.values().double().cpu(), 0
            for start, stop in part.ranges:
                total[start:stop] += values[offset:offset + stop - start]
                offset += stop - start
        controls = [p for p in client.upload.parts if p.channel == "control"]
        squares = sum((p.values().double().pow(2).sum() for p in controls), torch.zeros((), dtype=torch.float64))
        self.control_norms.append(float(torch.sqrt(squares)))
        self.control_covered.append(sum(b - a for p in controls for a, b in p.ranges))


@pytest.mark.parametrize("algorithm,hp", [("scaffold", {}), ("fedbcgd_plus", {"num_blocks": 2})])
def test_control_variates_are_clipped_and_noised_with_half_the_budget_each(algorithm, hp):
    from fl_lightning.callbacks import ControlVariates
    from fl_lightning.privacy.mechanism import CONTROL_NOISE, NOISE, gaussian
    recorder, clip, control_clip = ArrivedSums(), 0.05, 0.3
    x0 = torch.nn.utils.parameters_to_vector(mlp().parameters()).double()
    module, rows = fit(1, callbacks=[recorder], algorithm=algorithm, **hp,
                       privacy=PrivacyOptions(noise_multiplier=1.0, clip=clip, control_clip=control_clip))
    d = x0.numel()
    assert max(recorder.control_norms) <= control_clip * (1 + 1e-6) and len(recorder.control_norms) == COHORT
    assert min(recorder.control_norms) == pytest.approx(control_clip, rel=1e-5)  # the bound binds
    if algorithm == "fedbcgd_plus":  # Δc over block j + shared block only, like Δ
        assert max(recorder.control_covered) < d
    # c ← c + (Σ clipped Δc + N(0, (√2·z·C_c)²)) / K: Δ and Δc each get z_m = √2·z, so z_Δ⁻² + z_c⁻² = z⁻²
    (controls,) = [cb for cb in module.trainer.callbacks if isinstance(cb, ControlVariates)]
    expected_c = (recorder.sums["control"][:d] + gaussian(d, math.sqrt(2) * control_clip, 0, CONTROL_NOISE)) / CLIENTS
    assert torch.allclose(controls.server_control.double(), expected_c, atol=1e-6)
    if algorithm == "scaffold":  # x ← x + (Σ clipped Δ + N(0, (√2·z·C)²)) / M (server_lr 1)
        expected_x = x0 + (recorder.sums["delta"][:d] + gaussian(d, math.sqrt(2) * clip, 0, NOISE)) / COHORT
        assert torch.allclose(module.flat.vector.double(), expected_x, atol=1e-6)
    clipped = sum(n > control_clip * (1 - 1e-5) for n in recorder.control_norms) / COHORT
    assert float(rows[0]["privacy/control_clipped_fraction"]) == clipped
    # the accountant sees z: both releases together are one Gaussian mechanism of multiplier z = 1
    assert float(rows[0]["privacy/epsilon"]) == pytest.approx(accountant.epsilon(1.0, 1, COHORT, CLIENTS), rel=1e-9)


def test_unreachable_target_and_bad_options_are_one_line():
    with pytest.raises(ConfigError, match="^privacy.target_epsilon: .*not reachable"):
        accountant.noise_multiplier_for(1e-6, 10_000, 100, 100)
    with pytest.raises(ConfigError, match="^model.privacy.noise_multiplier: give exactly one"):
        PrivacyOptions()
    with pytest.raises(ConfigError, match="^model.privacy.clip: must be > 0"):
        PrivacyOptions(noise_multiplier=1.0, clip=0.0)


def test_calculator_both_ways(capsys):
    assert cli_main(["privacy", "--rounds", "100", "--cohort", "100", "--population", "10000",
                     "--epsilon", "8"]) == 0
    out = capsys.readouterr().out
    z = float(out.split()[1])
    assert accountant.epsilon(z, 100, 100, 10000) <= 8.0
    assert cli_main(["privacy", "--rounds", "100", "--cohort", "100", "--population", "10000",
                     "--noise-multiplier", f"{z}"]) == 0
    assert float(capsys.readouterr().out.split()[2]) == pytest.approx(accountant.epsilon(z, 100, 100, 10000), abs=1e-4)
    assert cli_main(["privacy", "--rounds", "10", "--cohort", "200", "--population", "100", "--epsilon", "8"]) == 2
    assert "privacy.cohort" in capsys.readouterr().err


def test_resume_is_bit_identical_with_adaptive_clipping():
    options = dict(noise_multiplier=1.0, clip=0.05, adaptive_quantile=0.5, count_noise=1.0)
    every_round = ModelCheckpoint(dirpath="ckpts", filename="{epoch}", save_top_k=-1, every_n_epochs=1)
    full_module, full = fit(4, "full", callbacks=[every_round], privacy=PrivacyOptions(**options))
    clips = [float(r["privacy/clip"]) for r in full]
    assert len(set(clips)) == 4  # the clip adapts every round: its value must survive the checkpoint
    torch.manual_seed(1234)
    resumed_module, resumed = fit(4, "resumed", ckpt_path="ckpts/epoch=1.ckpt", privacy=PrivacyOptions(**options))
    assert resumed == full[2:]
    assert torch.equal(resumed_module.flat.vector, full_module.flat.vector)


def test_report_table_mixes_groups_with_and_without_dp(tmp_path):
    from pathlib import Path
    from fl_lightning.runs.report import write_tables
    rows = [{"group": "no DP", "seeds": 3, "final_val_acc": 0.9, "final_val_acc_std": 0.01},
            {"group": "eps 8", "seeds": 3, "final_val_acc": 0.8, "final_val_acc_std": 0.02,
             "final_epsilon": 7.99, "final_epsilon_std": 0.0}]
    markdown = write_tables(rows, Path(tmp_path) / "rep", target=0.5, window=3)
    assert markdown.splitlines()[0] == "| group | seeds | final_val_acc | final_epsilon |"
    assert markdown.splitlines()[2] == "| no DP | 3 | 0.9000 ± 0.0100 | — |"
    assert markdown.splitlines()[3] == "| eps 8 | 3 | 0.8000 ± 0.0200 | 7.9900 ± 0.0000 |"
    written = list(csv.DictReader(open(Path(tmp_path) / "rep.csv")))
    assert written[0]["final_epsilon"] == "" and written[1]["final_epsilon"] == "7.99"


def test_a_mechanism_registered_by_name_draws_the_noise_and_gives_the_accountant_its_event():
    """``@MECHANISMS.register("name")`` makes ``--model.privacy.mechanism name``: a Gaussian that records its calls
    gives the built-in's numbers exactly, draws the update's noise once a round at std z·C, and its event is
    what ε is computed from (one whose event is twice as loud reports more ε at the same noise)."""
    from fl_lightning.privacy.mechanism import MECHANISMS, NOISE, GaussianMechanism

    calls, events = [], []

    class Recorded(GaussianMechanism):
        def noise(self, size, std, round_idx, purpose=NOISE):
            calls.append((round_idx, purpose, std))
            return super().noise(size, std, round_idx, purpose)

        def dp_event(self, multiplier):
            events.append(multiplier)
            return super().dp_event(multiplier)

    class Louder(GaussianMechanism):
        def dp_event(self, multiplier):
            return dp_accounting.GaussianDpEvent(multiplier / 2)

    MECHANISMS.register("recorded")(Recorded)
    MECHANISMS.register("louder")(Louder)
    accountant.one_round.cache_clear()
    try:
        _, default = fit(2, name="gaussian", privacy=PrivacyOptions(noise_multiplier=1.0, clip=0.5))
        _, recorded = fit(2, name="recorded", privacy=PrivacyOptions(noise_multiplier=1.0, clip=0.5,
                                                                      mechanism="recorded"))
        _, louder = fit(2, name="louder", privacy=PrivacyOptions(noise_multiplier=1.0, clip=0.5, mechanism="louder"))
        with pytest.raises(ConfigError, match=r"^model.privacy.mechanism: unknown 'laplace'; choose one of gaussian, "
                                              r"recorded, louder$"):
            PrivacyOptions(noise_multiplier=1.0, mechanism="laplace")
    finally:
        del MECHANISMS["recorded"], MECHANISMS["louder"]
        accountant.one_round.cache_clear()
    assert [{k: v for k, v in r.items() if k != "privacy/epsilon"} for r in recorded] == \
        [{k: v for k, v in r.items() if k != "privacy/epsilon"} for r in default]
    assert [r["privacy/epsilon"] for r in recorded] == [r["privacy/epsilon"] for r in default]
    assert calls == [(0, NOISE, 0.5), (1, NOISE, 0.5)]
    assert events == [0.5]  # z / 2: a fixed cohort's replace-one sensitivity 2C, computed once per fit
    assert float(louder[-1]["privacy/epsilon"]) > 1.5 * float(default[-1]["privacy/epsilon"])
