"""Client-level ε checked independently of dp-accounting's event bookkeeping (docs/privacy.md, "Client-level
differential privacy", its "Noise and sensitivity" paragraph): the analytic Gaussian mechanism (Balle & Wang 2018)
for one full-participation round, a mutation of the sensitivity that must fail it, Abadi et al. 2016's published
value, the Poisson cohort's Binomial law and the released noise's std, block uploads under Poisson sampling, the
calculator against a run for every mode, and the refusals that come before any fit work."""
import csv
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import optimize, stats
from torch import nn

from fl_lightning.algorithms import create
from fl_lightning.cli import main as cli_main
from fl_lightning.federation.seams import PoissonSampler
from fl_lightning.federation.seeding import Purpose, derive_seed
from fl_lightning.federation.toy import ToyFederation
from fl_lightning.privacy import ClientDP, PrivacyOptions, accountant
from fl_lightning.privacy.callback import check_accounting
from fl_lightning.errors import ConfigError
from tests.test_privacy import COHORT, CLIENTS, ArrivedSums, fit, mlp

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")


def analytic_gaussian_epsilon(sensitivity: float, sigma: float, delta: float) -> float:
    """ε of one Gaussian release of L2 sensitivity Δ and noise std σ at δ, exactly (Balle & Wang, ICML 2018,
    Thm. 8): δ(ε) = Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ), solved for ε."""
    def gap(eps):
        a, b = sensitivity / (2 * sigma), eps * sigma / sensitivity
        return stats.norm.cdf(a - b) - math.exp(eps) * stats.norm.cdf(-a - b) - delta
    return optimize.brentq(gap, 0.0, 100.0, xtol=1e-12)


Z, CLIP, K, DELTA = 2.0, 0.5, 10, 1e-5
# (sampling, sensitivity in units of C): a fixed cohort of everyone is replace-one (2C); Poisson with q = 1 is
# add/remove-one (C). σ = z·C is the noise std the mechanism draws (mechanism.noised_mean, std z·C).
MODES = [("fixed", 2.0), ("poisson", 1.0)]


@pytest.mark.parametrize("sampling,sensitivity", MODES)
def test_one_full_round_is_the_analytic_gaussian(sampling, sensitivity):
    exact = analytic_gaussian_epsilon(sensitivity * CLIP, Z * CLIP, DELTA)
    pld = accountant.epsilon(Z, 1, K, K, DELTA, sampling, "pld")  # tight up to its discretisation
    assert pld == pytest.approx(exact, abs=5e-3)
    rdp = accountant.epsilon(Z, 1, K, K, DELTA, sampling, "rdp")  # an upper bound: RDP's conversion is lossy
    assert exact <= rdp <= 1.3 * exact


@pytest.mark.parametrize("sampling,sensitivity", MODES)
def test_the_wrong_sensitivity_would_fail_that_test(sampling, sensitivity, monkeypatch):
    """Mutation: C where it is 2C (or 2C where it is C) gives an ε far from the reported one, and a SENSITIVITY
    constant patched to the wrong value makes the reported ε miss the analytic one."""
    wrong = 3.0 - sensitivity
    reported = accountant.epsilon(Z, 1, K, K, DELTA, sampling, "pld")
    assert abs(analytic_gaussian_epsilon(wrong * CLIP, Z * CLIP, DELTA) - reported) > 0.5
    monkeypatch.setitem(accountant.SENSITIVITY, sampling, wrong)
    mutated = accountant.epsilon(Z, 1, K, K, DELTA, sampling, "pld")
    assert abs(mutated - analytic_gaussian_epsilon(sensitivity * CLIP, Z * CLIP, DELTA)) > 0.5


def moments_accountant_epsilon(q: float, sigma: float, steps: int, delta: float) -> float:
    """Abadi et al.'s moments accountant, computed here: the RDP of the Poisson-sampled Gaussian at integer
    orders α (Mironov, Talwar & Zhang 2019, Eq. 3: log Σ_k C(α,k)(1−q)^(α−k) q^k e^((k²−k)/(2σ²)) / (α−1)),
    composed over the steps, and the classical conversion ε = min_α T·RDP(α) + log(1/δ)/(α−1), α ≤ 32."""
    best = math.inf
    for alpha in range(2, 33):
        terms = [math.comb(alpha, k) * (1 - q) ** (alpha - k) * q ** k * math.exp((k * k - k) / (2 * sigma ** 2))
                 for k in range(alpha + 1)]
        best = min(best, steps * math.log(sum(terms)) / (alpha - 1) + math.log(1 / delta) / (alpha - 1))
    return best


