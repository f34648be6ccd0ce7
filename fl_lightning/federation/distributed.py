"""One round's clients over several processes (docs/scale_out.md, "Several processes"; Lightning's DDP strategy).

Every rank derives the same round plan from the seed, trains its share of the sampled clients
(``share``: the longest local jobs first, each to the least loaded rank), and the round's upload
clients' contributions (uploads, losses, logged values, evaluation batches' sums) are exchanged through
torch.distributed (``concat``) and every rank adds them up in the order one process would: the plan's
order for clients, the batches' order for evaluation. Every rank then holds the sums of one process
bit for bit and applies the same server update (docs/scale_out.md, "Same numbers in every thread layout").
"""
from __future__ import annotations

import re
import signal
from typing import Sequence

import torch

from fl_lightning.errors import FLUserError


class CollectiveError(FLUserError):
    """A collective failed: another rank died, or it timed out. The command exits at once after its
    line (``exit_now``): Lightning's launcher kills the main process once a rank it started has died."""

    exit_now = True


class Collective:
    """This process's place among the run's ranks; a single process is rank 0 of 1 and reduces nothing.

    Args:
        strategy: the Trainer's strategy (anything with ``global_rank``, ``world_size`` and
            ``reduce(tensor, reduce_op="sum")``), or None for one process.
    """

    def __init__(self, strategy=None):
        self.strategy = strategy
        self.rank = strategy.global_rank if strategy is not None else 0
        self.world_size = strategy.world_size if strategy is not None else 1
        self.device = strategy.root_device if strategy is not None else torch.device("cpu")

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """All-reduces ``tensor`` in place (sum over ranks)."""
        if self.world_size == 1:
            return tensor
        try:
            return self.strategy.reduce(tensor, reduce_op="sum")
        except RuntimeError as err:  # gloo/NCCL: a peer closed its connection, or the collective timed out
            raise self._failure(err) from None

    def concat(self, rows: torch.Tensor) -> torch.Tensor:
        """Every rank's ``rows`` (a [k, ...] tensor, k may differ by rank) one after another in rank order,
        on every rank; the values are moved, never added, so they arrive bit for bit."""
        if self.world_size == 1:
            return rows
        counts = torch.zeros(self.world_size, dtype=torch.float64, device=self.device)
        counts[self.rank] = len(rows)
        counts = [int(c) for c in self.sum_(counts).tolist()]
        padded = torch.zeros((max(counts), *rows.shape[1:]), dtype=rows.dtype, device=self.device)
        padded[:len(rows)] = rows
        gathered = [torch.empty_like(padded) for _ in range(self.world_size)]
        try:
            torch.distributed.all_gather(gathered, padded)
        except RuntimeError as err:
            raise self._failure(err) from None
        return torch.cat([part[:count] for part, count in zip(gathered, counts)]).to(rows.device)

    def gather_objects(self, obj) -> list:
        """Every rank's ``obj`` (picklable), in rank order."""
        if self.world_size == 1:
            return [obj]
        gathered = [None] * self.world_size
        try:
            torch.distributed.all_gather_object(gathered, obj)
        except RuntimeError as err:
            raise self._failure(err) from None
        return gathered

    def union(self, names: list[str]) -> list[str]:
        """The sorted union of every rank's ``names`` (e.g. the metric names a network logged)."""
        return sorted(set().union(*self.gather_objects(sorted(names))))

    def _failure(self, err: RuntimeError) -> CollectiveError:
        """The one-line error; first, the ranks this process launched (Lightning's launcher on rank 0)
        are killed: one that hangs would otherwise outlive the run."""
        launcher = getattr(self.strategy, "launcher", None)
        if launcher is not None:
            launcher.kill(signal.SIGKILL)
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        first_line = re.sub(r"^\[[^\]]*\.(cc|cpp):\d+\] ", "", first_line)  # gloo's source location
        return CollectiveError(f"rank {self.rank}: a collective with the other {self.world_size - 1} rank(s) failed "
                               f"— one of them died or timed out ({first_line[:200]}); see its log")

    def share(self, work: Sequence[float]) -> list[int]:
        """The positions of the jobs (e.g. a round's clients, by local steps) this rank runs: longest
        first, each to the least loaded rank (ties: the lower rank), the same on every rank."""
        if self.world_size == 1:
            return list(range(len(work)))
        load = [0.0] * self.world_size
        mine = []
        for position in sorted(range(len(work)), key=lambda p: (-work[p], p)):
            rank = min(range(self.world_size), key=lambda r: (load[r], r))
            load[rank] += work[position]
            if rank == self.rank:
                mine.append(position)
        return sorted(mine)



def shutdown(strategy) -> None:
    """Ends a finished run's process group cleanly, on every rank: a barrier (no rank tears down the
    store or its gloo pairs while another still uses them), then ``destroy_process_group`` (its
    background threads joined now, not by static destructors at exit, where one still joinable
    aborted the process: ``terminate called without an active exception``, exit 134), then rank 0
    waits for the ranks Lightning's launcher started (at most 60 s)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    try:
        dist.barrier()
    except RuntimeError as err:  # a peer is gone: the run failed after all
        raise Collective(strategy)._failure(err) from None
    dist.destroy_process_group()
    for proc in getattr(getattr(strategy, "launcher", None), "procs", None) or []:
        try:
            proc.wait(timeout=60)
        except Exception:  # noqa: BLE001 - a child that hangs is killed, as on failure
            proc.kill()
