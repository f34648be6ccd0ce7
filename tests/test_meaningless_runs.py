"""Runs that would mean nothing are refused in one line (exit 2, nothing written); a sound one that was refused runs:
Local without held-out data or with DP, Local's traffic (what is sent), PLD on a fixed cohort of everyone."""
import csv
import glob
import os

import pytest

from fl_lightning.cli import main
from fl_lightning.privacy import accountant
from tests.test_cli import QUICKSTART, QUIET

ONE_ROUND = ["fit", "--config", QUICKSTART, *QUIET, "--trainer.max_epochs", "1"]


@pytest.mark.parametrize("options, message", [
    (["--model.algorithm", "local"],
     "data.personal_fraction: local trains a model on each client that only pval/* measures (val/acc is the "
     "unchanged x^0's): set --data.personal_fraction 0.2"),
    (["--model.algorithm", "local", "--data.personal_fraction", "0.2", "--model.privacy.noise_multiplier", "1"],
     "model.privacy: local releases nothing (each client keeps its model, 0 floats uploaded), so there is no ε to "
     "report; leave model.privacy unset for local"),
])
def test_local_without_held_out_data_or_with_dp_is_refused(options, message, capsys):
    code = main([*ONE_ROUND, *options])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [f"fl-lightning: error: {message}"]
    assert not os.path.exists("runs")


def test_local_downloads_x0_once_per_client_and_nothing_after():
    """3 rounds of 10 of 20 clients (the quickstart's sampler, seeded): a client is sent x^0 the first time it trains
    only — download bytes = 4 d × (clients new that round)."""
    assert main(["fit", "--config", QUICKSTART, *QUIET, "--trainer.max_epochs", "3", "--model.algorithm", "local",
                 "--data.personal_fraction", "0.2"]) == 0
    (metrics,) = glob.glob("runs/quickstart/local,personal_fraction=0.2,seed=0/version_0/metrics.csv")
    rows = list(csv.DictReader(open(metrics)))
    d = 64 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10  # the quickstart's MLP 64-200-200-10
    total = [int(float(r["comm/download_bytes"])) for r in rows]  # cumulative
    sent = [total[0]] + [b - a for a, b in zip(total, total[1:])]
    assert sent[0] == 10 * 4 * d  # every client of round 1 is new
    assert all(b % (4 * d) == 0 for b in sent) and sent[1] < sent[0] and sent[2] < sent[0]  # only the new ones
    assert total[-1] // (4 * d) <= 20 and all(float(r["comm/upload_bytes"]) == 0 for r in rows)


def test_pld_on_a_fixed_cohort_of_everyone_runs_and_reports_the_tight_epsilon():
    """M = K = 20: a plain Gaussian each round (replace-one, z/2), accounted by PLD as the calculator does; its ε is
    the calculator's and below RDP's bound. M < K with pld stays refused (one line, nothing written)."""
    assert main([*ONE_ROUND, "--trainer.max_epochs", "2", "--model.clients_per_round", "20",
                 "--model.privacy.noise_multiplier", "2", "--model.privacy.accountant", "pld"]) == 0
    (metrics,) = glob.glob("runs/quickstart/*/version_0/metrics.csv")
    rows = list(csv.DictReader(open(metrics)))
    delta = accountant.default_delta(20)
    tight = accountant.epsilon(2.0, 2, 20, 20, delta, "fixed", "pld")
    assert float(rows[-1]["privacy/epsilon"]) == pytest.approx(tight, rel=1e-9)
    assert tight < accountant.epsilon(2.0, 2, 20, 20, delta, "fixed", "rdp")


def test_pld_on_a_fixed_cohort_of_some_is_refused_in_one_line(capsys):
    code = main([*ONE_ROUND, "--model.privacy.noise_multiplier", "2", "--model.privacy.accountant", "pld"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "M=10 of K=20" in err[0] and "accountant rdp, sampling poisson" in err[0]
    assert not os.path.exists("runs")
