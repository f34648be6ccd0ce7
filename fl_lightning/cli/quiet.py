"""What the terminal shows of a fit is the researcher's concern only: Lightning's "💡 Tip" lines (litlogger,
litmodels) and its internal ``isinstance(treespec, LeafSpec)`` deprecation warning (Lightning's own code on a newer
torch) are left out; dp-accounting's convergence warnings are counted instead (fl_lightning.privacy.accountant)."""
from __future__ import annotations

import logging
import warnings

TIP_LOGGERS = ("pytorch_lightning.utilities.rank_zero", "lightning.pytorch.utilities.rank_zero")


class NoTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("💡 Tip")


def quiet_lightning() -> None:
    """Installs the filters (once: a logger keeps one filter of each kind)."""
    for name in TIP_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, NoTips) for f in logger.filters):
            logger.addFilter(NoTips())
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