def test_abadi_et_al_2016_published_value():
    """Abadi et al., "Deep Learning with Differential Privacy", CCS 2016, Sec. 5 (MNIST): q = 0.01, σ = 4,
    10,000 steps, δ = 1e-5 give ε ≈ 1.26 under the moments accountant. Reproduced to 0.01 by the moments
    accountant computed above. The library's RDP ε uses dp-accounting's tighter RDP→(ε, δ) conversion
    (Canonne, Kamath & Steinke 2020), so it must lie below 1.26 but not far: within 20 %."""
    assert moments_accountant_epsilon(0.01, 4.0, 10_000, 1e-5) == pytest.approx(1.26, abs=0.01)
    reported = accountant.epsilon(4.0, 10_000, 1, 100, 1e-5, sampling="poisson")  # q = M/K = 0.01
    assert 0.8 * 1.26 <= reported <= 1.26


def test_poisson_cohort_is_binomial_and_its_noise_has_std_z_times_clip():
    """2,000 seeded rounds' cohort sizes from the loop's own draw: mean and variance of Binomial(K, q) (each
    within 4.5 standard errors) and a χ² goodness of fit (p > 1e-4). Then lr 0 (every upload is 0): the
    server's step is the noise / qK, so step·qK over 10 rounds × 1,010 coordinates must have std z·C."""
    torch.manual_seed(0)
    net, clients, q = nn.Linear(100, 10), 40, 0.25
    x, y = torch.randn(2 * clients, 100), torch.randint(0, 10, (2 * clients,))
    algorithm, _ = create("fedavg")
    dp = ClientDP(PrivacyOptions(noise_multiplier=1.3, clip=0.7, sampling="poisson"), rounds=10)
    fed = ToyFederation(net, algorithm, [(x[i:i + 2], y[i:i + 2]) for i in range(0, 2 * clients, 2)], "state",
                        lr=0.0, extra_callbacks=[dp], sampler=PoissonSampler(clients, q))
    sizes = np.array([len(fed.loop.sample_clients(r)) for r in range(2000)])
    n = len(sizes)
    assert abs(sizes.mean() - clients * q) < 4.5 * math.sqrt(clients * q * (1 - q) / n)
    assert abs(sizes.var(ddof=1) / (clients * q * (1 - q)) - 1) < 4.5 * math.sqrt(2 / (n - 1))
    observed = np.bincount(sizes, minlength=clients + 1)
    expected = stats.binom.pmf(np.arange(clients + 1), clients, q) * n
    low, high = 4, 16  # pool the tails so every expected cell is ≥ 5
    pooled_obs = [observed[:low + 1].sum(), *observed[low + 1:high], observed[high:].sum()]
    pooled_exp = [expected[:low + 1].sum(), *expected[low + 1:high], expected[high:].sum()]
    assert stats.chisquare(pooled_obs, pooled_exp).pvalue > 1e-4
    dp.prepare(clients, int(q * clients), 10)
    steps = []
    for r in range(10):
        before = fed.global_params.clone()
        fed.run_round(r)
        steps.append((fed.global_params - before).double() * q * clients)
    sample, sigma = torch.cat(steps), 1.3 * 0.7
    statistic = (sample.pow(2).mean() / sigma ** 2 - 1) * math.sqrt(sample.numel() / 2)
    assert abs(float(statistic)) < 4.5


def test_poisson_block_uploads_divide_by_each_blocks_expected_cohort():
    """FedBCGD, 2 blocks + shared, Poisson q = M/K: each joining client draws its block from the round's block
    stream, independently of the others; the update is (Σ clipped u + N(0, z²C²)) / E[n_k]: qK/2 on a block's
    coordinates, qK on the shared block's."""
    from fl_lightning.callbacks import BlockUploadMask
    from fl_lightning.privacy.mechanism import NOISE, gaussian
    recorder, clip = ArrivedSums(), 0.05
    x0 = torch.nn.utils.parameters_to_vector(mlp().parameters()).double()
    module, rows = fit(1, callbacks=[recorder], algorithm="fedbcgd", num_blocks=2, server_momentum=0.0,
                       privacy=PrivacyOptions(noise_multiplier=1.0, clip=clip, sampling="poisson"))
    (mask,) = [cb for cb in module.trainer.callbacks if isinstance(cb, BlockUploadMask)]
    draws = np.random.default_rng(derive_seed(0, Purpose.BLOCK_ORDER)).integers(0, 2, size=CLIENTS)
    assert mask.block_of == {cid: int(draws[cid]) for cid in mask.block_of} and len(mask.block_of) > 0
    blocks, d = module.blocks, x0.numel()
    counts = torch.zeros(d, dtype=torch.float64)
    for j in range(2):
        for start, stop in blocks.upload_ranges(j):
            counts[start:stop] += COHORT / 2
    assert set(counts.tolist()) == {COHORT / 2, float(COHORT)}  # blocks and the shared block
    expected = x0 + (recorder.sums["delta"][:d] + gaussian(d, clip, 0, NOISE)) / counts
    assert torch.allclose(module.flat.vector.double(), expected, atol=1e-6)
    assert float(rows[0]["privacy/poisson"]) == 1.0
    signal = float(recorder.sums["delta"][:d].norm()) / math.sqrt(d)  # RMS of the clipped sum per coordinate
    assert float(rows[0]["privacy/noise_to_signal"]) == pytest.approx(clip / signal, rel=1e-6)


