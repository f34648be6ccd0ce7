"""The LightningCLI behind ``fl-lightning fit|validate|test`` and ``blocks`` (entry point: fl_lightning.cli).

User mistakes surface as one line naming the field and the fix (exit code 2), checked
before any run directory is created.
"""
from __future__ import annotations

import hashlib
import json
import netrc
import importlib.util
import inspect
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Optional

import yaml
from jsonargparse import Namespace
from pytorch_lightning.callbacks import ProgressBar
from pytorch_lightning.cli import LightningCLI, SaveConfigCallback
from pytorch_lightning.loggers import WandbLogger
from lightning_fabric.utilities.exceptions import MisconfigurationException

from fl_lightning.algorithms import algorithms_with, default_spec
from fl_lightning.compression import CODECS
from fl_lightning.algorithms.describe import fit_description
from fl_lightning.algorithms.names import algorithm_name, class_path, expand_args, import_class
from fl_lightning.aggregation import expand_names, settle_config
from fl_lightning.federation.blocks import partition_for
from fl_lightning.runs.checkpoint_io import refuse_before_algorithm_objects
from fl_lightning.data.datamodule import FederatedDataModule
from fl_lightning.federation.distributed import shutdown
from fl_lightning.errors import ConfigError, FLUserError, check_unchanged
from fl_lightning.models.timm_models import architecture_only
from fl_lightning.module_options import SYSTEM_KEYS, check_trainer, system_specs
from fl_lightning.cli.options import moved
from fl_lightning.cli.messages import plain_message
from fl_lightning.cli.quiet import quiet_lightning
from fl_lightning.runs.identity import ID_LINE, TAKES_EFFECT_AT_RESUME, run_id, run_label, trainer_callbacks
from fl_lightning.runs.resumed_folder import continue_in_checkpoint_folder, go_on_in
from fl_lightning.models.sizing import size_network_by_data
from fl_lightning.module import FederatedModule
from fl_lightning.runs.defaults import TRAINER_DEFAULTS
from fl_lightning.runs.files import FOLDER_LOGGERS, run_dirs
from fl_lightning.runs.leftovers import DropsEmptyRunFolder, drop_leftovers
from fl_lightning.runs.progress import RoundProgressBar
from fl_lightning.federation.threads import Threads, record_line
from fl_lightning.runs.python_api import summary
from fl_lightning.cli.checkpoints import check_checkpoint, check_same_network, newest_checkpoint
from fl_lightning.privacy.callback import check_before_fit as check_privacy_fit, check_checkpoint as check_privacy_checkpoint

def check_before_any_directory(trainer) -> None:
    """Trainer settings that would fail only after the run directory exists: zero rounds, a logger
    without its package, a save directory that cannot be written."""
    if trainer.get("max_epochs") == 0:
        raise ConfigError("trainer.max_epochs", "is 0: a fit needs at least one round (or -1: until the budget)")
    loggers = trainer.get("logger")
    for logger in loggers if isinstance(loggers, list) else [loggers]:
        kind = getattr(logger, "class_path", "").rsplit(".", 1)[-1]
        if kind == "TensorBoardLogger" and not any(importlib.util.find_spec(m) for m in ("tensorboard", "tensorboardX")):
            raise ConfigError("trainer.logger", "TensorBoardLogger needs the tensorboard package: pip install "
                              "tensorboard, or keep the default CSVLogger")
        save_dir = (getattr(logger, "init_args", None) or {}).get("save_dir")
        if save_dir:
            existing = Path(os.path.abspath(save_dir))
            while not existing.exists():
                existing = existing.parent
            if not os.access(existing, os.W_OK | os.X_OK):
                raise ConfigError("trainer.logger.init_args.save_dir", f"{save_dir}: {existing} is not writable; "
                                  "choose a directory you can write")


def check_blocks_before_data(config) -> None:
    """S < N blocks refused from the options alone, before any data is read (decoding images takes minutes)."""
    algorithm = (config.get("model") or {}).get("algorithm")
    init_args = getattr(algorithm, "init_args", None)
    blocks, s = (init_args.get("num_blocks") if init_args is not None else None), config["model"].get("clients_per_round")
    if isinstance(blocks, int) and isinstance(s, int) and s < blocks:
        raise ConfigError("model.clients_per_round", f"S={s} < N={blocks} blocks: every block needs a client each "
                          "round; raise S or lower model.algorithm.num_blocks")


