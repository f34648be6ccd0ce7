"""Nothing changed numerically in the algorithm API refactor: every preset's 5-round quickstart
metrics (every logged value) and final weights equal, bit for bit, those recorded before it
(tests/preset_golden.py). The one intended change: fedbcgd_plus_qsgd clients keep the c_i the
server can reconstruct (decoded Δc), which moves its numbers from round 2 on."""
import json

import pytest

from preset_golden import GOLDEN, run_metrics

CASES = json.loads(GOLDEN.read_text())
RENAMED = {"--model.fedprox_mu": "--model.algorithm.mu", "--model.feddc_alpha": "--model.algorithm.alpha",
           "--model.control_variate": "--model.algorithm.control_variate",
           "--model.control_rule": "--model.algorithm.rule", "--model.control_keep": "--model.algorithm.keep",
           "--model.shared_control_coefficient": "--model.algorithm.shared_coefficient",
           "--model.variance_reduction": "--model.algorithm.variance_reduction",
           "--model.num_blocks": "--model.algorithm.num_blocks", "--model.shared_block": "--model.algorithm.shared_block",
           "--model.server_momentum": "--model.algorithm.server_momentum",
           "--model.server_lr": "--model.algorithm.server_lr", "--model.compression_k": "--model.compression.k",
           "--model.error_feedback": "--model.compression.error_feedback",
           "--model.qsgd_levels": "--model.compression.levels",
           "--model.qsgd_bucket_size": "--model.compression.bucket_size"}
FIXED = {"fedbcgd_plus_qsgd"}  # the QSGD control-variate fix (issue: c stays the mean of the c_i)


def new_args(old: list[str]) -> list[str]:
    return [RENAMED.get(arg, arg) for arg in old]


@pytest.mark.parametrize("case", sorted(set(CASES) - FIXED))
def test_every_preset_gives_the_recorded_metrics_bit_for_bit(case):
    got = run_metrics(new_args(CASES[case]["args"]))
    assert got["rows"] == CASES[case]["rows"]
    assert got["weights_sha256"] == CASES[case]["weights_sha256"]


def test_qsgd_control_variate_fix_changes_only_what_it_should():
    recorded = CASES["fedbcgd_plus_qsgd"]
    got = run_metrics(recorded["args"])
    assert got["rows"][0] == recorded["rows"][0]  # round 1: every c_i starts at 0, c's step is the same
    assert got["rows"][-1]["val/loss"] != recorded["rows"][-1]["val/loss"]
    assert [r["comm/upload_bytes"] for r in got["rows"]] == [r["comm/upload_bytes"] for r in recorded["rows"]]
