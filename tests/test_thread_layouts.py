"""At one thread per client, one process (``--threads 1``), K = 2 clients at a time
(``--threads 2``) and DDP over 2 ranks (``--threads 1`` each) give every logged value and the final
weights bit for bit: on the 784-input MLP (MNIST), the paper's LeNet-5 and a ResNet-18 basic block
(CIFAR-10 images). The ranks' uploads, losses and evaluation batches are combined in plan and batch
order (docs/scale_out.md, "Same numbers in every thread layout"). A resume in another thread layout
says in one line that it cannot be bit-identical."""
import csv
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fl_lightning.cli import main
from tests.conftest import SHARED_DATA, requires_shared_data

REPO = Path(__file__).resolve().parents[1]
MLP784 = ["fit", "--config", str(REPO / "configs" / "quickstart.yaml"), "--trainer.max_epochs", "2",
          "--trainer.enable_progress_bar", "false", "--data.dataset", "mnist", "--data.root", str(SHARED_DATA),
          "--data.num_clients", "20", "--data.samples_per_client", "60", "--model.clients_per_round", "4"]


@pytest.fixture(autouse=True)
def _thread_environment(monkeypatch):
    """--threads sets OMP_NUM_THREADS/MKL_NUM_THREADS in this process; they are restored afterwards."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(name, os.environ.get(name, "2"))


def logged(root: str) -> tuple[list[dict], torch.Tensor]:
    (path,) = glob.glob(os.path.join(root, "**", "metrics.csv"), recursive=True)
    rows = [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(open(path))]
    (ckpt,) = glob.glob(os.path.join(os.path.dirname(path), "checkpoints", "*.ckpt"))
    weights = torch.load(ckpt, weights_only=True, map_location="cpu")["state_dict"]
    return rows, torch.cat([v.flatten() for v in weights.values() if v.is_floating_point()])


@requires_shared_data
def test_one_thread_per_client_is_the_same_in_one_process_and_k2(tmp_path, capsys):
    assert main([*MLP784, "--threads", "1", "--trainer.logger.init_args.save_dir", "one"]) == 0
    assert main([*MLP784, "--threads", "2", "--model.parallel_clients", "2",
                 "--trainer.logger.init_args.save_dir", "k2"]) == 0
    out = capsys.readouterr().out
    assert "fl-lightning: threads: 1 intra-op" in out and "layout: 1 thread(s) per client, 2 client(s) at a time" in out
    (one_rows, one_w), (k2_rows, k2_w) = logged("one"), logged("k2")
    assert len(one_rows) == 2 and one_rows == k2_rows  # every logged value, as written
    assert torch.equal(one_w, k2_w)
    saved = open(glob.glob("one/**/config.yaml", recursive=True)[0]).read()
    assert "fl_lightning.federation.threads.Threads" in saved and "threads: 1" in saved
    # K = 2 resumes the one-process run silently (same threads per client); 2 threads per client says so
    assert main([*MLP784, "--threads", "2", "--model.parallel_clients", "2", "--trainer.max_epochs", "3",
                 "--trainer.logger.init_args.save_dir", "one", "--ckpt_path", "last"]) == 0
    assert "cannot be bit-identical" not in capsys.readouterr().out
    assert main([*MLP784, "--threads", "2", "--trainer.max_epochs", "4",
                 "--trainer.logger.init_args.save_dir", "one", "--ckpt_path", "last"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "cannot be bit-identical" in line]
    assert lines == ["fl-lightning: the checkpoint was written with 1 thread(s) per client, 2 client(s) at a time, "
                     "1 rank(s), this run has 2 thread(s) per client, 1 client(s) at a time, 1 rank(s): the resumed "
                     "run cannot be bit-identical to an uninterrupted one (docs/scale_out.md, \"Same numbers in every thread "
                     "layout\")"]


@requires_shared_data
def test_ddp_at_one_thread_per_rank_is_one_process_bit_for_bit_and_resumes_it(tmp_path):
    assert main([*MLP784, "--threads", "1", "--trainer.logger.init_args.save_dir", "one"]) == 0
    cli = Path(sys.executable).with_name("fl-lightning")
    one_rows, _ = logged("one")
    # a one-process checkpoint resumed on 2 ranks goes on as the uninterrupted run, silently (the ranks' uploads,
    # losses and evaluation batches are combined in plan / batch order; the whole-fit comparison is below)
    assert main([*MLP784, "--threads", "1", "--trainer.max_epochs", "1", "--trainer.logger.init_args.save_dir", "half"]) == 0
    done = subprocess.run([str(cli), *MLP784, "--threads", "1", "--trainer.devices", "2", "--trainer.accelerator", "cpu",
                           "--trainer.strategy", "ddp", "--trainer.logger.init_args.save_dir", "half", "--ckpt_path", "last"],
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "terminate called" not in done.stderr and "cannot be bit-identical" not in done.stdout
    resumed = sorted(glob.glob("half/**/metrics.csv", recursive=True))[-1]
    rows = [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(open(resumed))]
    assert len(rows) == len(one_rows) and rows[1:] == one_rows[1:]  # the resumed run goes on in its folder


def cifar_folder(root: Path, train_per_class: int = 12, test_per_class: int = 4) -> Path:
    """A small image folder of real CIFAR-10 images (the first few of each class)."""
    source = SHARED_DATA / "cifar10-jpeg"
    for split, count in (("train", train_per_class), ("test", test_per_class)):
        for label in sorted(os.listdir(source / split)):
            (root / split / label).mkdir(parents=True)
            for name in sorted(os.listdir(source / split / label))[:count]:
                shutil.copy(source / split / label / name, root / split / label / name)
    return root


def fit_in_three_layouts(args: list[str]) -> dict[str, tuple[list[dict], torch.Tensor]]:
    """One process at 1 thread, K = 2 at 2 threads (1 each) and 2 DDP ranks at 1 thread each, each a fresh
    ``fl-lightning fit`` process as a user starts it."""
    cli = Path(sys.executable).with_name("fl-lightning")
    layouts = {"one": ["--threads", "1"], "k2": ["--threads", "2", "--model.parallel_clients", "2"],
               "ddp": ["--threads", "1", "--trainer.devices", "2", "--trainer.accelerator", "cpu",
                       "--trainer.strategy", "ddp"]}
    for layout, options in layouts.items():
        done = subprocess.run([str(cli), *args, *options, "--trainer.logger.init_args.save_dir", layout],
                              env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr[-2000:]
    return {layout: logged(layout) for layout in layouts}


@requires_shared_data
@pytest.mark.parametrize("network", ["fl_lightning.models.LeNet5", "tests.layout_nets.ResidualBlockNet"])
def test_convolutional_networks_give_the_same_numbers_in_one_process_k2_and_ddp(tmp_path, network):
    args = ["fit", "--config", str(REPO / "configs" / "experiments" / "cifar10_lenet5.yaml"), "--trainer.max_epochs", "2",
            "--trainer.check_val_every_n_epoch", "1", "--trainer.enable_progress_bar", "false",
            "--model.network", network, "--model.algorithm", "fedavgm", "--model.clients_per_round", "4",
            "--model.batch_size", "10", "--data.root", str(cifar_folder(tmp_path / "cifar")), "--data.cache_dir", "null",
            "--data.num_clients", "4", "--data.samples_per_client", "30", "--data.eval_batch_size", "5",
            "--data.augment", "false"]
    runs = fit_in_three_layouts(args)
    (one_rows, one_w) = runs["one"]
    assert len(one_rows) == 2 and {"train/loss", "val/acc", "val/loss"} <= set(one_rows[0])
    for layout in ("k2", "ddp"):
        rows, weights = runs[layout]
        assert rows == one_rows, layout  # every logged value, as written
        assert torch.equal(weights, one_w), layout


def test_a_resume_on_other_cpu_kernels_says_it_cannot_be_bit_identical():
    """ATEN_CPU_CAPABILITY or another torch/MKL/oneDNN changes the last bits at the same thread count; where the
    count came from does not; a checkpoint from before kernels were recorded stays silent."""
    from fl_lightning.federation.threads import layout_change

    saved = {"threads_per_client": 1, "parallel_clients": 1, "world_size": 1, "threads_from": "OMP_NUM_THREADS=1",
             "kernels": "AVX2 kernels, torch 2.14.1, MKL 2024.2, oneDNN 3.12.0"}
    now = {**saved, "parallel_clients": 2, "world_size": 2, "threads_from": "--threads 2"}
    assert layout_change(saved, now) is None
    assert layout_change({k: v for k, v in saved.items() if k not in ("threads_from", "kernels")},
                         {**now, "kernels": "AVX512 kernels"}) is None
    assert layout_change(saved, {**now, "kernels": "AVX512 kernels, torch 2.14.1, MKL 2024.2, oneDNN 3.12.0"}) == (
        "fl-lightning: the checkpoint was written with 1 thread(s) per client, 1 client(s) at a time, 1 rank(s) on AVX2 "
        "kernels, torch 2.14.1, MKL 2024.2, oneDNN 3.12.0, this run has 1 thread(s) per client, 2 client(s) at a time, "
        "2 rank(s) on AVX512 kernels, torch 2.14.1, MKL 2024.2, oneDNN 3.12.0: the resumed run cannot be bit-identical to "
        "an uninterrupted one (docs/scale_out.md, \"Same numbers in every thread layout\")")
