"""``--model.system``: the option that turns the system simulation on. Unset (the default),
nothing of it runs and every number is what it was without it.

    --model.system mobile                       a named profile (fl_lightning.systems.profiles)
    --model.system SystemModel --model.system.trace clients.csv    a trace file (fl_lightning.systems.traces)
    --model.system SystemModel --model.system.profile slow_uplink --model.system.compute_scale 2
"""
from __future__ import annotations

from typing import Optional

from fl_lightning.errors import ConfigError
from fl_lightning.resolve import resolve_part
from fl_lightning.federation.seeding import derive_seed
from fl_lightning.systems.profiles import Population, check_profile, draw_profile, population_from_rows
from fl_lightning.systems.traces import read_trace

SYSTEM_STREAM = 0x5157E4  # derive_seed(SYSTEM_STREAM): the population's draws (no round: one population per run)


class SystemModel:
    """Every client's compute speed, bandwidths, latency and availability.

    Args:
        profile: a named profile: uniform, mobile, slow_uplink, slow_compute (fl_lightning.systems.profiles).
        trace: a CSV file with one row per device (fl_lightning.systems.traces); replaces the profile.
        compute_scale: multiplies every client's compute speed (e.g. a model 4× as costly: 0.25).
        always_available: ignore the availability cycles (every client always online).
    """

    def __init__(self, profile: str = "mobile", trace: Optional[str] = None, compute_scale: float = 1.0,
                 always_available: bool = False):
        if trace is None:
            check_profile(profile)
        if not compute_scale > 0:
            raise ConfigError("model.system.compute_scale", f"must be > 0, got {compute_scale}")
        self.profile, self.trace = profile, trace
        self.compute_scale, self.always_available = float(compute_scale), bool(always_available)
        self._rows = read_trace(trace) if trace is not None else None  # read now: a bad file fails at startup

    def population(self, num_clients: int) -> Population:
        """The run's population, the same for a seed whenever it is drawn (resume included)."""
        if self._rows is not None:
            return population_from_rows(self._rows, num_clients, self.compute_scale, self.always_available)
        return draw_profile(self.profile, num_clients, derive_seed(SYSTEM_STREAM), self.compute_scale,
                            self.always_available)

    def spec(self) -> dict:
        return {"class_path": f"{__name__}.SystemModel",
                "init_args": {"profile": self.profile, "trace": self.trace, "compute_scale": self.compute_scale,
                              "always_available": self.always_available}}


def resolve_system(value) -> Optional[SystemModel]:
    """None, a profile name, a path ending in .csv, a ``{class_path, init_args}`` dict or a SystemModel."""
    if isinstance(value, str) and ("\n" in value or "," in value):  # the CLI read a file given as the value
        raise ConfigError("model.system", "got a file's contents; give a trace as --model.system SystemModel "
                          "--model.system.trace PATH")
    by_name = lambda name: SystemModel(trace=name) if name.lower().endswith(".csv") else SystemModel(profile=name)
    return resolve_part(value, SystemModel, "model.system", "a profile name, a .csv trace or a SystemModel",
                        by_name, off=())