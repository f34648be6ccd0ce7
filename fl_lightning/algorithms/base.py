"""``Algorithm``: one federated algorithm as a typed object, and the registry that finds it by name.

An algorithm's options are its ``__init__`` arguments (typed, with defaults, one line each in
the docstring's ``Args:``; bounds checked there, once). It says which ``FLCallback`` hooks make
it (``callbacks``), which server optimizer steps x^r (``server_optimizer``), and what a client
uploads (``upload``, in floats). ``@register("name")`` puts it in ``REGISTRY`` the way timm
registers models; ``register_preset`` adds a name for an algorithm with an upload codec
(``topk`` = FedAvg + TopK). The command line and configs name it as
``--model.algorithm fedprox --model.algorithm.mu 0.1`` (fl_lightning.algorithms.names).
"""
from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass
from typing import ClassVar, Optional

import torch

from fl_lightning.callbacks.base import FLCallback
from fl_lightning.errors import ConfigError
from fl_lightning.registry import Registry


class Algorithm:
    """Base class: FedAvg's defaults (no callbacks, server SGD with lr η_g, every client uploads Δ)."""

    summary: ClassVar[str] = ""  # one line, for `fl-lightning algorithms` and docs/algorithms.md
    upload: ClassVar[str] = "d"  # floats uploaded per client and round (d = model size, N = blocks)
    uses_blocks: ClassVar[bool] = False  # needs a block division (FedBCGD family)
    compressible: ClassVar[bool] = True  # model.compression may act on its uploads
    server_lr: float = 1.0

    @property
    def name(self) -> str:
        return NAME_OF.get(type(self), type(self).__name__)

    def callbacks(self) -> list[FLCallback]:
        """The hooks that make this algorithm, in the order they run."""
        return []

    def server_optimizer(self, params: list[torch.Tensor]) -> torch.optim.Optimizer:
        """Steps x^r on the pseudo-gradient −Δ̄ each round (spec, "FedAvg": x + η_g Δ̄)."""
        return torch.optim.SGD(params, lr=self.server_lr)

    def default_grad_clip(self) -> Optional[float]:
        """The local gradient-norm clip when model.grad_clip is unset (None: no clipping)."""
        return None

    def check_with(self, weighted_aggregation: bool, compression) -> None:
        """Settings of the module this algorithm cannot run with: one ConfigError each."""
        if compression is not None and not self.compressible:
            raise ConfigError("model.compression", f"{self.name} sends nothing to compress; leave it unset")

    def check_network(self, network) -> None:
        """Networks this algorithm cannot run on (e.g. FedBN without normalisation layers): one ConfigError."""

    def check_fit(self, module, datamodule) -> None:
        """A fit this algorithm makes meaningless (e.g. Local without held-out data): one ConfigError, before any
        run file (the CLI's checks and the fit's start call it once the data are set up)."""

    # -- what the options are ------------------------------------------------------------
    @classmethod
    def option_names(cls) -> list[str]:
        return [p for p in inspect.signature(cls.__init__).parameters if p != "self"]

    @classmethod
    def option_defaults(cls) -> dict:
        return {name: p.default for name, p in inspect.signature(cls.__init__).parameters.items() if name != "self"}

    def options(self) -> dict:
        return {name: getattr(self, name) for name in self.option_names()}

    def spec(self) -> dict:
        """The class path and every option: what config.yaml and checkpoints record."""
        return {"class_path": f"{type(self).__module__}.{type(self).__qualname__}", "init_args": self.options()}

    def changed_server_options(self) -> list[str]:
        """The server_* options set away from their defaults (refused beside model.server_optimizer)."""
        defaults = self.option_defaults()
        return [name for name in defaults if name.startswith("server_") and getattr(self, name) != defaults[name]]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.options().items())})"


# -- checks, named after the option they check ---------------------------------------------
def positive(owner: Algorithm, name: str, value: float) -> float:
    if not value > 0:
        raise ConfigError(f"{type(owner).__name__}({name}=...)", f"must be > 0, got {value}")
    return value


def non_negative(owner: Algorithm, name: str, value: float) -> float:
    if value < 0:
        raise ConfigError(f"{type(owner).__name__}({name}=...)", f"must be ≥ 0, got {value}")
    return value


def fraction(owner: Algorithm, name: str, value: float) -> float:
    if not 0.0 <= value < 1.0:
        raise ConfigError(f"{type(owner).__name__}({name}=...)", f"must be in [0, 1), got {value}")
    return value


def choice(owner: Algorithm, name: str, value: str, choices: tuple) -> str:
    if value not in choices:
        raise ConfigError(f"{type(owner).__name__}({name}=...)", f"unknown {value!r}; choose one of "
                          f"{', '.join(choices)}")
    return value


# -- the registry ------------------------------------------------------------------------
@dataclass(frozen=True)
class Entry:
    """A name users type: an algorithm class, optionally with the codec its uploads go through."""

    name: str
    algorithm: type
    codec: Optional[str] = None  # a fl_lightning.compression.codecs.CODECS name
    summary: str = ""
    upload: str = ""


REGISTRY = Registry("algorithm")  # name → Entry; a name is taken once
NAME_OF: dict[type, str] = {}  # class → its own registry name


def register(name: str):
    """Class decorator: ``@register("fedprox")``; registering a name twice is refused."""
    def add(cls: type) -> type:
        REGISTRY.register(name)(Entry(name, cls, None, cls.summary, cls.upload))
        NAME_OF[cls] = name
        return cls
    return add


def register_preset(name: str, algorithm: type, codec: str, summary: str, upload: str) -> None:
    """A name for ``algorithm`` with every upload encoded by ``codec`` (e.g. ``fedpaq``: FedAvg + QSGD)."""
    REGISTRY.register(name)(Entry(name, algorithm, codec, summary, upload))


def algorithms_with(option: str) -> list[str]:
    """The registered names whose algorithm has ``option``."""
    return [name for name, entry in REGISTRY.items() if entry.codec is None and option in
            entry.algorithm.option_names()]


def unknown(name: str) -> ConfigError:
    close = difflib.get_close_matches(name, list(REGISTRY), n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    return ConfigError("model.algorithm", f"unknown algorithm {name!r}; {hint}choose one of {', '.join(REGISTRY)} "
                       "(fl-lightning algorithms lists them)")
