"""Clients that fail: seeded client_dropout and NaN/inf updates, against the reference in
tests/reference.py — which drops lost clients (the library's recorded draw) and non-finite updates (its
own check), keeps dropped clients' state, and leaves unreported blocks and silent rounds unchanged."""
import csv

import pytest
import torch
from pytorch_lightning.loggers import CSVLogger

from fl_lightning import FederatedDataModule, FederatedModule
from fl_lightning.callbacks import ControlVariates, DriftCorrection
from fl_lightning.data import DataSplit
from fl_lightning.errors import ConfigError
from tests.conftest import make_trainer
from tests.reference import (BLOCK_OF, LAM, S, Rule, Tiny, assert_params, data, flat_state, run_library,
                             run_reference, server_velocity)

LOST = 0.7  # with seed 0, rounds 1-3 lose 2, 3 (everyone) and 1 of the 3 sampled clients
CASES = {
    "fedbcgd": (dict(algorithm="fedbcgd", server_momentum=LAM), Rule(momentum=LAM)),
    "fedbcgd_plus": (dict(algorithm="fedbcgd_plus", server_momentum=LAM), Rule(momentum=LAM, controls="option2",
                                                                                svrg=True)),
    "fedbcgd_plus_authors": (dict(algorithm="fedbcgd_plus", rule="authors", grad_clip=0.5),
                             Rule(momentum=0.45, controls="authors", keep_all=True, clip=0.5)),
    "scaffold": (dict(algorithm="scaffold"), Rule(blocks=False, controls="option2")),
    "feddc": (dict(algorithm="feddc", alpha=0.1), Rule(blocks=False, feddc_alpha=0.1)),
}


def check_against_reference(module, initial, recorder, rule, split_and_parts=None):
    expected = run_reference(initial, recorder, rule, split_and_parts)
    for clients in recorder.rounds:
        assert [rec["reported"] for rec in clients] == [rec["expected_reported"] for rec in clients]
    assert_params(dict(module.net.named_parameters()), expected["x"])
    if rule.momentum:
        assert_params(flat_state(module, server_velocity(module)), expected["v"])
    for cb in module.loop.callbacks:
        if isinstance(cb, (ControlVariates, DriftCorrection)):
            assert_params(flat_state(module, cb.server_control), expected["c"])
            table = cb.client_controls
            assert set(table.clients()) == {rec["client"] for rnd in recorder.rounds for rec in rnd
                                            if rec["reported"]}  # a dropped client stores nothing
            for i in table.clients():
                assert_params(flat_state(module, table.read(i)), expected["c_client"][i])
    return expected


@pytest.mark.parametrize("case", CASES)
def test_dropped_clients_against_reference(case):
    """p = 0.5 over five rounds (seed 0): rounds 2 and 4 nobody reports; in round 5 the one reporter owns
    one block, so the other block (moving with momentum since round 1) was reported by nobody."""
    hp, rule = CASES[case]
    hp = dict(hp)
    module, initial, recorder = run_library(hp.pop("algorithm"), rounds=5, client_dropout=0.5, **hp)
    assert [sum(rec["lost"] for rec in clients) for clients in recorder.rounds] == [1, 3, 1, 3, 2]
    check_against_reference(module, initial, recorder, rule)


def test_a_block_nobody_reported_keeps_its_values_and_momentum():
    """p = 0.2 (seed 0): everyone reports in round 1; in round 2 block 1's only owner is lost."""
    before, _, _ = run_library("fedbcgd", rounds=1, client_dropout=0.2, server_momentum=LAM)
    after, _, recorder = run_library("fedbcgd", rounds=2, client_dropout=0.2, server_momentum=LAM)
    assert {rec["block"] for rec in recorder.rounds[1] if rec["reported"]} == {0}
    params = [dict(m.net.named_parameters()) for m in (before, after)]
    velocity = [flat_state(m, server_velocity(m)) for m in (before, after)]
    for name, block in BLOCK_OF.items():
        unchanged = block == 1
        assert torch.equal(params[0][name], params[1][name]) == unchanged, name
        assert torch.equal(velocity[0][name], velocity[1][name]) == unchanged, name
        assert velocity[0][name].abs().sum() > 0


def test_counts_logged_per_round_and_a_silent_round_changes_nothing(recwarn):
    torch.manual_seed(0)
    split, parts = data()
    module = FederatedModule(Tiny(), algorithm="scaffold", clients_per_round=S, batch_size=2, client_dropout=LOST)
    logger = CSVLogger("runs", name="failures")
    make_trainer(3, logger=logger).fit(module, FederatedDataModule.from_tensors(split, parts))
    with open(f"{logger.log_dir}/metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["comm/clients_reported"]) for r in rows] == [1.0, 0.0, 2.0]
    assert [float(r["comm/clients_dropped"]) for r in rows] == [2.0, 3.0, 1.0]
    assert [r["train/loss"] != "" for r in rows] == [True, False, True]
    d = module.flat.num_params
    assert float(rows[1]["comm/upload_bytes"]) == float(rows[0]["comm/upload_bytes"]) == 4 * 2 * d  # Δ and Δc
    assert float(rows[1]["comm/download_bytes"]) == 2 * float(rows[0]["comm/download_bytes"]) == 2 * 4 * 2 * d * S
    assert rows[1]["val/acc"] == rows[0]["val/acc"] and rows[1]["val/loss"] == rows[0]["val/loss"]
    assert any("round 2: none of the 3 sampled clients reported" in str(w.message) for w in recwarn)


def nan_client_data(client=0):
    split, parts = data()
    train_x = split.train_x.clone()
    train_x[parts[client]] = float("inf")  # its gradients, and so its update, are NaN
    return DataSplit(train_x, split.train_y, split.test_x, split.test_y, 3), parts


def test_non_finite_updates_are_dropped_not_averaged(recwarn):
    broken = nan_client_data()
    module, initial, recorder = run_library("fedavgm", rounds=3, split_and_parts=broken, server_momentum=LAM)
    dropped = [rec for rnd in recorder.rounds for rec in rnd if not rec["reported"]]
    assert dropped and all(rec["client"] == 0 and not rec["lost"] for rec in dropped)
    check_against_reference(module, initial, recorder, Rule(blocks=False, momentum=LAM), broken)
    assert all(torch.isfinite(p).all() for p in module.net.parameters())
    assert any("dropped 1 client update(s) with NaN/inf" in str(w.message) for w in recwarn)


def test_client_dropout_out_of_range_is_one_line():
    with pytest.raises(ConfigError, match=r"^model.client_dropout: must be in \[0, 1\), got 1.0$"):
        FederatedModule(Tiny(), client_dropout=1.0)
