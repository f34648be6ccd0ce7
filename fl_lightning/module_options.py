"""The module's own options (those every algorithm shares): the algorithm and codec they name, and
the range checks, one line each, done once where the module is built."""
from __future__ import annotations

from typing import Optional, Union

from fl_lightning.algorithms import Algorithm
from fl_lightning.compression.codecs import Codec
from fl_lightning.data.datamodule import FederatedDataModule
from fl_lightning.errors import ConfigError, check_accuracy
from fl_lightning.federation.evaluation import evaluates_itself
from fl_lightning.assembly.connector import (brought_runner, choose_algorithm, choose_parts, describe_fit,
                                             refuse_clashes)
from fl_lightning.federation.trainer_path import local_trainer_options
from fl_lightning.federation.user_module import is_lightning, network_optimizer_settings
from fl_lightning.personalization.evaluation import check_new_clients, check_schedule
from fl_lightning.privacy import resolve_privacy
from fl_lightning.privacy.options import check_algorithm as check_privacy
from fl_lightning.systems import RoundPolicy, resolve_policy, resolve_system
from fl_lightning.systems.fedbuff import resolve_asynchronous
from fl_lightning.models.sizing import check_network_fits
from fl_lightning.models.timm_models import timm_input_config


def resolve(algorithm: Union[Algorithm, str, None], compression: Union[Codec, str, None]
            ) -> tuple[Algorithm, Optional[Codec]]:
    """The algorithm object (a registry name gets its defaults; None is FedAvg) and the codec: the
    one given, else the one the algorithm's name implies (``fedpaq``: QSGD); ``"none"``: no codec
    (fl_lightning.assembly.connector.choose_algorithm, which every path uses)."""
    return choose_algorithm(algorithm, compression)


def codec_spec(codec: Optional[Codec]) -> Optional[dict]:
    return None if codec is None else {"class_path": f"{type(codec).__module__}.{type(codec).__qualname__}",
                                       "init_args": codec.options()}


def check_trainer(hp, trainer) -> None:
    """Trainer settings the module cannot run with (the CLI checks them before any run directory exists)."""
    if hp.get("eval_every_d") is not None and trainer.check_val_every_n_epoch != 1:
        raise ConfigError("model.eval_every_d", "picks the rounds to evaluate itself: set "
                          "trainer.check_val_every_n_epoch 1")
    if hp.get("system") is not None and trainer.world_size > 1:
        raise ConfigError("model.system", "simulates one process's rounds; run it without DDP (one device)")
    if getattr(trainer.precision_plugin, "scaler", None) is not None:
        raise ConfigError("trainer.precision", "16-mixed needs a GradScaler that would rescale the server's "
                          "pseudo-gradient; use bf16-mixed or 32")


def check_module_options(hp) -> None:
    """Options that are wrong whatever the algorithm: one line each."""
    for field in ("clients_per_round", "local_epochs", "batch_size", "test_every_n_rounds", "parallel_clients",
                  "cohort_size"):
        if hp.get(field) is not None and hp[field] < 1:
            raise ConfigError(f"model.{field}", f"must be ≥ 1, got {hp[field]}")
    for field in ("lr", "lr_decay", "max_upload_d", "eval_every_d", "grad_clip"):
        if hp.get(field) is not None and not hp[field] > 0:
            raise ConfigError(f"model.{field}", f"must be > 0, got {hp[field]}")
    if hp["weight_decay"] < 0:
        raise ConfigError("model.weight_decay", f"must be ≥ 0, got {hp['weight_decay']}")
    check_accuracy("model.target_accuracy", hp.get("target_accuracy"))
    check_target(hp)
    if not 0.0 <= hp["client_dropout"] < 1.0:
        raise ConfigError("model.client_dropout", f"must be in [0, 1), got {hp['client_dropout']}")


def check_target(hp) -> None:
    """target_metric/target_mode/target: any logged metric as the target (val/acc with target_accuracy)."""
    metric, mode, target = hp.get("target_metric"), hp.get("target_mode"), hp.get("target")
    if mode is not None and mode not in ("min", "max"):
        raise ConfigError("model.target_mode", f"got {mode!r}; choose min (e.g. a loss) or max (e.g. an accuracy)")
    if target is not None and hp.get("target_accuracy") is not None:
        raise ConfigError("model.target", "give target (with target_metric) or target_accuracy (val/acc), not both")
    if (metric is not None or mode is not None) and target is None and not (metric in (None, "val/acc") and
                                                                            hp.get("target_accuracy") is not None):
        raise ConfigError("model.target", f"target_metric {metric or 'val/acc'} needs the value to reach: "
                          "--model.target V")
    if target is not None and metric is None and mode is None:
        raise ConfigError("model.target_metric", "target needs the metric it applies to: --model.target_metric "
                          "NAME (any logged metric, e.g. val/loss) and --model.target_mode min|max")