def plain(value):
    """A setting as JSON would hold it (Namespaces → dicts, tuples → lists, class paths as the class's own
    module path), to compare with a checkpoint's."""
    if isinstance(value, Namespace):
        value = value.as_dict()
    value = json.loads(json.dumps(value, default=str))
    if isinstance(value, dict) and isinstance(value.get("class_path"), str):
        value["class_path"] = canonical(value["class_path"])
    return value


def canonical(path: str) -> str:
    """``fl_lightning.algorithms.FedBCGD`` (re-exported) → ``fl_lightning.algorithms.fedbcgd.FedBCGD``."""
    cls = import_class(path)
    return path if cls is None else class_path(cls)


def differences(field: str, now, before):
    """(dotted field, now, before) for each leaf that differs: a changed algorithm option is named as such."""
    if isinstance(now, dict) and isinstance(before, dict) and set(now) == set(before):
        for key in now:
            yield from differences(f"{field}.{key}", now[key], before[key])
    elif now != before:
        yield field.replace(".init_args.", "."), now, before


class SaveRunConfig(SaveConfigCallback):
    """config.yaml in each run's own directory (CSV: version_N/, W&B: the run's files/), never
    overwritten by a later run; W&B also gets the full resolved config as the run's config."""

    def save_config(self, trainer, pl_module, stage) -> None:
        threads = next((cb.threads for cb in trainer.callbacks if isinstance(cb, Threads)), None)
        for run_dir in run_dirs(trainer):
            path = os.path.join(run_dir, self.config_filename)
            self.parser.save(self.config, path, skip_none=False, overwrite=True, multifile=False)
            with open(path) as f:
                text = f.read()
            with open(path, "w") as f:  # the run's id first: report joins a run's pieces by it; then its kernels
                f.write(f"{ID_LINE}{pl_module.run_id}\n{record_line(threads)}\n{text}")
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                logger.experiment.config.update(self.config.clone().as_dict(), allow_val_change=True)


def run_names(config, prefix: Optional[str]) -> tuple[str, str]:
    """(run name, group): prefix (the logger's name, else the config file's) + algorithm + seed, and
    the same with a digest of every setting but the seed, so runs that differ only in their seed
    share a group."""
    files = config.get("config") or []
    stem = prefix or (Path(str(files[-1])).stem if files else "fl")
    settings = config.clone().as_dict()
    for key in ("seed_everything", "config", "ckpt_path"):
        settings.pop(key, None)
    settings.get("trainer", {}).pop("logger", None)
    digest = hashlib.sha1(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:8]
    algorithm = algorithm_name(config["model"].get("algorithm"), config["model"].get("compression"))
    return f"{stem}-{algorithm}-seed{config['seed_everything']}", f"{stem}-{algorithm}-{digest}"


def check_wandb_credentials() -> None:
    """W&B online needs an API key; without one, say how to log offline instead of failing inside wandb."""
    if os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun") or os.environ.get("WANDB_API_KEY"):
        return
    try:
        if netrc.netrc().authenticators("api.wandb.ai"):
            return
    except (OSError, netrc.NetrcParseError):
        pass
    raise ConfigError("trainer.logger", "WandbLogger has no W&B API key on this machine: run `wandb login`, or set "
                      "WANDB_MODE=offline to write the run locally (wandb sync uploads it later)")


