"""Synchronous round policies: which of a round's clients the server aggregates,
given each one's simulated finishing time, and when the round ends.

``--model.round_policy NAME --model.round_policy.OPTION V`` (or a ``RoundPolicy`` from Python):

* ``wait_for_all`` (default): every client that reports is aggregated; the round lasts until the
  slowest has.
* ``deadline`` (``deadline_s``): clients not done by ``deadline_s`` after the round's start are
  stragglers: their work is dropped (their upload counts as never arrived). The round ends at the
  deadline if anyone missed it, else when the last client reported.
* ``over_selection`` (``beta``, optional ``deadline_s``): sample ⌈(1+β)·S⌉ available clients, aggregate
  the first S to finish (ties: plan order); the rest are stragglers. The round ends when the S-th
  finished (or at the deadline, if fewer than S made it).
* ``partial_work`` (with a deadline): a client does the local steps that fit before the deadline instead
  of all of them — the most steps k_i whose samples fit in (deadline − its transfer and latency time) · speed
  (fl_lightning.systems.profiles.steps_within; a partial last batch counts its own samples), with the transfer of a
  whole-model download and an uncompressed model-update upload (a client's estimate before it trains) —
  and its partial update is aggregated; one that cannot fit a single step is a straggler. FedNova's τ_i
  then really differ.

Only clients available at the round's start are sampled (fl_lightning.systems.clock.AvailableSampler).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from fl_lightning.errors import ConfigError
from fl_lightning.resolve import resolve_part

KINDS = ("wait_for_all", "deadline", "over_selection")


class RoundPolicy:
    """Args:
        kind: wait_for_all, deadline or over_selection.
        deadline_s: the round's deadline in simulated seconds (deadline: required; over_selection: optional).
        beta: over_selection's extra fraction β ≥ 0: ⌈(1+β)·S⌉ clients sampled.
        partial_work: stragglers send the steps they finished by the deadline instead of being dropped.
    """

    def __init__(self, kind: str = "wait_for_all", deadline_s: Optional[float] = None, beta: float = 0.3,
                 partial_work: bool = False):
        if kind not in KINDS:
            raise ConfigError("model.round_policy", f"unknown policy {kind!r}; choose one of {', '.join(KINDS)}")
        if kind == "deadline" and deadline_s is None:
            raise ConfigError("model.round_policy.deadline_s", "the deadline policy needs one: give it in simulated "
                              "seconds, e.g. --model.round_policy.deadline_s 30")
        if deadline_s is not None and not deadline_s > 0:
            raise ConfigError("model.round_policy.deadline_s", f"must be > 0, got {deadline_s}")
        if not beta >= 0:
            raise ConfigError("model.round_policy.beta", f"must be ≥ 0, got {beta}")
        if partial_work and deadline_s is None:
            raise ConfigError("model.round_policy.partial_work", "uses the work done by the deadline: give "
                              "model.round_policy.deadline_s")
        self.kind, self.deadline_s, self.beta, self.partial_work = kind, deadline_s, float(beta), bool(partial_work)

    def spec(self) -> dict:
        return {"class_path": f"{__name__}.RoundPolicy",
                "init_args": {"kind": self.kind, "deadline_s": self.deadline_s, "beta": self.beta,
                              **({"partial_work": True} if self.partial_work else {})}}

    def num_sampled(self, per_round: int) -> int:
        """How many clients to sample for ``per_round`` aggregated ones."""
        return math.ceil((1 + self.beta) * per_round - 1e-9) if self.kind == "over_selection" else per_round

    def select(self, times: np.ndarray, arrived: np.ndarray, per_round: int) -> tuple[np.ndarray, float]:
        """(accepted mask, round duration) for clients finishing at ``times`` (seconds after the round's
        start); ``arrived``: False for a client whose upload never arrives anyway (client_dropout)."""
        times = np.asarray(times, dtype=np.float64)
        ok = np.asarray(arrived, dtype=bool).copy()
        deadline = self.deadline_s if self.deadline_s is not None else math.inf
        if self.kind != "wait_for_all":
            ok &= times <= deadline
        if self.kind == "over_selection":
            order = np.argsort(np.where(ok, times, math.inf), kind="stable")
            first = order[:min(per_round, int(ok.sum()))]
            ok = np.zeros_like(ok)
            ok[first] = True
            if len(first) == per_round:
                return ok, float(times[first].max())
        if self.kind == "wait_for_all" or not (np.asarray(arrived, dtype=bool) & ~ok).any():
            done = times[ok] if ok.any() else times
            duration = float(done.max()) if len(done) else 0.0
            return ok, min(duration, deadline)
        return ok, float(deadline)


def resolve_policy(value) -> Optional[RoundPolicy]:
    """None, a kind name, a ``{class_path, init_args}`` dict (a checkpoint's hparams) or a RoundPolicy."""
    return resolve_part(value, RoundPolicy, "model.round_policy",
                        f"a policy name ({', '.join(KINDS)}) or a RoundPolicy", RoundPolicy, off=())