"""FedBCGD, FedBCGD+ and SCAFFOLD against the independent reference in tests/reference.py:
two rounds, M=4, S=3, N=2, every state vector compared (global model, server momentum,
server c, every c_i, every client's local model)."""
import pytest
import torch

from fl_lightning.callbacks import ControlVariates, VarianceReduction
from tests.reference import (LAM, S, Rule, assert_params, check_assignment, check_local_models, flat_state,
                             run_library, run_reference, server_velocity)

PLUS = dict(algorithm="fedbcgd_plus", server_momentum=LAM)
CASES = {
    "fedbcgd": (dict(algorithm="fedbcgd", server_momentum=LAM), Rule(momentum=LAM)),
    "fedbcgd_no_momentum": (dict(algorithm="fedbcgd", server_momentum=0.0), Rule()),
    "fedbcgd_freezing": (dict(algorithm="fedbcgd_freezing", server_momentum=LAM), Rule(momentum=LAM, freeze=True)),
    # the defaults: option II, keep uploaded, shared coefficient 1/M, SVRG on
    "fedbcgd_plus_defaults": (PLUS, Rule(momentum=LAM, controls="option2", svrg=True)),
    "fedbcgd_plus_opt2": (dict(PLUS, variance_reduction=False), Rule(momentum=LAM, controls="option2")),
    "fedbcgd_plus_opt1_svrg": (dict(PLUS, control_variate="option1"),
                               Rule(momentum=LAM, controls="option1", svrg=True)),
    "fedbcgd_plus_opt1_keep_all": (dict(PLUS, control_variate="option1", keep="all", variance_reduction=False),
                                   Rule(momentum=LAM, controls="option1", keep_all=True)),
    "fedbcgd_plus_paper_coefficient": (dict(PLUS, shared_coefficient="paper"),
                                       Rule(momentum=LAM, controls="option2", svrg=True, shared_coefficient="paper")),
    # equal client sizes: weighting leaves Δ̄ unchanged, and Eq. 5's Δc sum must stay unweighted
    "fedbcgd_plus_weighted": (dict(PLUS, weighted_aggregation=True), Rule(momentum=LAM, controls="option2", svrg=True)),
    # the authors' code: server momentum 0.45 and clip 10 by default, no SVRG, keep all, EMA of c
    "fedbcgd_plus_authors": (dict(algorithm="fedbcgd_plus", rule="authors", grad_clip=0.5),
                             Rule(momentum=0.45, controls="authors", keep_all=True, clip=0.5)),
    "scaffold": (dict(algorithm="scaffold"), Rule(blocks=False, controls="option2")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_two_rounds_match_reference(case):
    hp, rule = CASES[case]
    hp = dict(hp)
    module, initial, recorder = run_library(hp.pop("algorithm"), **hp)
    check_assignment(recorder, blocks=rule.blocks)
    expected = run_reference(initial, recorder, rule)
    assert_params(dict(module.net.named_parameters()), expected["x"])
    if rule.momentum:
        assert_params(flat_state(module, server_velocity(module)), expected["v"])
    if rule.controls:
        (controls,) = [cb for cb in module.loop.callbacks if isinstance(cb, ControlVariates)]
        assert_params(flat_state(module, controls.server_control), expected["c"])
        table = controls.client_controls
        assert set(table.clients()) == {rec["client"] for rnd in recorder.rounds for rec in rnd}
        for i in table.clients():
            assert_params(flat_state(module, table.read(i)), expected["c_client"][i])
    check_local_models(module, recorder, freeze=rule.freeze)


def test_authors_rule_clips_at_ten_by_default():
    module, _, _ = run_library("fedbcgd_plus", rounds=1, rule="authors")
    assert module.loop.config.grad_clip == 10.0
    assert module.loop.server_optimizer.param_groups[0]["momentum"] == 0.45
    (controls,) = [cb for cb in module.loop.callbacks if isinstance(cb, ControlVariates)]
    assert controls.keep == "all" and not any(isinstance(cb, VarianceReduction) for cb in module.loop.callbacks)


def test_upload_counts_on_tiny_model():
    sizes = {0: 3 * 4 + 4, 1: 4 * 4 + 4, "s": 4 * 3 + 3}
    for algorithm, factor, down in (("fedbcgd", 1, 1), ("fedbcgd_plus", 2, 2)):
        module, _, recorder = run_library(algorithm, rounds=1)
        floats = sum(sizes[rec["block"]] + sizes["s"] for rec in recorder.rounds[0])
        assert module.loop.comm.upload_bytes == 4 * factor * floats
        assert module.loop.comm.download_bytes == 4 * down * S * sum(sizes.values())