class FederatedCLI(LightningCLI):
    """``fl-lightning fit|validate|test``: registry names (``--model.algorithm fedpaq``) are expanded
    to class paths first (fl_lightning.algorithms.names), in arguments and config files alike."""

    def __init__(self, args=None, run: bool = True, callbacks=()):
        args = expand_names(expand_args(list(sys.argv[1:] if args is None else args)))  # + aggregator/attack names
        quiet_lightning()  # no Lightning tips or its internal deprecation warnings on the terminal
        self._given_args, self.run_id = args, None
        warnings.filterwarnings("ignore", message=r"LightningCLI's args parameter is intended")  # args are explicit
        defaults = {**TRAINER_DEFAULTS, "callbacks": list(callbacks)} if callbacks else TRAINER_DEFAULTS
        super().__init__(FederatedModule, FederatedDataModule, trainer_defaults=defaults,
                         seed_everything_default=0, save_config_callback=SaveRunConfig,
                         save_config_kwargs={"save_to_log_dir": False}, auto_configure_optimizers=False,
                         parser_kwargs={"exit_on_error": False, "parser_mode": "fl_yaml",
                                        "fit": {"description": fit_description()}}, args=args, run=run)

    def before_instantiate_classes(self) -> None:
        """W&B runs are named <logger name or config file>-<algorithm>-seed<seed>, grouped by every
        setting but the seed (unless the config sets a group) and tagged ``run-id:<run id>``; a resumed
        fit continues the W&B run its checkpoint logged to."""
        config = self.config[self.subcommand] if self.subcommand else self.config
        check_blocks_before_data(config)
        self.sized_by = size_network_by_data(config, FederatedDataModule)  # its data read once, and used
        loggers = config.get("trainer", {}).get("logger")
        for logger in loggers if isinstance(loggers, list) else [loggers]:
            if getattr(logger, "class_path", "").endswith("WandbLogger"):
                check_wandb_credentials()
                name, group = run_names(config, logger.init_args.get("name"))
                logger.init_args["name"] = name
                if logger.init_args.get("save_dir"):  # wandb's service process may run in another directory
                    logger.init_args["save_dir"] = os.path.abspath(logger.init_args["save_dir"])
                if logger.init_args.get("group") is None:
                    logger.init_args["group"] = group
                logger.init_args["tags"] = [*(logger.init_args.get("tags") or []), f"run-id:{self.run_id}"]
                resumed = (getattr(self, "checkpoint", None) or {}).get("federated", {}).get("wandb_id")
                if resumed and not logger.init_args.get("id"):  # the same W&B run goes on (resume="allow")
                    logger.init_args["id"] = resumed

    def instantiate_classes(self) -> None:
        """An algorithm's or codec's own check (e.g. ``FedProx(mu=...): must be ≥ 0``) reaches the user as
        that one line, not inside jsonargparse's report of every Union member it tried."""
        try:
            super().instantiate_classes()
            self.datamodule = self.sized_by or self.datamodule  # the same settings, its data already read
        except (ValueError, TypeError) as err:
            cause = err
            while cause is not None and not isinstance(cause, FLUserError):
                cause = cause.__cause__ or cause.__context__
            if cause is None:
                raise
            raise cause from None

    def instantiate_trainer(self, **kwargs):
        """Adds the round progress bar (fl_lightning.runs.progress) unless the config disables bars or brings one."""
        config = self.config_init[self.subcommand] if self.subcommand else self.config_init
        trainer = config.get("trainer") or {}
        callbacks = trainer.get("callbacks") or []
        callbacks = callbacks if isinstance(callbacks, list) else [callbacks]
        if trainer.get("enable_progress_bar") is not False and not any(isinstance(cb, ProgressBar) for cb in callbacks):
            kwargs["callbacks"] = [*callbacks, RoundProgressBar()]
        if not any(isinstance(cb, Threads) for cb in callbacks):  # records the thread layout in checkpoints
            kwargs["callbacks"] = [*kwargs.get("callbacks", callbacks), Threads()]
        kwargs["callbacks"] = [*kwargs.get("callbacks", callbacks), DropsEmptyRunFolder()]  # Ctrl-C in round 1
        try:
            return super().instantiate_trainer(**kwargs)
        except (ValueError, MisconfigurationException) as err:  # e.g. strategy/devices/accelerator the Trainer refuses
            raise ConfigError("trainer", str(err).strip().splitlines()[0]) from None

    def _parse_ckpt_path(self) -> None:
        """Reads the checkpoint once, before anything is built. The command line stays the truth:
        a model or data option that differs from the checkpoint's stops the run with one line, except
        those that may soundly change at resume (TAKES_EFFECT_AT_RESUME; trainer options such as
        max_epochs, loggers and the validation schedule are never stored, so they always do)."""
        if not self.config.get("subcommand"):
            return
        config = self.config[self.config.subcommand]
        check_before_any_directory(config.get("trainer") or {})
        self.name_the_run(config, self.config.subcommand)
        if config.get("ckpt_path") == "last" and self.config.subcommand == "fit":
            newest, self.checkpoint = newest_checkpoint(config.get("trainer") or {}, self.run_id)
            if newest is not None:
                print(f"fl-lightning: resuming from {newest}")
            else:
                print(f"fl-lightning: no checkpoint of this run (run id {self.run_id}) to resume; starting it at round 1")
            config["ckpt_path"] = newest
        else:
            self.checkpoint = check_checkpoint(config.get("ckpt_path"))
        if self.checkpoint is None:
            return
        refuse_before_algorithm_objects(self.checkpoint, config.get("ckpt_path"))
        check_privacy_checkpoint(self.checkpoint)
        if self.config.subcommand != "fit":
            return
        rounds_done, max_epochs = self.checkpoint.get("epoch", -1) + 1, (config.get("trainer") or {}).get("max_epochs")
        if max_epochs is not None and 0 <= max_epochs < rounds_done:
            raise ConfigError("trainer.max_epochs", f"is {max_epochs} but the checkpoint has done {rounds_done} rounds; "
                              f"resume with trainer.max_epochs > {rounds_done}")
        check_unchanged("seed_everything", config["seed_everything"], self.checkpoint.get("federated", {}).get("seed"))
        self.resumed_in = continue_in_checkpoint_folder(config.get("trainer") or {}, config["ckpt_path"]), rounds_done
        saved = {"model": self.checkpoint.get("hyper_parameters", {}),
                 "data": self.checkpoint.get("FederatedDataModule", {}).get("settings", {})}
        if saved["model"].get("network_optimizer"):  # lr & co. are the network optimizer's, not the options'
            saved["model"] = {k: v for k, v in saved["model"].items() if k not in ("lr", "weight_decay", "client_momentum")}
        model = config["model"]  # a system's options as recorded: names resolved, the default policy filled in
        specs = system_specs(*(plain(model.get(key)) for key in ("system", "round_policy", "asynchronous")))
        for group, options in saved.items():
            for key, old in options.items():
                if key in config[group] and key not in TAKES_EFFECT_AT_RESUME:
                    now = plain(specs.get(key)) if group == "model" and key in SYSTEM_KEYS else plain(config[group][key])
                    if group == "model" and key == "algorithm" and now is None:  # the default one, as it was recorded
                        now = plain(default_spec())
                    for field, now, before in differences(f"{group}.{key}", now, plain(old)):
                        check_unchanged(field, now, before)

    def name_the_run(self, config, subcommand: str, brought: Optional[list] = None) -> None:
        """The run's id, and its directory ``<name>/<label>`` for CSV/TensorBoard loggers, whatever their name,
        unless the command or config gives their version (fl_lightning.runs.identity). The aggregator and the
        attack get their one recorded form first (``settle_config``). ``brought``: the callbacks (objects or class
        paths) the fit adds to the config's, default those ``main(callbacks=...)`` adds (the ServerApp's)."""
        settle_config(config["model"], self._given_args)
        settings = config.clone().as_dict()
        self.run_id = run_id(settings)
        brought = self.trainer_defaults.get("callbacks") or [] if brought is None else brought
        trainer = settings.get("trainer") or {}
        label = run_label({**settings, "trainer": {**trainer, "callbacks": [*trainer_callbacks(settings), *brought]}},
                          algorithm_name(settings["model"].get("algorithm"), settings["model"].get("compression")),
                          self._given_args)
        if subcommand != "fit":
            label = f"{label}/{subcommand}"
        loggers = (config.get("trainer") or {}).get("logger")
        for logger in loggers if isinstance(loggers, list) else [loggers]:
            if getattr(logger, "class_path", "").rsplit(".", 1)[-1] in FOLDER_LOGGERS \
                    and logger.init_args.get("version") is None:  # a version given names the run's folder itself
                logger.init_args["name"] = f"{logger.init_args.get('name') or 'lightning_logs'}/{label}"

    def _check(self) -> None:  # the checkpoint was already read in _parse_ckpt_path
        config = self.config_init[self.subcommand]
        if config.get("weights_only") is False:
            raise ConfigError("weights_only", "fl-lightning loads checkpoints with weights_only=true only (a pickled "
                              "object could run code); drop the option")
        config["weights_only"] = True  # explicit, whatever torch's default
        self.datamodule.check()
        self.model.check_compatible(self.datamodule, self.trainer)
        check_trainer(self.model.hparams, self.trainer)
        if self.subcommand == "fit" and self.model.privacy is not None:  # before any run folder exists
            check_privacy_fit(self.model.privacy, self.datamodule.num_clients, self.model.hparams.clients_per_round,
                              self.trainer.max_epochs)
        if getattr(self, "checkpoint", None) is not None:
            check_same_network(self.checkpoint, self.model)
            if self.subcommand == "fit" and "FederatedDataModule" in self.checkpoint:  # its fingerprint, before
                self.datamodule.load_state_dict(self.checkpoint["FederatedDataModule"])  # any run folder exists

    def before_fit(self) -> None:
        self._check()
        for folder in drop_leftovers(self.trainer, self.run_id):  # once every check passed, before a folder is picked
            print(f"fl-lightning: removed {folder}: a fit of this run stopped there before its first round")
        go_on_in(self.trainer, *getattr(self, "resumed_in", (None, 0)))  # a resumed run, in its checkpoint's folder
        self.model.run_id = self.run_id
        self.model.prints_summary = False  # after_fit prints it, also for ddp_spawn

    def before_validate(self) -> None:
        self._check()

    def before_test(self) -> None:
        self._check()

    def after_fit(self) -> None:
        line = summary(self.trainer, self.model)  # (its run folder is a broadcast under DDP: every rank asks)
        shutdown(self.trainer.strategy)  # DDP: the process group ends here, every rank together
        if not self.trainer.is_global_zero:
            return
        print(line)
        for logger in self.trainer.loggers:
            if isinstance(logger, WandbLogger):  # the command's run is over (a next in-process run starts afresh)
                logger.experiment.finish()


