"""Random streams derived from (run seed, round, client, purpose), so that any round replays alone.

Every random draw of a round has its own stream: nothing depends on RNG state left over
from earlier rounds or from another purpose, which is what makes a resumed run
bit-identical to an uninterrupted one without saving RNG state. The run seed is the one
``seed_everything`` set (``--seed_everything``).

Server streams are ``derive_seed(round, purpose)``; a client's are derived from its task
seed ``derive_seed(round, client)`` (which itself orders its minibatches) and a ``Stream``.
Dropout has no generator argument in PyTorch, so the loop runs each client inside
``isolated_rng``: the global generators are saved, seeded from the client's DROPOUT (or
FULL_GRADIENT_DROPOUT) stream, and restored afterwards — the rest of the process never sees them.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from enum import IntEnum

import numpy as np
import torch


class Purpose(IntEnum):
    """Server-side streams, one per round."""

    SAMPLING = 0x5A3  # which S of the M clients
    BLOCK_ORDER = 0xB10C  # FedBCGD: which sampled client owns which block
    POOLED = 0xCE47  # centralised SGD: the pooled pass's batch order
    FAILURE = 0xFA11  # dropout: which sampled clients fail to report


class Stream(IntEnum):
    """A client's streams in one round (its batch order uses the task seed itself)."""

    AUGMENTATION = 1  # crops and flips of its training minibatches
    DROPOUT = 2  # dropout (and any other global-RNG draw) in its local steps
    FULL_GRADIENT_AUGMENTATION = 3  # the same two for its ∇f_i(x^r) pass (SVRG, option I)
    FULL_GRADIENT_DROPOUT = 4
    COMPRESSION = 5  # random sparsification / stochastic rounding of its upload


def run_seed() -> int:
    return int(os.environ.get("PL_GLOBAL_SEED", 0))


@contextmanager
def run_seed_set(seed: int):
    """The run seed as fit sets it (PL_GLOBAL_SEED) for the block: a server outside fit drawing the loop's server
    streams (sampling, block order), a node replaying its round, a seeded partition re-made."""
    old = os.environ.get("PL_GLOBAL_SEED")
    os.environ["PL_GLOBAL_SEED"] = str(seed)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PL_GLOBAL_SEED", None)
        else:
            os.environ["PL_GLOBAL_SEED"] = old


def derive_seed(*keys: int) -> int:
    """A 63-bit seed from the run seed and ``keys`` (e.g. round, client)."""
    return _seed_from([run_seed() & 0xFFFFFFFF, *keys])


def stream_seed(task_seed: int, stream: Stream) -> int:
    """The seed of one client's ``stream`` in one round, from its task seed."""
    return _seed_from([task_seed & 0xFFFFFFFF, task_seed >> 32, int(stream)])


def _seed_from(entropy: list[int]) -> int:
    state = np.random.SeedSequence(entropy).generate_state(2, dtype=np.uint32)
    return int(state[0]) << 31 | int(state[1]) >> 1


def generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


@contextmanager
def isolated_rng(device: torch.device):
    """Inside: the global CPU generator (and ``device``'s, if CUDA) are the caller's to seed;
    outside, they are exactly as before."""
    devices = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        yield


def seed_global_rng(seed: int, device: torch.device) -> None:
    """Seeds the generators ``isolated_rng`` saved: CPU, and ``device`` if CUDA."""
    torch.random.default_generator.manual_seed(seed)
    if device.type == "cuda":
        with torch.cuda.device(device):
            torch.cuda.manual_seed(seed)


def global_rng_state(device: torch.device):
    """The state that the next dropout mask on ``device`` will be drawn from."""
    return torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()


def set_global_rng_state(state, device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.set_rng_state(state)
