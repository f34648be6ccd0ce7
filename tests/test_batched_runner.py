"""The batched client runner (fl_lightning.federation.batched) against the serial one: every algorithm's
round-2 global model equal to ≤ 1e-5 relative (vmap sums in another order), on clients of unequal size
with momentum, weight decay, two local epochs and partial last minibatches; the same numbers for any
cohort size B and bit-identical for the same seed; what it cannot batch refused in one line."""
import subprocess
import sys
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from torch import nn

from fl_lightning.algorithms import REGISTRY
from fl_lightning.errors import ConfigError
from fl_lightning.federation.batched import check_batched
from fl_lightning.federation.flat import FlatModel
from fl_lightning.federation.toy import ToyFederation
from fl_lightning.module_options import resolve
from fl_lightning.data.datamodule import ClientData

TOLERANCE = 1e-5  # ‖x_batched − x_serial‖ / ‖x_serial‖ after two rounds
SIZES = [7, 12, 5, 9, 6, 10]  # batch 4: 2, 3, 2, 3, 2, 3 steps per epoch, most ending in a partial batch


def clients():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g)) for n in SIZES]


def network() -> nn.Module:
    torch.manual_seed(0)  # LayerNorm: a normalisation layer without buffers (FedBN runs too)
    return nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))


def global_after_two_rounds(tmp_path, name: str, runner: str, cohort_size=None, options=None, **kwargs):
    pl.seed_everything(0, verbose=False)
    algorithm, codec = resolve(name, None)
    if options:
        algorithm = type(algorithm)(**{**algorithm.options(), **options})
    fed = ToyFederation(network(), algorithm, clients(), str(tmp_path / f"{runner}{cohort_size}"), lr=0.1,
                        batch_size=4, local_epochs=2, weight_decay=1e-3, momentum=0.5, codec=codec,
                        client_runner=runner, cohort_size=cohort_size, **kwargs)
    for round_idx in range(2):
        fed.run_round(round_idx)
    return fed.global_vector.clone()


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_algorithm_equals_the_serial_runner_for_any_cohort_size(tmp_path, name):
    serial = global_after_two_rounds(tmp_path, name, "serial")
    batched = global_after_two_rounds(tmp_path, name, "batched")
    in_pairs = global_after_two_rounds(tmp_path, name, "batched", cohort_size=2)
    assert relative(batched, serial) <= TOLERANCE
    assert relative(in_pairs, serial) <= TOLERANCE


@pytest.mark.parametrize("name, options, clip", [
    ("scaffold", {"control_variate": "option1"}, None),  # ∇f_i(x^r) on the loop's working model
    ("fedbcgd_plus", {"variance_reduction": True}, None),  # ∇f_i(x^r; ζ) for every minibatch
    ("fedbcgd_plus", {"rule": "authors", "control_variate": "option2"}, 0.05),  # clipping that bites
])
def test_full_gradients_minibatch_replays_and_clipping_equal_the_serial_runner(tmp_path, name, options, clip):
    serial = global_after_two_rounds(tmp_path, name, "serial", options=options, grad_clip=clip)
    batched = global_after_two_rounds(tmp_path, name, "batched", cohort_size=4, options=options, grad_clip=clip)
    assert relative(batched, serial) <= TOLERANCE


def test_the_same_seed_gives_bit_identical_numbers(tmp_path):
    first = global_after_two_rounds(tmp_path / "a", "scaffold", "batched", cohort_size=4)
    second = global_after_two_rounds(tmp_path / "b", "scaffold", "batched", cohort_size=4)
    assert torch.equal(first, second)


def refusal(net: nn.Module, **overrides) -> str:
    g = torch.Generator().manual_seed(0)
    data = ClientData(torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g), [0, 4, 8])
    options = {"local_optimizer": "sgd", "local_trainer": None, "parallel_clients": 1, **overrides}
    loss = lambda module, x, y: nn.functional.cross_entropy(module(x), y)  # noqa: E731
    with pytest.raises(ConfigError) as caught:
        check_batched(FlatModel(net), loss, data, 4, **options)
    return str(caught.value)


def test_what_it_cannot_batch_is_refused_naming_the_reason():
    assert "floating buffers (e.g. BatchNorm" in refusal(nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4)))
    assert "draws from torch's global random generator" in refusal(nn.Sequential(nn.Linear(6, 4), nn.Dropout(0.5)))
    assert "model.parallel_clients > 1" in refusal(nn.Linear(6, 3), parallel_clients=2)
    assert "model.local_trainer" in refusal(nn.Linear(6, 3), local_trainer={})
    assert "not SGD" in refusal(nn.Linear(6, 3), local_optimizer="network")
    assert "FedBuff" in refusal(nn.Linear(6, 3), asynchronous=True)
    message = refusal(nn.Linear(6, 3), parallel_clients=2)
    assert message.startswith("model.client_runner: batched cannot train this run") and "\n" not in message


def test_the_command_line_refuses_in_one_line_with_exit_code_2(tmp_path):
    quickstart = str(Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml")
    cli = str(Path(sys.executable).with_name("fl-lightning"))
    done = subprocess.run([cli, "fit", "--config", quickstart, "--model.client_runner", "batched",
                           "--model.parallel_clients", "2"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "fl-lightning: error: model.client_runner: batched cannot train this run: model.parallel_clients > 1 is "
        "the threads runner; use model.client_runner serial")
    assert not (tmp_path / "runs").exists()