def print_blocks(args: list[str]) -> None:
    """``fl-lightning blocks --config X``: print the model's block division and exit (the network is
    built without pretrained weights: a table needs shapes only). An algorithm without blocks shows
    the division FedBCGD would use."""
    with architecture_only():
        cli = FederatedCLI(args=args, run=False)
    print((cli.model.blocks or partition_for(cli.model.net, cli.model.algorithm, always=True)).table())


def argument_error(err: Exception, args: list[str]) -> str:
    """jsonargparse's message in one line: an option the chosen algorithm or codec lacks names the ones that
    have it, a value that does not parse names its option and type, a class that does not import says why."""
    plain = plain_message(str(err))  # a refused value, a class's unknown option (fl_lightning.cli.messages)
    if plain is not None:
        return plain
    message = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
    old = re.search(r"does not accept option 'model\.(\w+)'", message)
    if old and moved(old.group(1)):
        return moved(old.group(1))
    group = "compression" if 'key "model.compression"' in message or "model.compression" in message.split(":")[0] \
        else "algorithm"
    chosen = chosen_class(expand_args(args), group)
    nested = re.search(r"NestedArg\(key='(\w+)', val='([^']*)'\)", message)
    unaccepted = re.search(r"Option '(\w+)' is not accepted", message)
    option = nested.group(1) if nested else unaccepted.group(1) if unaccepted else None
    if option and chosen is not None and option in inspect.signature(chosen.__init__).parameters:
        kind = inspect.signature(chosen.__init__).parameters[option].annotation
        value = nested.group(2) if nested else "?"
        return f"model.{group}.{option}: {value!r} is not a valid {kind} for {chosen.__name__}"
    if option:
        owners = algorithms_with(option) if group == "algorithm" else \
            [name for name, codec in CODECS.items() if option in inspect.signature(codec.__init__).parameters]
        where = f"it is an option of {', '.join(owners)}" if owners else f"no registered {group} has it"
        lacking = chosen.__name__ if chosen is not None else f"the chosen {group}"
        return (f"model.{group}.{option}: {lacking} has no option {option!r}; {where} "
                f"(fl-lightning algorithms NAME lists an algorithm's options)")
    missing = re.search(r"Problem with given class_path '([^']+)': (No module named '[^']+'|[^-]+?) -", message)
    if missing:
        return (f"model.{group}: cannot import {missing.group(1)!r} ({missing.group(2).strip()}); give a registry "
                "name (fl-lightning algorithms) or an importable class path (your module on PYTHONPATH)")
    return f"{message} (see fl-lightning fit --help)"


def chosen_class(args: list[str], group: str) -> Optional[type]:
    """The class the command's last ``--model.<group> PATH`` names, if it imports."""
    paths = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == f"--model.{group}"]
    if not paths or paths[-1] in ("null", None):
        return None
    return import_class(paths[-1])
