"""What a run is and where it goes: its identity and id (``identity.py``), its folder and files
(``files.py``), safe checkpoints, ``sweep``, ``report``, runs kept as text (``kept.py``), figures and
plots, the round progress bar and the end-of-fit summary."""
from fl_lightning.runs.checkpoint_io import load_weights_only, refusal as checkpoint_refusal, refuse_before_algorithm_objects
from fl_lightning.runs.files import (append_rows, define_round_keys, keep_metrics_csv, run_dirs, wandb_id,
                                     write_start_files)
from fl_lightning.runs.plot import write_curve
from fl_lightning.runs.python_api import prepare, steps_word, summary

__all__ = ["append_rows", "checkpoint_refusal", "define_round_keys", "keep_metrics_csv", "load_weights_only", "prepare",
           "refuse_before_algorithm_objects", "run_dirs", "steps_word", "summary", "wandb_id", "write_curve",
           "write_start_files"]
