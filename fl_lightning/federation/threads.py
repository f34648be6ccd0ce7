"""The run's thread layout: ``fl-lightning fit --threads N`` and what a checkpoint records of it.

``--threads N`` is a trainer callback (``Threads``, so config.yaml records it and a saved config
replays it) that, when built, which is before Lightning launches any DDP rank, sets every pool the
arithmetic uses: ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` (inherited by the ranks Lightning starts,
whose own ``torch.set_num_threads`` then keeps N), torch's intra-op threads (``torch.set_num_threads``:
OpenMP and MKL, which oneDNN follows) and, while no inter-op work has started, its inter-op threads.
With ``model.parallel_clients K`` each client gets N // K of them. The thread count is "how fast",
not "what": it stays out of the run's identity (fl_lightning.runs.identity).

``fl-lightning fit --threads N`` also sets ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` before torch is imported
(fl_lightning.cli), so the count comes into being exactly as ``OMP_NUM_THREADS=N`` would make it.

Without ``--threads`` the same callback is still added (``layout_callback``): it records the layout a
checkpoint was written with — intra-op threads per client, K, world size, where the count came from and
the CPU kernels (``kernels``: ATen's CPU capability, torch/MKL/oneDNN versions) — and a resumed run with
other threads per client or other kernels (the parts that change the arithmetic) says so in one line
(docs/scale_out.md, "Same numbers in every thread layout"). Under DDP a rank whose kernels are not rank
0's says so in one line too.
"""
from __future__ import annotations

import os
import re
from typing import Optional

import torch
from pytorch_lightning.callbacks import Callback

from fl_lightning.errors import ConfigError


def set_threads(threads: int) -> None:
    """Every pool the arithmetic uses, for this process and the ones it starts."""
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:  # inter-op work already started (e.g. a second fit in one process): it stays
        pass


KERNELS_LINE = "# fl-lightning kernels: "  # config.yaml's second line (fl_lightning.cli.lightning_cli.SaveRunConfig)


def kernels() -> str:
    """What picks this process's CPU kernels, and so the last bits of every sum: ATen's CPU capability
    (``ATEN_CPU_CAPABILITY`` may lower it) and the torch, MKL and oneDNN versions."""
    shown = torch.__config__.show()
    mkl, onednn = re.search(r"Math Kernel Library Version ([\d.]+)", shown), re.search(r"MKL-DNN v([\d.]+)", shown)
    return ", ".join([f"{torch.backends.cpu.get_cpu_capability()} kernels", f"torch {torch.__version__}",
                      *([f"MKL {mkl.group(1)}"] if mkl else []), *([f"oneDNN {onednn.group(1)}"] if onednn else [])])


def thread_source(threads: Optional[int]) -> str:
    """Where this process's intra-op thread count came from."""
    if threads is not None:
        return f"--threads {threads}"
    given = [f"{name}={os.environ[name]}" for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if name in os.environ]
    return " ".join(given) or "torch's default or torch.set_num_threads"


def layout(trainer, parallel_clients: int, threads_option: Optional[int] = None) -> dict:
    """Intra-op threads per client, clients at a time in each process, processes (ranks), where the
    count came from and the CPU kernels."""
    threads = torch.get_num_threads()
    per_client = max(1, threads // parallel_clients) if parallel_clients > 1 else threads
    return {"threads_per_client": per_client, "parallel_clients": parallel_clients,
            "world_size": int(getattr(trainer, "world_size", 1) or 1), "threads_from": thread_source(threads_option),
            "kernels": kernels()}


def record_line(threads_option: Optional[int]) -> str:
    """config.yaml's record of the kernels and the thread count (a YAML comment: not a setting)."""
    return f"{KERNELS_LINE}{kernels()}; {torch.get_num_threads()} intra-op thread(s) from {thread_source(threads_option)}"


def describe(saved: dict) -> str:
    return (f"{saved['threads_per_client']} thread(s) per client, {saved['parallel_clients']} client(s) at a time, "
            f"{saved['world_size']} rank(s)")


def layout_change(saved: Optional[dict], now: dict) -> Optional[str]:
    """The one line for a resume whose layout changes the arithmetic (threads per client or the CPU
    kernels), or None. K, the number of ranks and where the count came from do not: results are combined
    in plan order (fl_lightning.federation.distributed)."""
    if not saved:
        return None  # a checkpoint from before the layout was recorded
    other_kernels = "kernels" in saved and saved["kernels"] != now["kernels"]  # older checkpoints lack them
    if saved.get("threads_per_client") == now["threads_per_client"] and not other_kernels:
        return None
    before, after = describe(saved), describe(now)
    if other_kernels:
        before, after = f"{before} on {saved['kernels']}", f"{after} on {now['kernels']}"
    return (f"fl-lightning: the checkpoint was written with {before}, this run has {after}: "
            "the resumed run cannot be bit-identical to an uninterrupted one (docs/scale_out.md, \"Same numbers in every "
            "thread layout\")")


class Threads(Callback):
    """``fit --threads N``: sets every thread pool to N when built (None: leaves them), records the thread
    layout in checkpoints and compares it at resume.

    Args:
        threads: intra-op threads of this process (each rank under DDP); K clients at a time get N // K each.
    """

    def __init__(self, threads: Optional[int] = None):
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ConfigError("--threads", f"must be an integer ≥ 1, got {threads!r}")
        self.threads, self._saved, self._now = threads, None, None
        if threads is not None:
            set_threads(threads)

    @property
    def state_key(self) -> str:
        return "ThreadLayout"

    def setup(self, trainer, pl_module, stage):
        if self.threads is not None:
            torch.set_num_threads(self.threads)  # a rank that Lightning started re-sets its own count
        parallel = int(getattr(getattr(pl_module, "hparams", {}), "get", lambda *_: 1)("parallel_clients", 1) or 1)
        self._now = layout(trainer, parallel, self.threads)
        if self._now["world_size"] > 1:
            first = trainer.strategy.broadcast(self._now["kernels"])
            if first != self._now["kernels"]:
                print(f"fl-lightning: rank {trainer.global_rank} runs {self._now['kernels']}, rank 0 {first}: the ranks "
                      "cannot give one process's numbers bit for bit (docs/scale_out.md, \"Same numbers in every thread "
                      "layout\")")
        if stage == "fit" and trainer.is_global_zero:
            given = f"--threads {self.threads}" if self.threads is not None else "no --threads"
            print(f"fl-lightning: threads: {torch.get_num_threads()} intra-op, {torch.get_num_interop_threads()} "
                  f"inter-op, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
                  f"MKL_NUM_THREADS={os.environ.get('MKL_NUM_THREADS', 'unset')} ({given}); "
                  f"layout: {describe(self._now)}; {self._now['kernels']}")

    def state_dict(self) -> dict:
        return dict(self._now or {})

    def load_state_dict(self, state_dict: dict) -> None:
        self._saved = dict(state_dict)

    def on_fit_start(self, trainer, pl_module):
        line = layout_change(self._saved, self._now or layout(trainer, 1, self.threads))
        if line and trainer.is_global_zero:
            print(line)
