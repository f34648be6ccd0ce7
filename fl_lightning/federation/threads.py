"""The run's thread layout: ``fl-lightning fit --threads N`` and what a checkpoint records of it.

``--threads N`` is a trainer callback (``Threads``, so config.yaml records it and a saved config
replays it) that, when built, which is before Lightning launches any DDP rank, sets every pool the
arithmetic uses: ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` (inherited by the ranks Lightning starts,
whose own ``torch.set_num_threads`` then keeps N), torch's intra-op threads (``torch.set_num_threads``:
OpenMP and MKL, which oneDNN follows) and, while no inter-op work has started, its inter-op threads.
With ``model.parallel_clients K`` each client gets N // K of them. The thread count is "how fast",
not "what": it stays out of the run's identity (fl_lightning.runs.identity).

Without ``--threads`` the same callback is still added (``layout_callback``): it records the layout a
checkpoint was written with — intra-op threads per client, K, world size — and a resumed run with other
threads per client (the one part that changes the arithmetic) says so in one line (docs/scale_out.md, "Same numbers in every
thread layout").
"""
from __future__ import annotations

import os
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


def layout(trainer, parallel_clients: int) -> dict[str, int]:
    """Intra-op threads per client, clients at a time in each process, processes (ranks)."""
    threads = torch.get_num_threads()
    per_client = max(1, threads // parallel_clients) if parallel_clients > 1 else threads
    return {"threads_per_client": per_client, "parallel_clients": parallel_clients,
            "world_size": int(getattr(trainer, "world_size", 1) or 1)}


def describe(saved: dict) -> str:
    return (f"{saved['threads_per_client']} thread(s) per client, {saved['parallel_clients']} client(s) at a time, "
            f"{saved['world_size']} rank(s)")


def layout_change(saved: Optional[dict], now: dict) -> Optional[str]:
    """The one line for a resume whose layout changes the arithmetic (threads per client), or None.
    K and the number of ranks do not: results are combined in plan order (fl_lightning.federation.distributed)."""
    if not saved:
        return None  # a checkpoint from before the layout was recorded
    if saved.get("threads_per_client") == now["threads_per_client"]:
        return None
    return (f"fl-lightning: the checkpoint was written with {describe(saved)}, this run has {describe(now)}: "
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
        self._now = layout(trainer, parallel)
        if stage == "fit" and trainer.is_global_zero:
            given = f"--threads {self.threads}" if self.threads is not None else "not set (--threads N sets it)"
            print(f"fl-lightning: threads: {torch.get_num_threads()} intra-op, {torch.get_num_interop_threads()} "
                  f"inter-op, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
                  f"MKL_NUM_THREADS={os.environ.get('MKL_NUM_THREADS', 'unset')} ({given}); "
                  f"layout: {describe(self._now)}")

    def state_dict(self) -> dict:
        return dict(self._now or {})

    def load_state_dict(self, state_dict: dict) -> None:
        self._saved = dict(state_dict)

    def on_fit_start(self, trainer, pl_module):
        line = layout_change(self._saved, self._now or layout(trainer, 1))
        if line and trainer.is_global_zero:
            print(line)
