"""The batched client runner (fl_lightning.federation.batched) against the serial one: every algorithm's
round-2 global model equal to ≤ 1e-5 relative (vmap sums in another order), on clients of unequal size
with momentum, weight decay, two local epochs and partial last minibatches; the same numbers for any
cohort size B and bit-identical for the same seed; what it cannot batch refused in one line."""
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from torch import nn

from fl_lightning import FederatedDataModule, FederatedModule
from fl_lightning.algorithms import REGISTRY
from fl_lightning.data import DataSplit
from fl_lightning.data.images import ImageTransform
from fl_lightning.errors import ConfigError
from fl_lightning.assembly.fit import Fit, network_traits
from fl_lightning.federation.batched import BatchedRunner
from fl_lightning.federation.flat import FlatModel
from fl_lightning.federation.toy import ToyFederation
from fl_lightning.models import LeNet5
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


def toy_fit(net: nn.Module, **overrides) -> Fit:
    """Two clients of 4 samples, the network's traits read from ``net`` (fl_lightning.assembly.fit)."""
    g = torch.Generator().manual_seed(0)
    data = ClientData(torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g), [0, 4, 8])
    loss = lambda module, x, y: nn.functional.cross_entropy(module(x), y)  # noqa: E731
    return Fit(2, 2, (4, 4), batch_size=4, network=network_traits(FlatModel(net), loss, data, 4), **overrides)


def refusal(net: nn.Module, runner=BatchedRunner, **overrides) -> str:
    refused = runner.refuse(toy_fit(net, **overrides))
    assert isinstance(refused, ConfigError)
    return str(refused)


def test_what_it_cannot_batch_is_refused_naming_the_reason():
    assert "floating buffers (e.g. BatchNorm" in refusal(nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4)))
    assert "draws from torch's global random generator" in refusal(nn.Sequential(nn.Linear(6, 4), nn.Dropout(0.5)))
    assert "model.parallel_clients > 1" in refusal(nn.Linear(6, 3), parallel_clients=2)
    assert "model.local_trainer" in refusal(nn.Linear(6, 3), local_trainer=True)
    assert "not SGD" in refusal(nn.Linear(6, 3), local_optimizer="network")
    assert "one client per server step" in refusal(nn.Linear(6, 3), schedule_epoch="server step")  # FedBuff's
    assert BatchedRunner.refuse(toy_fit(nn.Linear(6, 3))) is None
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


def test_the_compiled_variant_is_the_batched_runner_by_its_own_name():
    from fl_lightning.federation.batched import BatchedRunner, CompiledBatchedRunner
    from fl_lightning.federation.runners import RUNNERS
    assert RUNNERS["batched_compiled"] is CompiledBatchedRunner and issubclass(CompiledBatchedRunner, BatchedRunner)
    assert CompiledBatchedRunner.compile_options == {} and BatchedRunner.compile_options is None
    assert refusal(nn.Sequential(nn.Linear(6, 3), nn.Dropout(0.5)), CompiledBatchedRunner).startswith(
        "model.client_runner: batched_compiled cannot train this run: the network's forward draws from torch's global "
        "random generator")


@pytest.mark.parametrize("name", ["fedavg", "fedbcgd_plus"])  # FedBCGD+: ∇f_i(x^r; ζ) at every step too
def test_a_compiled_cohort_is_compiled_once_per_minibatch_size_and_equals_the_eager_one(tmp_path, name):
    """The compiled runner calls its function on the whole cohort (finished clients on a filler batch, their rows
    dropped) and on x^r laid out as Y, so torch.compile specialises on the minibatch size alone: the toy clients'
    sizes (4, 3, 1, 2) give 4 graphs, where clients finishing one by one and x^r's stride-0 rows gave more than
    dynamo's limit of 8 (it then runs the function uncompiled). ``aot_eager``: dynamo and AOTAutograd without
    inductor's minute of code generation; the numbers equal the eager runner's bit for bit."""
    from torch._dynamo.testing import CompileCounterWithBackend

    from fl_lightning.federation.batched import BatchedRunner
    from fl_lightning.federation.runners import RUNNERS
    counter = CompileCounterWithBackend("aot_eager")
    runner = f"test_counted_{name}"

    @RUNNERS.register(runner)
    class Counted(BatchedRunner):
        compile_options = {"backend": counter}

    try:
        torch._dynamo.reset()
        compiled = global_after_two_rounds(tmp_path, name, runner)
    finally:
        del RUNNERS[runner]
        torch._dynamo.reset()
    assert counter.frame_count == len({n % 4 or 4 for n in SIZES}) == 4
    assert torch.equal(compiled, global_after_two_rounds(tmp_path, name, "batched"))


def fit_on_augmented_images(tmp_path, runner: str):
    """Two FedBCGD+ rounds in a real Trainer on 4 clients of uint8 images through the paper's transforms
    (crop with padding, flip, normalisation on the device); the final global vector and the warnings."""
    pl.seed_everything(0, verbose=False)
    g = torch.Generator().manual_seed(3)
    images = torch.randint(0, 256, (40, 3, 32, 32), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (40,), generator=g)
    mean, std = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)
    split = DataSplit(images[:32], labels[:32], images[32:], labels[32:], 10,
                      train_transform=ImageTransform(mean, std, train=True), eval_transform=ImageTransform(mean, std))
    sizes = [5, 9, 7, 11]  # batch 4: partial last minibatches of different sizes
    offsets = [0, 5, 14, 21, 32]
    data = FederatedDataModule.from_tensors(split, [torch.arange(a, b) for a, b in zip(offsets, offsets[1:])])
    assert [b - a for a, b in zip(offsets, offsets[1:])] == sizes
    torch.manual_seed(0)
    module = FederatedModule(LeNet5(num_classes=10, in_channels=3), algorithm=resolve("fedbcgd_plus", None)[0],
                             clients_per_round=4, batch_size=4, lr=0.05, client_momentum=0.5, client_runner=runner)
    module.prints_summary = False
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                         num_sanity_val_steps=0, default_root_dir=str(tmp_path / runner))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, data)
    return module.global_vector.clone(), [str(w.message) for w in caught]


def test_a_fit_on_augmented_images_equals_the_serial_runner_and_warns_nothing_of_the_lr_schedule(tmp_path):
    serial, _ = fit_on_augmented_images(tmp_path, "serial")
    batched, messages = fit_on_augmented_images(tmp_path, "batched")
    assert relative(batched, serial) <= TOLERANCE
    # the stacked SGD step replaces the local optimizer's step, which the lr schedule must not warn about
    assert not [m for m in messages if "lr_scheduler.step()" in m]
