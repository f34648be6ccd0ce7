"""The progress bar of a federated run: one bar over rounds (docs/command_line.md, "Command line").

    round  12/100 [00:41<05:02] val/acc=0.4210, comm/upload_d=2.58

Lightning's default bar shows "Epoch N" with a 1/1 batch bar and opens a validation bar every
round; here an epoch is a round and its single "batch" is the whole round, so this bar counts
rounds and shows what FL plots are made of. Validation and test bars still appear outside fit.
"""
from __future__ import annotations

from pytorch_lightning.callbacks import TQDMProgressBar

SHOWN = {"val/acc": "{:.4f}", "test/acc": "{:.4f}", "comm/upload_d": "{:.2f}"}


class RoundProgressBar(TQDMProgressBar):
    @property
    def train_description(self) -> str:
        return getattr(self.trainer.lightning_module, "schedule_epoch", "round")  # the schedule's RoundSchedule.epoch

    def on_train_start(self, trainer, pl_module):
        bar = self.init_train_tqdm()
        max_rounds = trainer.max_epochs
        bar.total = max_rounds if max_rounds is not None and max_rounds >= 0 else None
        bar.initial = trainer.current_epoch  # a resumed run continues its count
        bar.reset(total=bar.total)
        bar.update(trainer.current_epoch)
        self.train_progress_bar = bar

    def on_train_epoch_start(self, trainer, *args):
        pass  # the bar spans the run, not one round

    def on_train_batch_end(self, *args, **kwargs):
        pass

    def on_train_epoch_end(self, trainer, pl_module):
        self.train_progress_bar.update(1)
        self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=True)

    def get_metrics(self, trainer, pl_module) -> dict:
        metrics = trainer.callback_metrics
        return {key: form.format(float(metrics[key])) for key, form in SHOWN.items() if key in metrics}

    def _fitting(self, trainer) -> bool:
        return trainer.state.fn == "fit"

    def on_validation_start(self, trainer, pl_module):
        if not self._fitting(trainer):
            super().on_validation_start(trainer, pl_module)

    def on_validation_batch_start(self, trainer, *args, **kwargs):
        if not self._fitting(trainer):
            super().on_validation_batch_start(trainer, *args, **kwargs)

    def on_validation_batch_end(self, trainer, *args, **kwargs):
        if not self._fitting(trainer):
            super().on_validation_batch_end(trainer, *args, **kwargs)

    def on_validation_end(self, trainer, pl_module):
        if not self._fitting(trainer):
            super().on_validation_end(trainer, pl_module)
