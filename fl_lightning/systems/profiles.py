"""Per-client system parameters: compute speed, uplink and downlink bandwidth,
latency and availability, for a whole population held as numpy arrays (one float64 array per
quantity, so 10,000 clients cost about 0.6 MB and no per-client Python objects).

Named profiles (``--model.system Mobile`` …, see ``SystemModel``) draw every client's values from the
distributions below, seeded by the run seed only (the population is the same in every round and
after a resume, without being saved). The numbers are OUR choice, shaped after what FedScale
(Lai et al., ICML 2022) reports for mobile devices — compute speeds and bandwidths spread over
one to two orders of magnitude (log-normal), clients online for a minority of the time — they are
not FedScale's data. Use a trace (``fl_lightning.systems.traces``) for measured values.

========== ======================== ============================ ============================ ============ =======================
profile    compute (samples/s)      uplink (Mbit/s)              downlink (Mbit/s)            latency (s)  availability
========== ======================== ============================ ============================ ============ =======================
uniform    100                      10                           10                           0            always
mobile     lognormal(med 50, σ 0.8) lognormal(med 2, σ 1.0)      lognormal(med 10, σ 1.0)     lognorm(0.1, 0.5)  on ~ Exp(600 s), off ~ Exp(1200 s)
slow_uplink lognormal(med 100, σ 0.5) lognormal(med 0.5, σ 1.0) lognormal(med 10, σ 0.5)     lognorm(0.05, 0.5) always
slow_compute lognormal(med 5, σ 0.8)  lognormal(med 20, σ 0.5)     lognormal(med 50, σ 0.5)     lognorm(0.05, 0.5) always
========== ======================== ============================ ============================ ============ =======================

(σ: of the natural log.) What the profiles imitate of FedScale's measurements: the spread of device
speeds and of bandwidths (log-normal, one to two orders of magnitude between the fastest and slowest
tenth) and, in ``mobile`` only, that a device is online a minority of the time (here 1/3 on average).
``slow_uplink`` makes the upload the bottleneck of a round (a LeNet-5 update takes seconds to upload,
its local epoch a fraction of that); ``slow_compute`` is its control, where local training is (a
500-sample epoch takes ~100 s on the median client, the same update ~0.1 s to upload), so a method
that sends fewer floats gains little time there. Compute is charged per sample processed
(``samples_processed``): a partial last batch costs its own samples, not a full batch. Availability is a per-client periodic on/off cycle: on for ``on_s``, off for
``off_s``, shifted by a phase drawn uniformly in the cycle; client i is available at simulated time
t iff ``(t + phase_i) mod (on_i + off_i) < on_i``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from fl_lightning.registry import Registry

MBIT = 1e6 / 8  # bytes per second in one Mbit/s

PROFILES = Registry("system profile")  # name → Profile; a new one: ``PROFILES.add(Profile("name", ...))`` in its file


@dataclass(frozen=True)
class Profile:
    """A named population: each quantity's (median, σ of its natural log) — σ 0: every client the median — and the
    exponential means of the on/off availability cycle (None: always on)."""

    name: str
    speed: tuple[float, float]  # samples per second of local training
    up_mbps: tuple[float, float]
    down_mbps: tuple[float, float]
    latency_s: tuple[float, float]
    on_s: Optional[float] = None
    off_s: Optional[float] = None


PROFILES.add(Profile("uniform", speed=(100.0, 0.0), up_mbps=(10.0, 0.0), down_mbps=(10.0, 0.0), latency_s=(0.0, 0.0)))
PROFILES.add(Profile("mobile", speed=(50.0, 0.8), up_mbps=(2.0, 1.0), down_mbps=(10.0, 1.0), latency_s=(0.1, 0.5),
                     on_s=600.0, off_s=1200.0))
PROFILES.add(Profile("slow_uplink", speed=(100.0, 0.5), up_mbps=(0.5, 1.0), down_mbps=(10.0, 0.5),
                     latency_s=(0.05, 0.5)))
PROFILES.add(Profile("slow_compute", speed=(5.0, 0.8), up_mbps=(20.0, 0.5), down_mbps=(50.0, 0.5),
                     latency_s=(0.05, 0.5)))

COLUMNS = ("speed", "up_Bps", "down_Bps", "latency_s", "on_s", "off_s", "phase_s")


@dataclass
class Population:
    """Every client's system parameters, one array each (index = client id). ``on_s`` inf: always available."""

    speed: np.ndarray  # samples per second of local training
    up_Bps: np.ndarray  # uplink, bytes per second
    down_Bps: np.ndarray  # downlink, bytes per second
    latency_s: np.ndarray  # per round trip, seconds
    on_s: np.ndarray
    off_s: np.ndarray
    phase_s: np.ndarray

    def __len__(self) -> int:
        return len(self.speed)

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, c).nbytes for c in COLUMNS)

    def available(self, t: float) -> np.ndarray:
        """Boolean mask: which clients are online at simulated time ``t``."""
        cycle = self.on_s + self.off_s
        with np.errstate(invalid="ignore"):
            into = np.mod(t + self.phase_s, cycle)
        return np.isinf(self.on_s) | (into < self.on_s)

    def next_online(self, t: float) -> float:
        """The earliest time ≥ t at which some client is online."""
        mask = self.available(t)
        if mask.any():
            return t
        cycle = self.on_s + self.off_s
        wait = cycle - np.mod(t + self.phase_s, cycle)  # offline clients: until their next "on" begins
        return float(t + wait.min())

    def client_segments(self, ids, download_bytes, upload_bytes, samples) -> np.ndarray:
        """Each client's (download, compute, upload, latency) seconds, one row per client: download bytes /
        downlink, samples / speed, upload bytes / uplink, latency (the bytes are the loop's exact counts)."""
        ids = np.asarray(ids, dtype=np.int64)
        return np.stack([np.asarray(download_bytes, dtype=np.float64) / self.down_Bps[ids],
                         np.asarray(samples, dtype=np.float64) / self.speed[ids],
                         np.asarray(upload_bytes, dtype=np.float64) / self.up_Bps[ids], self.latency_s[ids]], axis=1)

    def client_times(self, ids, download_bytes, upload_bytes, samples) -> np.ndarray:
        """Simulated seconds for each client of a round: the sum of its ``client_segments``, in their order."""
        return total_seconds(self.client_segments(ids, download_bytes, upload_bytes, samples))


