"""A fit from Python looks like a fit from the command line: the round progress bar instead of
Lightning's epoch bar, none of Lightning's warnings that do not apply to one-round epochs, and the
same one-line summary at the end (``summary``, which the CLI prints too)."""
from __future__ import annotations

import os
import warnings

import pytorch_lightning as pl
from pytorch_lightning.callbacks import TQDMProgressBar
from pytorch_lightning.utilities.warnings import PossibleUserWarning

from fl_lightning.federation.memory_format import set_input_layout
from fl_lightning.runs.checkpoint_io import install as install_safe_checkpoint_io
from fl_lightning.runs.files import run_folder
from fl_lightning.runs.progress import RoundProgressBar

IRRELEVANT = (r".*smaller than the logging interval.*",  # one training "batch" per round, by design
              r".*does not have many workers.*")  # the loaders hold one item or in-memory tensors


def as_the_cli_does(trainer: pl.Trainer) -> None:
    """Lightning's default TQDM bar becomes the round bar; irrelevant warnings are silenced."""
    for message in IRRELEVANT:
        warnings.filterwarnings("ignore", message=message)
    callbacks = trainer.callbacks
    for index, callback in enumerate(callbacks):
        if type(callback) is TQDMProgressBar:  # the default one, not a bar the user chose
            callbacks[index] = RoundProgressBar(refresh_rate=callback.refresh_rate)


def prepare(trainer: pl.Trainer, module) -> None:
    """The Trainer of a fit, validate or test, from the CLI or Python alike: atomic checkpoint writes and
    weights-only reads, the input layout (channels_last, bf16 on the CPU), the round bar, and no warning
    about syncing logged values over ranks (every value the module logs is the same on every rank)."""
    install_safe_checkpoint_io(trainer)
    set_input_layout(module.net, trainer, module.hparams.channels_last)
    as_the_cli_does(trainer)
    if trainer.world_size > 1:
        warnings.filterwarnings("ignore", message=r"It is recommended to use `self.log\(.*sync_dist=True",
                                category=PossibleUserWarning)


def steps_word(module) -> str:
    """What one epoch is under the fit's schedule (``RoundSchedule.epoch``): rounds, or server steps (FedBuff)."""
    return f"{getattr(module, 'schedule_epoch', 'round')}s"


def summary(trainer: pl.Trainer, module) -> str:
    """``fl-lightning: N rounds (FedBuff: server steps), final val/acc …, test/acc …, comm/upload_d …, run dir …``."""
    metrics = trainer.callback_metrics
    folder = trainer.strategy.broadcast(run_folder(trainer.loggers[0]) if trainer.loggers else trainer.default_root_dir)
    accuracy = {key: f"{float(metrics[key]):.4f}" if key in metrics else "n/a" for key in ("val/acc", "test/acc")}
    if module.loop is None:  # ddp_spawn: the rounds ran in spawned processes, their logs hold the run
        return f"fl-lightning: done in spawned processes, final val/acc {accuracy['val/acc']}, test/acc {accuracy['test/acc']}"
    own = module.evaluation.metrics if "val/acc" not in metrics else {}  # the network's own evaluation
    shown = (", ".join(f"{k} {v:.4f}" for k, v in sorted(own.items())) if own else
             f"val/acc {accuracy['val/acc']}, test/acc {accuracy['test/acc']}")
    value = lambda key: float(metrics[key]) if key in metrics else None
    for callback in module.fl_callbacks:  # e.g. client-level DP's ε, δ, sampling and, near chance, a hint
        shown += callback.summary(value("val/acc"), value("val/loss"), getattr(trainer.datamodule, "num_classes", 0))
    shown += getattr(trainer.datamodule, "eval_note", lambda: "")()  # data.eval_samples: on how many images
    label = os.path.basename(os.path.dirname(os.path.abspath(folder)))
    cut = f" (a label past 80 characters ends with the run id {module.run_id}: every setting is in its config.yaml)" \
        if module.run_id and label.endswith(f",{module.run_id}") else ""
    return (f"fl-lightning: {trainer.current_epoch} {steps_word(module)}, final {shown}, comm/upload_d {module.loop.comm.upload_d:.2f}, run dir "
            f"{os.path.abspath(folder)}{cut}")
