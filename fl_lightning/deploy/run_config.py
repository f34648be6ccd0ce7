"""A run's model and data from its config file on a SuperNode, without the command line: the parser the
command's fit uses — Lightning's ``LightningArgumentParser`` over the Trainer, ``FederatedModule`` and
``FederatedDataModule`` with the command's defaults, registry names expanded (``parser_mode`` fl_yaml) — so the
config, and the run id computed from it, are the server's. Seeds as the command does, fills a built-in network's
sizes from the data, and builds the model and the data module; no Trainer, no run folder."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import pytorch_lightning as pl
from jsonargparse import ActionConfigFile, Namespace
from pytorch_lightning.cli import LightningArgumentParser

from fl_lightning.algorithms.names import expand_args
from fl_lightning.data.datamodule import FederatedDataModule
from fl_lightning.errors import FLUserError
from fl_lightning.models.sizing import size_network_by_data
from fl_lightning.module import FederatedModule
from fl_lightning.runs.defaults import TRAINER_DEFAULTS


@dataclass
class RunObjects:
    """``config``: the parsed run (``parser.dump(config)`` is the YAML the server sends); ``model``, ``datamodule``."""

    parser: LightningArgumentParser
    config: Namespace
    model: FederatedModule
    datamodule: FederatedDataModule


def run_parser() -> LightningArgumentParser:
    """The fit's options, as ``fl-lightning fit`` parses them (trainer, model, data, seed_everything)."""
    parser = LightningArgumentParser(parser_mode="fl_yaml", exit_on_error=False,
                                     dump_header=[f"pytorch_lightning=={pl.__version__}"])
    parser.add_argument("-c", "--config", action=ActionConfigFile)
    parser.add_argument("--seed_everything", type=Union[bool, int], default=0)
    parser.add_lightning_class_args(pl.Trainer, "trainer")
    parser.set_defaults({f"trainer.{key}": value for key, value in TRAINER_DEFAULTS.items()})
    parser.add_lightning_class_args(FederatedModule, "model", subclass_mode=False)
    parser.add_lightning_class_args(FederatedDataModule, "data", subclass_mode=False)
    return parser


def build_run(config_path: str, overrides: Optional[list[str]] = None) -> RunObjects:
    """The run in ``config_path`` (with ``overrides``, command-line style); a user's mistake is its one line."""
    parser = run_parser()
    config = parser.parse_args(expand_args(["--config", config_path, *(overrides or [])]))
    if config.seed_everything is not False:
        pl.seed_everything(None if config.seed_everything is True else config.seed_everything, workers=True,
                           verbose=False)
    sized = size_network_by_data(config, FederatedDataModule)  # its data read once, and used
    try:
        plain = config.clone()
        plain.trainer.logger, plain.trainer.callbacks = None, None  # no Trainer here: nothing of it is built
        built = parser.instantiate_classes(plain)
    except (ValueError, TypeError) as err:
        cause = err
        while cause is not None and not isinstance(cause, FLUserError):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
        raise cause from None
    return RunObjects(parser, config, built.model, sized or built.data)
