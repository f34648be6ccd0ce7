"""Robust aggregation (docs/robustness.md): ``--model.aggregator NAME``, one file per rule, each registered in
``AGGREGATORS``; ``RobustServer`` brings a rule and an attack (fl_lightning.attacks) into a fit."""
from fl_lightning.aggregation.base import AGGREGATORS, Aggregator
from fl_lightning.aggregation.mean import Mean
from fl_lightning.aggregation.median import Median
from fl_lightning.aggregation.trimmed_mean import TrimmedMean
from fl_lightning.aggregation.krum import Krum, MultiKrum
from fl_lightning.aggregation.bulyan import Bulyan
from fl_lightning.aggregation.centered_clip import CenteredClip
from fl_lightning.aggregation.norm_bound import NormBound
from fl_lightning.aggregation.server import RobustServer
from fl_lightning.aggregation.options import (expand_names, resolve_aggregator, resolve_attack, settle_config,
                                              settle_robustness, spec_of)

__all__ = ["AGGREGATORS", "Aggregator", "Mean", "Median", "TrimmedMean", "Krum", "MultiKrum", "Bulyan",
           "CenteredClip", "NormBound", "RobustServer", "expand_names", "resolve_aggregator", "resolve_attack",
           "settle_config", "settle_robustness", "spec_of"]
