"""The round's logger row, and what the run keeps of it: the curve of the metric the run targets
(val/acc by default) against floats uploaded for the run's PNG and the upload at which val/acc first reached the target.

Lightning writes epoch-end logs after the epoch's checkpoint; a process killed between the two
would resume after a round whose row never reached the logger. So the module writes each row
to the loggers itself, once, before any checkpoint of its round, and the checkpoint holds the
curve and target including that round."""
from __future__ import annotations

from typing import Optional

import torch


class RoundLog:
    """Args:
        target_accuracy: val/acc at which ``comm/upload_d_at_target`` is logged once (None: never).
        target_metric, target_mode, target: any logged metric instead, reaching ``target`` from above
            (``min``) or below (``max``, the default)."""

    def __init__(self, target_accuracy: Optional[float], target_metric: Optional[str] = None,
                 target_mode: Optional[str] = None, target: Optional[float] = None):
        self.target_accuracy = target_accuracy if target is None else target
        self.metric, self.mode = target_metric or "val/acc", target_mode or "max"
        self.curve: dict[str, list[tuple[float, float]]] = {"val": [], "test": []}  # (comm/upload_d, value)
        # the curve's metric: the target's, else val/acc, else (a network's own validation_step) the first it logs
        self.plotted = self.metric
        self.upload_d_at_target: Optional[float] = None
        self.row: Optional[dict] = None  # the current round's row, once written

    def start_round(self) -> None:
        self.row = None

    def reached(self, row: dict) -> bool:
        value = row.get(self.metric)
        if value is None:
            return False
        return value <= self.target_accuracy if self.mode == "min" else value >= self.target_accuracy

    def write(self, row: dict, upload_d: float, epoch: int, loggers, evaluated: bool = False) -> dict:
        """Adds the target crossing to ``row``, extends the curve, and writes the row to every
        logger now, with the columns and step Lightning's epoch-end logging gives (``epoch``, step =
        epoch: one training batch per round)."""
        if evaluated and self.plotted not in row:  # a network's own validation_step: the metric it logs
            self.plotted = next((k for k in sorted(row) if "val" in k and not k.startswith("pval")), self.plotted)
        if self.plotted in row:
            self.curve["val"].append((upload_d, row[self.plotted]))
        if "test/acc" in row:
            self.curve["test"].append((upload_d, row["test/acc"]))
        target = self.target_accuracy
        if target is not None and evaluated and self.metric not in row:
            from fl_lightning.errors import ConfigError

            logged = ', '.join(sorted(k for k in row if '/' in k or '_' in k))
            if self.metric == "val/acc":  # a network with its own validation_step logs its own names
                raise ConfigError("model.target_accuracy", "val/acc is not logged (the network's own validation_step "
                                  "is the evaluation): give --model.target_metric NAME --model.target_mode min|max "
                                  f"--model.target V, NAME one of {logged}")
            raise ConfigError("model.target_metric", f"{self.metric} is not logged at evaluation; choose one of {logged}")
        if target is not None and self.upload_d_at_target is None and self.reached(row):
            self.upload_d_at_target = upload_d
            row["comm/upload_d_at_target"] = upload_d
        values = {k: torch.tensor(v, dtype=torch.float64).item() for k, v in row.items()}  # byte counts stay exact
        for logger in loggers:
            logger.log_metrics({**values, "epoch": epoch}, step=epoch)
            logger.save()
        self.row = row
        return row

    def state_dict(self) -> dict:
        return {"curve": self.curve, "upload_d_at_target": self.upload_d_at_target, "plotted": self.plotted}

    def load_state_dict(self, state: dict) -> None:
        curve = state.get("curve", {})
        self.curve = {key: [tuple(point) for point in curve.get(key, [])] for key in ("val", "test")}
        self.upload_d_at_target = state.get("upload_d_at_target")
        self.plotted = state.get("plotted", self.plotted)
