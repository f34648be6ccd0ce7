"""System heterogeneity: per-client compute, network and availability, a virtual clock,
and synchronous round policies. Off unless ``model.system`` is given (docs/systems.md, "Simulated time")."""
from fl_lightning.systems.clock import RoundSimulator, VirtualClock
from fl_lightning.systems.fedbuff import Asynchronous, FedBuff
from fl_lightning.systems.model import SystemModel, resolve_system
from fl_lightning.systems.policies import RoundPolicy, resolve_policy
from fl_lightning.systems.profiles import PROFILES, Population

__all__ = ["Asynchronous", "FedBuff", "PROFILES", "Population", "RoundPolicy", "RoundSimulator", "SystemModel", "VirtualClock",
           "resolve_policy", "resolve_system"]
