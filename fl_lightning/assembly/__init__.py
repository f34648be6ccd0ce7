"""The fit's assembly: it chooses the round's parts (sampler, client runner, schedule: fl_lightning.federation.seams)
from the options and builds the loop, so it sits above every package whose parts it picks (systems, privacy,
personalization, algorithms) and below the module that calls it (docs/architecture.md)."""
from fl_lightning.assembly.connector import check_before_fit, fit_callbacks
from fl_lightning.assembly.session import start_rounds

__all__ = ["check_before_fit", "fit_callbacks", "start_rounds"]
