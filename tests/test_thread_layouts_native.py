"""The thread-layout identity (docs/scale_out.md, "Same numbers in every thread layout") on this machine's
own CPU kernels and on a size where the matrix products are real: the quickstart's 784-input MLP on a full-size
28×28 grey data set, 1,000 samples per client. The data set (seeded, written as ``torchvision.datasets.FashionMNIST``
files and read through ``--data.dataset`` by class path, so it is normalised by its own statistics) is one whose
float32 pixel mean differs at 1 and 2 threads (on MNIST the two agree): a layout that computed its
normalisation at its own thread count would differ from the others in every pixel. Every layout is a fresh ``fl-lightning fit`` process started as a user
starts it — without the suite's ``ATEN_CPU_CAPABILITY`` pinning (tests/conftest.py) — with the count from
``OMP_NUM_THREADS`` as well as from ``--threads``: one process, K = 2 clients at a time and 2 DDP ranks, all
at one thread per client, give every logged value and the final weights bit for bit (before the statistics were
taken at one thread, K = 2 differed here from its first logged value on)."""
import glob
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from fl_lightning.data.images import intra_op_threads
from fl_lightning.federation.threads import KERNELS_LINE
from tests.layout_data import images_where_thread_count_changes_the_float32_mean, write_fashion_mnist
from tests.test_thread_layouts import logged

REPO = Path(__file__).resolve().parents[1]
ARGS = ["fit", "--config", str(REPO / "configs" / "quickstart.yaml"), "--trainer.max_epochs", "1",
        "--trainer.enable_progress_bar", "false", "--model.algorithm", "fedavg", "--model.local_epochs", "1",
        "--model.clients_per_round", "2", "--data.dataset", "torchvision.datasets.FashionMNIST", "--data.root", "data",
        "--data.num_clients", "4", "--data.samples_per_client", "1000"]
DDP = ["--trainer.devices", "2", "--trainer.accelerator", "cpu", "--trainer.strategy", "ddp"]
LAYOUTS = {  # name: (OMP_NUM_THREADS or None, options)
    "omp1": ("1", []),
    "threads1": (None, ["--threads", "1"]),
    "k2": (None, ["--threads", "2", "--model.parallel_clients", "2"]),
    "omp2_k2": ("2", ["--model.parallel_clients", "2"]),
    "ddp": (None, ["--threads", "1", *DDP]),
}


def user_environment(omp: str | None) -> dict:
    """This process's environment as a user's shell has it: no kernel pinning, no thread count but ``omp``."""
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    return {**env, "PYTHONPATH": str(REPO), **({"OMP_NUM_THREADS": omp} if omp else {})}


def start(name: str) -> subprocess.CompletedProcess:
    cli = Path(sys.executable).with_name("fl-lightning")
    omp, options = LAYOUTS[name]
    return subprocess.run([str(cli), *ARGS, *options, "--trainer.logger.init_args.save_dir", name],
                          env=user_environment(omp), capture_output=True, text=True, timeout=300)


def test_one_thread_per_client_gives_the_same_numbers_in_every_layout_on_native_kernels(tmp_path):
    images = images_where_thread_count_changes_the_float32_mean((60_000, 1, 28, 28))
    write_fashion_mnist("data", images, images[:10_000])
    with ThreadPoolExecutor(2) as pool:  # two runs at a time on two cores: their numbers do not depend on load
        done = dict(zip(LAYOUTS, pool.map(start, LAYOUTS)))
    for name, run in done.items():
        assert run.returncode == 0, (name, run.stderr[-2000:])
        assert "terminate called" not in run.stderr and "cannot give one process's numbers" not in run.stdout, name
    runs = {name: logged(name) for name in LAYOUTS}
    one_rows, one_weights = runs["omp1"]
    assert len(one_rows) == 1 and {"train/loss", "val/loss", "test/acc"} <= set(one_rows[0])
    for name in ("threads1", "k2", "omp2_k2", "ddp"):
        rows, weights = runs[name]
        assert rows == one_rows, name  # every logged value, as written
        assert torch.equal(weights, one_weights), name
    # the test can fail: on these images the float32 mean that normalised them differs at 1 and 2 threads
    pixels = images.float().div_(255.0)
    with intra_op_threads(2):
        at_two = pixels.mean().item()
    with intra_op_threads(1):
        assert pixels.mean().item() != at_two
    # config.yaml records the kernels each run had (the same in every layout) and where its count came from
    records = {name: open(glob.glob(f"{name}/**/config.yaml", recursive=True)[0]).read().splitlines()[1]
               for name in LAYOUTS}
    kernels = {record.split(";")[0] for record in records.values()}
    assert len(kernels) == 1 and kernels.pop().startswith(KERNELS_LINE) and f"torch {torch.__version__}" in records["ddp"]
    assert records["omp1"].endswith("; 1 intra-op thread(s) from OMP_NUM_THREADS=1")
    assert records["threads1"].endswith("; 1 intra-op thread(s) from --threads 1")
    assert records["omp2_k2"].endswith("; 2 intra-op thread(s) from OMP_NUM_THREADS=2")