@pytest.mark.parametrize("sampling,accounting,hp", [("fixed", "rdp", {}), ("poisson", "rdp", {}),
                                                    ("poisson", "pld", {}),
                                                    ("poisson", "rdp", {"algorithm": "fedbcgd", "num_blocks": 2})])
def test_calculator_and_logged_epsilon_agree(sampling, accounting, hp, capsys):
    _, rows = fit(2, privacy=PrivacyOptions(noise_multiplier=1.0, clip=0.05, sampling=sampling,
                                            accountant=accounting), **hp)
    capsys.readouterr()
    assert cli_main(["privacy", "--rounds", "2", "--cohort", str(COHORT), "--population", str(CLIENTS),
                     "--noise-multiplier", "1.0", "--sampling", sampling, "--accountant", accounting]) == 0
    printed = float(capsys.readouterr().out.split()[2])
    assert printed == pytest.approx(float(rows[-1]["privacy/epsilon"]), abs=1e-4)
    assert float(rows[-1]["privacy/delta"]) == 1e-5  # min(1e-5, 1/K^1.1)


def test_replace_one_accounts_twice_the_sensitivity():
    """The fixed cohort's ε at z is the one an add/remove-one event would give at z/2 (same draw, same noise)."""
    assert accountant.default_delta(6) == 1e-5 and accountant.default_delta(10 ** 6) == pytest.approx(10 ** -6.6)
    fixed = accountant.epsilon(1.0, 3, 20, 20)
    assert fixed == pytest.approx(accountant.epsilon(0.5, 3, 20, 20, sampling="poisson"), rel=1e-9)


def test_checkpoint_of_the_old_accounting_is_refused():
    with pytest.raises(ConfigError, match=r"^ckpt_path: its ε was accounted by privacy accounting version 1"):
        check_accounting({"clip": 1.0, "epsilon": 0.5, "noise_multiplier": 1.0})
    check_accounting({"accounting": accountant.ACCOUNTING})


DP = ["--trainer.max_epochs", "2", "--trainer.enable_progress_bar", "false"]
BAD = [(["--model.privacy.noise_multiplier", "1", "--model.privacy.clip", "0"], "model.privacy.clip", "must be > 0"),
       (["--model.privacy.noise_multiplier", "-1"], "model.privacy.noise_multiplier", "must be > 0"),
       (["--model.privacy.noise_multiplier", "1", "--model.privacy.delta", "0.05"], "privacy.delta",
        "must be in (0, 1/K) = (0, 0.05) for K=20"),
       (["--model.privacy.target_epsilon", "1e-9"], "privacy.target_epsilon", "not reachable"),
       (["--model.privacy.noise_multiplier", "1", "--model.privacy.epsilon_budget", "0.01"],
        "model.privacy.epsilon_budget", "one round already spends"),
       (["--model.privacy.noise_multiplier", "1", "--model.algorithm", "fednova"], "model.privacy", "fednova"),
       (["--model.privacy.noise_multiplier", "1", "--model.privacy.sampling", "poisson", "--model.compression",
         "topk", "--model.compression.k", "0.5", "--model.compression.error_feedback", "false"],
        "model.privacy.sampling", "use sampling fixed, or no codec")]