def check_compatible(module, datamodule, trainer=None, runner=None) -> None:
    """Settings that only clash once model and data meet: S ≤ M, a client per block, the network's input
    size, a network parallel clients can share (a pretrained timm model's input config is applied first)."""
    if not isinstance(datamodule, FederatedDataModule):  # a user's own data module, either namespace
        got = "none (fit's second argument was not taken as a data module)" if datamodule is None else \
            f"{type(datamodule).__module__}.{type(datamodule).__name__}"
        raise ConfigError("datamodule", f"FederatedModule trains on a FederatedDataModule, got {got}: wrap your "
                          "LightningDataModule (pytorch_lightning or lightning.pytorch) as "
                          "FederatedDataModule.from_datamodule(yours, num_clients=M) and pass datamodule=that")
    datamodule.setup("fit")
    expected = timm_input_config(module.net)
    if expected is not None:
        datamodule.use_input_config(**expected)
    s, m = module.hparams.clients_per_round, datamodule.num_clients
    if s > m:
        raise ConfigError("model.clients_per_round", f"S={s} exceeds data.num_clients M={m}; choose S ≤ M")
    asynchronous = getattr(module, "asynchronous", None)
    if asynchronous is not None and asynchronous.concurrency > m:
        raise ConfigError("model.asynchronous.concurrency", f"C={asynchronous.concurrency} clients in flight exceeds "
                          f"data.num_clients M={m}; choose C ≤ M")
    new = module.hparams.get("personal_new_clients")
    if new and (s > m - new or getattr(datamodule, "personal_fraction", None) is None):
        raise ConfigError("model.personal_new_clients", f"{new} clients held out of M={m} leave fewer than S={s} "
                          "to train" if s > m - new else "evaluates on each client's held-out share: set "
                          "data.personal_fraction")
    for field in ("personal_eval_every", "personal_eval_clients"):
        if module.hparams.get(field) is not None and getattr(datamodule, "personal_fraction", None) is None:
            raise ConfigError(f"model.{field}", "schedules pval/*, which evaluates on each client's held-out "
                              "share: set data.personal_fraction (e.g. 0.2) or leave it unset")
    if module.blocks is not None and s < module.blocks.num_blocks:
        raise ConfigError("model.clients_per_round", f"S={s} < N={module.blocks.num_blocks} blocks: every block "
                          "needs a client each round; raise S or lower model.algorithm.num_blocks")
    if not evaluates_itself(module.net):  # its own validation_step: forward and logits are never needed
        if datamodule.num_classes == 0:
            raise ConfigError("model.network", f"the labels are regression targets (floats), and "
                              f"{type(module.net).__name__} has no validation_step: the built-in val/acc and val/loss "
                              "need class indices; use a LightningModule whose training_step is the loss and whose "
                              "validation_step logs its own metrics (docs/models_and_data.md, \"Your own model and data\")")
        check_network_fits(module.net, datamodule, module.flat.device)
    module.fit = describe_fit(module, datamodule, trainer)  # what the parts read (fl_lightning.assembly.connector)
    brought = brought_runner(module, trainer)  # a callback's runner (the ServerApp's nodes), unless ``runner`` given
    refuse_clashes(module.parts, module.fit, module.robust,
                   runner or (type(brought) if brought is not None else None))


SYSTEM_KEYS = ("system", "round_policy", "asynchronous")  # recorded as system_specs gives them


def system_specs(system, round_policy, asynchronous) -> dict:
    """What the hparams record of model.system, .round_policy, .asynchronous (names or objects), as plain data;
    the CLI compares a resume's options with a checkpoint's through it."""
    system, asynchronous = resolve_system(system), resolve_asynchronous(asynchronous)
    if system is None:
        return {}
    if asynchronous is not None:
        return {"system": system.spec(), "asynchronous": asynchronous.spec()}
    return {"system": system.spec(), "round_policy": (resolve_policy(round_policy) or RoundPolicy()).spec()}


def settle_options(module, network, algorithm, compression, system, round_policy, privacy, server_optimizer,
                   local_trainer, asynchronous=None) -> None:
    """The module's options resolved (registry names → objects) and checked, one ConfigError each, in the order
    a user meets them; sets ``module.algorithm``, ``.codec``, ``.system``, ``.round_policy``, ``.privacy``, ``.local_trainer`` and
    records in the hparams what ran, as plain data. ``module.hparams`` holds the init args already."""
    hp = module.hparams
    check_schedule(hp.personal_eval_every, hp.personal_eval_clients)
    if hp.local_optimizer not in ("sgd", "network") or (hp.local_optimizer == "network" and not is_lightning(network)):
        raise ConfigError("model.local_optimizer", f"got {hp.local_optimizer!r}; choose sgd, or network when the "
                          "network is a LightningModule with configure_optimizers")
    module.algorithm, module.codec = resolve(algorithm, compression)
    module.system, module.round_policy = resolve_system(system), resolve_policy(round_policy)
    if module.round_policy is not None and module.system is None:
        raise ConfigError("model.round_policy", "needs a simulated system to time clients: give model.system")
    check_module_options(hp)
    module.local_trainer = local_trainer_options(local_trainer, hp.parallel_clients)
    module.algorithm.check_with(hp.weighted_aggregation, module.codec)
    module.privacy = resolve_privacy(privacy)  # None is off: nothing below changes
    check_new_clients(hp.personal_new_clients, module.system)
    module.asynchronous = resolve_asynchronous(asynchronous)  # FedBuff; None: synchronous rounds
    choose_parts(module)  # sampler, schedule, runner (fl_lightning.assembly.connector)
    if module.privacy is not None:
        check_privacy(module.privacy, module.algorithm.name, hp.weighted_aggregation, module.codec,
                      getattr(module.algorithm, "rule", "spec"))
        module.save_hyperparameters({**hp, "privacy": module.privacy.spec()})
    module.algorithm.check_network(network)
    if server_optimizer is not None and module.algorithm.changed_server_options():
        raise ConfigError("model.server_optimizer", "sets the server step itself: give its lr/momentum in its "
                          f"init_args and leave model.algorithm.{module.algorithm.changed_server_options()[0]} unset")
    used = network_optimizer_settings(network) if hp.local_optimizer == "network" else {}  # not model.lr & co.
    system_spec = system_specs(module.system, module.round_policy, module.asynchronous)
    module.save_hyperparameters({**module.hparams, "algorithm": module.algorithm.spec(),  # what ran, as plain data
                                 "compression": codec_spec(module.codec), **used,
                                 **system_spec})