def samples_processed(steps, num_samples, batch_size: int) -> np.ndarray:
    """The samples a client's ``steps`` local steps went through: epochs of ⌈n/B⌉ minibatches of its n
    samples, the last of each epoch holding the n − (⌈n/B⌉ − 1)·B left (7 samples at B = 64: one step,
    7 samples)."""
    steps, n = np.asarray(steps, dtype=np.int64), np.asarray(num_samples, dtype=np.int64)
    per_epoch = np.maximum(-(-n // batch_size), 1)
    return (steps // per_epoch) * n + (steps % per_epoch) * batch_size


def steps_within(samples, num_samples, batch_size: int) -> np.ndarray:
    """The most local steps whose ``samples_processed`` is at most ``samples`` (a float budget)."""
    budget, n = np.asarray(samples, dtype=np.float64), np.asarray(num_samples, dtype=np.int64)
    per_epoch = np.maximum(-(-n // batch_size), 1)
    epochs = np.floor(budget / np.maximum(n, 1))
    return (epochs * per_epoch + np.floor((budget - epochs * n) / batch_size)).astype(np.int64)


def total_seconds(segments: np.ndarray) -> np.ndarray:
    """Each row's download + compute + upload + latency, added in that order (one client's simulated time)."""
    return segments[:, 0] + segments[:, 1] + segments[:, 2] + segments[:, 3]


def draw_profile(name: str, num_clients: int, seed: int, compute_scale: float = 1.0,
                 always_available: bool = False) -> Population:
    """The population of a named profile, drawn from its distributions with ``seed``."""
    spec = PROFILES[name]
    rng = np.random.default_rng(seed)

    def lognormal(key: str) -> np.ndarray:
        median, sigma = getattr(spec, key)
        return median * np.exp(sigma * rng.standard_normal(num_clients))

    speed = lognormal("speed") * compute_scale
    up, down, latency = lognormal("up_mbps") * MBIT, lognormal("down_mbps") * MBIT, lognormal("latency_s")
    if spec.on_s is None or always_available:
        on, off, phase = np.full(num_clients, np.inf), np.zeros(num_clients), np.zeros(num_clients)
    else:
        on = rng.exponential(spec.on_s, num_clients)
        off = rng.exponential(spec.off_s, num_clients)
        phase = rng.random(num_clients) * (on + off)
    return Population(speed, up, down, latency, on, off, phase)


def population_from_rows(rows: dict[str, np.ndarray], num_clients: int, compute_scale: float = 1.0,
                         always_available: bool = False) -> Population:
    """A trace's columns (one value per trace row) → the population; client i takes row i mod R."""
    index = np.arange(num_clients) % len(rows["speed"])
    take = {key: np.asarray(values, dtype=np.float64)[index] for key, values in rows.items()}
    if always_available:
        take["on_s"], take["off_s"] = np.full(num_clients, np.inf), np.zeros(num_clients)
    return Population(take["speed"] * compute_scale, take["up_mbps"] * MBIT, take["down_mbps"] * MBIT,
                      take["latency_s"], take["on_s"], take["off_s"], take["phase_s"])


def profile_names() -> str:
    return ", ".join(PROFILES)


def check_profile(name: Optional[str]) -> None:
    from fl_lightning.errors import ConfigError
    if name not in PROFILES:
        raise ConfigError("model.system.profile", f"unknown profile {name!r}; choose one of {profile_names()}, "
                          "or give model.system.trace a CSV file")
