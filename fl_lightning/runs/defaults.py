"""The Trainer settings a fit has unless its config says otherwise (the command's and a SuperNode's parser)."""

TRAINER_DEFAULTS = {
    "max_epochs": 30,  # = communication rounds
    "num_sanity_val_steps": 0,
    "log_every_n_steps": 1,
    "logger": {"class_path": "pytorch_lightning.loggers.CSVLogger", "init_args": {"save_dir": "runs", "name": "fl"}},
}
