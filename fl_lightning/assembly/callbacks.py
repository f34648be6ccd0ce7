"""The fit's FLCallbacks, in the order they run: the algorithm's hooks; with ``model.privacy`` client-level DP
after them and, with control variates, Δc's noise before them; the codec last, on what they upload."""
from __future__ import annotations

from fl_lightning.callbacks import CompressedUpload, ControlVariates
from fl_lightning.privacy import ClientDP
from fl_lightning.privacy.callback import check_before_fit as check_privacy
from fl_lightning.privacy.control import NoisedControlSum


def fit_callbacks(module) -> list:
    algorithm = module.algorithm.callbacks()
    privacy = first = []
    if module.privacy is not None:  # after the algorithm, before the codec; Δc's noise before the algorithm reads it
        dp = ClientDP(module.privacy, controls=any(isinstance(cb, ControlVariates) for cb in algorithm))
        privacy, first = [dp], ([NoisedControlSum(dp)] if dp.controls else [])
    robust = [module.robust] if getattr(module, "robust", None) is not None else []  # fl_lightning.aggregation
    return first + algorithm + privacy + ([CompressedUpload(module.codec)] if module.codec is not None else []) + robust


def check_before_fit(module, num_clients: int) -> None:
    """Refusals that need the data's client count, before any run file is written: client-level DP's δ, target ε
    and budget (fl_lightning.privacy)."""
    if module.privacy is not None:
        check_privacy(module.privacy, num_clients, module.hparams.clients_per_round, module.trainer.max_epochs)