@pytest.mark.parametrize("args,field,fix", BAD, ids=[" ".join(a) for a, _, _ in BAD])
def test_bad_privacy_input_is_one_line_before_any_fit_work(args, field, fix, capsys):
    code = cli_main(["fit", "--config", QUICKSTART, *DP, *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert field in err[0] and fix in err[0], err[0]
    assert not os.path.exists("runs")  # nothing half-written


def test_report_shows_epsilon_delta_sampling_and_refuses_to_average_different_epsilons(capsys):
    from fl_lightning.runs import report
    _, first = fit(2, "dp,seed_everything=0", privacy=PrivacyOptions(noise_multiplier=1.0, clip=0.05,
                                                                        sampling="poisson"))
    assert report.main(["runs/dp,seed_everything=0", "--target", "0.5", "--out", "one", "--label", "dir"]) == 0
    (row,) = list(csv.DictReader(open("one.csv")))
    assert (float(row["final_epsilon"]), float(row["delta"]), row["sampling"]) == (
        float(first[-1]["privacy/epsilon"]), 1e-5, "poisson")
    header = Path("one.md").read_text().splitlines()[0]
    assert "| final_epsilon | delta | sampling |" in header
    fit(2, "dp,seed_everything=1", privacy=PrivacyOptions(noise_multiplier=2.0, clip=0.05, sampling="poisson"))
    capsys.readouterr()
    assert cli_main(["report", "runs", "--target", "0.5", "--out", "two", "--label", "dir"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "report: group 'dp' mixes runs of different privacy (ε " in err[0], err
    assert not os.path.exists("two.csv") and not os.path.exists("two.md")


def test_resuming_a_checkpoint_of_the_old_accounting_is_one_line(capsys):
    import glob
    args = ["fit", "--config", QUICKSTART, "--model.privacy.noise_multiplier", "1", *DP]
    assert cli_main([*args[:-3], "1", *args[-2:]]) == 0
    (ckpt,) = glob.glob("runs/quickstart/*/version_0/checkpoints/*.ckpt")
    old = torch.load(ckpt, weights_only=True)
    (key,) = [k for k in old["callbacks"] if k.startswith("ClientDP")]
    assert old["callbacks"][key]["accounting"] == accountant.ACCOUNTING
    del old["callbacks"][key]["accounting"]  # as written before the accounting version existed
    torch.save(old, "old.ckpt")
    capsys.readouterr()
    assert cli_main([*args, "--ckpt_path", "old.ckpt"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ckpt_path: its ε was accounted by privacy accounting version 1" in err[0], err
    assert len(glob.glob("runs/quickstart/*/version_*")) == 1  # nothing new written


def test_summary_of_a_dp_run_near_chance_gives_the_diagnostics_and_a_hint():
    dp = ClientDP(PrivacyOptions(noise_multiplier=1.0, clip=0.05), rounds=3)
    dp.prepare(CLIENTS, COHORT)
    dp.epsilon, dp.clipped, dp.reported, dp.noise_to_signal = 2.5, 3, 4, 12.0
    assert dp.summary(0.91, 0.3, 10) == ", privacy ε 2.5 at δ 1e-05 (fixed sampling)"
    assert dp.summary(0.11, 40.0, 10) == (", privacy ε 2.5 at δ 1e-05 (fixed sampling) — near chance: 75 % of uploads "
                                          "clipped, noise-to-signal 12 per coordinate; raise model.privacy.clip, lower "
                                          "the noise (a larger target_epsilon) or sample more clients per round")


def test_a_poisson_round_nobody_joined_still_releases_its_noise():
    """4 clients, q = 1/4: about a third of the rounds draw nobody. Every round's step is the noise / qK, also
    then (keeping x would tell that nobody joined, which the accounting does not cover)."""
    from fl_lightning.privacy.mechanism import NOISE, gaussian
    torch.manual_seed(0)
    net = nn.Linear(3, 2)
    x, y = torch.randn(8, 3), torch.randint(0, 2, (8,))
    algorithm, _ = create("fedavg")
    dp = ClientDP(PrivacyOptions(noise_multiplier=1.0, clip=0.5, sampling="poisson"), rounds=12)
    fed = ToyFederation(net, algorithm, [(x[i:i + 2], y[i:i + 2]) for i in range(0, 8, 2)], "state", lr=0.0,
                        extra_callbacks=[dp], sampler=PoissonSampler(4, 0.25))
    dp.prepare(4, 1, 12)
    empty = 0
    for r in range(12):
        empty += not fed.loop.sample_clients(r)
        before = fed.global_params.clone().double()
        fed.run_round(r)
        step = fed.global_params.double() - before
        assert torch.allclose(step, gaussian(step.numel(), 0.5, r, NOISE) / 1.0, atol=1e-6)
    assert empty >= 2


def test_report_marks_a_run_of_the_old_accounting():
    """tests/data/old_accounting_run: a DP run logged before accounting version 2 (once kept in docs/privacy/runs)."""
    from fl_lightning.runs import report
    assert report.main([str(ROOT / "tests/data/old_accounting_run/fedavg_eps1_seed0"), "--target", "0.5",
                        "--out", "old"]) == 0
    (row,) = list(csv.DictReader(open("old.csv")))
    assert row["sampling"] == "fixed; its logged ε under-reports (old accounting)"
