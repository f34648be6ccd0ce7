"""Client-level differential privacy (docs/privacy.md, "Client-level differential privacy"): clipping of each
client's upload, Gaussian noise on every released sum, and ε from dp-accounting.

    fl_lightning.privacy.PrivacyOptions   the options (``--model.privacy.*``)
    fl_lightning.privacy.ClientDP         the FLCallback that applies them
    fl_lightning.privacy.accountant       ε ↔ noise multiplier (``fl-lightning privacy``)
"""
from fl_lightning.privacy.options import PrivacyOptions, resolve_privacy
from fl_lightning.privacy.callback import ClientDP

__all__ = ["PrivacyOptions", "ClientDP", "resolve_privacy"]
