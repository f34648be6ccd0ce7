"""The one place that chooses a fit's parts and refuses the settings they cannot serve together (as Lightning's
accelerator connector chooses a strategy and refuses every clash in one place).

**Priorities** (docs/architecture.md, "Choosing a fit's parts"):

1. An explicit option wins: ``model.schedule``, ``model.sampler`` and ``model.client_runner`` each take a registered
   name, a class path, ``{class_path, init_args}`` or an object (fl_lightning.resolve.resolve_choice).
2. Where a part's own option is unset, other options imply it (``IMPLIED``, first match): the schedule is
   ``fedbuff`` with ``model.asynchronous``, ``simulated`` with ``model.system``, else ``synchronous``; the sampler
   is ``poisson`` with ``model.privacy.sampling poisson``, else ``uniform``; the runner ``serial``, which with
   ``model.parallel_clients`` K > 1 is K threads (``threads``). ``model.client_dropout`` p > 0 wraps the schedule
   in ``ClientDropout`` (fl_lightning.systems.dropout). A schedule that reaches only some clients brings its own
   sampler (the simulated one asks only clients online), so ``model.system`` and ``model.privacy`` own sampling and
   an explicit ``model.sampler`` beside them is refused.
3. Clashes between options are refused when the module is built (``choose_parts``); clashes with the fit — its
   data, network, hooks and codec — once the fit is described (``describe_fit``) and before any run file, by each
   chosen part's ``refuse(fit)``: the schedule's, the sampler's, the runner's, then the aggregator's and the attack's;
   the first is reported, in one line naming the options.
4. Outside ``fit`` (``InProcessServer``, ``AlgorithmStrategy``): the same parts, taken the same ways, chosen here
   (``choose_algorithm``, ``outside_parts``) and refused by the same ``refuse(fit)`` at construction.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable, Optional

from pytorch_lightning.utilities import rank_zero_warn

from fl_lightning.aggregation import RobustServer, resolve_aggregator, resolve_attack
from fl_lightning.algorithms import DEFAULT_ALGORITHM, Algorithm, create
from fl_lightning.assembly.fit import Fit, first_refusal, hook_traits, network_traits
from fl_lightning.attacks.poisoned_data import PoisonedData
from fl_lightning.callbacks import CompressedUpload
from fl_lightning.class_paths import class_path
from fl_lightning.compression import CODECS
from fl_lightning.compression.codecs import Codec
from fl_lightning.errors import ConfigError, refuse_in_one_line
from fl_lightning.federation.hooks import FLCallback
from fl_lightning.federation.local_training import LocalTrainer
from fl_lightning.federation.messages import ReceivedSums
from fl_lightning.federation.runners import RUNNERS
from fl_lightning.federation.seams import SAMPLERS, SCHEDULES, ClientRunner, RoundSchedule, Sampler, SerialRunner
from fl_lightning.federation.seeding import run_seed_set
from fl_lightning.personalization.evaluation import new_client_ids
from fl_lightning.privacy import ClientDP
from fl_lightning.privacy.callback import check_before_fit as check_privacy
from fl_lightning.privacy.control import NoisedControlSum
from fl_lightning.resolve import Choice, read_numbers, resolve_choice, resolve_part
from fl_lightning.systems.dropout import ClientDropout
from fl_lightning.systems.fedbuff import Asynchronous

IMPLIED = {  # a part's option unset: (what implies it, the registered name), first match
    "schedule": (("model.asynchronous", "fedbuff"), ("model.system", "simulated"), (None, "synchronous")),
    "sampler": (("model.privacy.sampling poisson", "poisson"), (None, "uniform")),
}


@dataclass(frozen=True)
class Parts:
    """The round's parts as chosen from the options (built once the fit is known)."""

    sampler: Choice
    schedule: Choice
    runner: Choice


def _implied(kind: str, given: set) -> str:
    return next(name for option, name in IMPLIED[kind] if option is None or option in given)


def choose_parts(module) -> Parts:
    """The sampler, schedule and runner the options name or imply, with the clashes between options refused in
    one line; sets ``module.parts`` and ``module.schedule_epoch``. Module options are resolved already."""
    hp = module.hparams
    given = {option for option, on in (("model.asynchronous", module.asynchronous is not None),
                                       ("model.system", module.system is not None),
                                       ("model.privacy.sampling poisson", module.privacy is not None and
                                        module.privacy.sampling == "poisson")) if on}
    schedule = resolve_choice(hp.get("schedule"), SCHEDULES, RoundSchedule, "model.schedule") or \
        resolve_choice(_implied("schedule", given), SCHEDULES, RoundSchedule, "model.schedule")
    timed = schedule.cls.times_clients
    if timed and module.system is None and hp.get("schedule") is None:  # implied by model.asynchronous
        raise ConfigError("model.asynchronous", "needs a simulated system for the clients' times: give model.system")
    if timed and module.system is None:
        raise ConfigError("model.schedule", f"{schedule.label} times clients on a simulated system: give "
                          "model.system (e.g. --model.system mobile)")
    if module.system is not None and not timed:
        timers = ", ".join(name for name in SCHEDULES if SCHEDULES[name].times_clients)
        raise ConfigError("model.schedule", f"{schedule.label} does not time clients, so model.system would "
                          f"simulate nothing; choose one that does ({timers}) or unset model.system")
    if module.asynchronous is not None and schedule.cls is not SCHEDULES["fedbuff"]:
        raise ConfigError("model.schedule", f"model.asynchronous is FedBuff's; leave model.schedule unset, not "
                          f"{schedule.label}")
    if schedule.cls is SCHEDULES["fedbuff"] and module.asynchronous is None:
        module.asynchronous = Asynchronous()  # by name: FedBuff's defaults (recorded as model.asynchronous)
    if hp.get("sampler") is not None and (module.system is not None or module.privacy is not None):
        owner = "model.system samples the available clients" if module.system is not None else \
            "model.privacy samples by its own option (model.privacy.sampling)"
        raise ConfigError("model.sampler", f"{owner}; leave model.sampler unset")
    sampler = resolve_choice(hp.get("sampler") or _implied("sampler", given), SAMPLERS, Sampler, "model.sampler")
    runner = resolve_choice(hp.get("client_runner") or "serial", RUNNERS, ClientRunner, "model.client_runner")
    if runner.cls is SerialRunner and hp.parallel_clients > 1:
        runner = Choice(RUNNERS["threads"], runner.options, None, "threads")
    module.parts = Parts(sampler, schedule, runner)
    module.schedule_epoch = schedule.cls.epoch
    for key, choice in (("sampler", sampler), ("schedule", schedule), ("client_runner", runner)):
        if hp.get(key) is not None and choice.instance is not None:  # an object from Python: recorded by class path
            hp[key] = choice.label
    return module.parts


def attached_trainer(module):
    """The module's Trainer, or None before it is attached to one (the command line's check before any run file)."""
    try:
        return module.trainer
    except RuntimeError:
        return None


def fit_hooks(module) -> list[FLCallback]:
    """The fit's FLCallbacks: the Trainer's once the module is attached to one, else the module's own."""
    trainer = attached_trainer(module)
    fl = [cb for cb in (trainer.callbacks if trainer is not None else []) if isinstance(cb, FLCallback)]
    return fl or [cb for cb in fit_callbacks(module) if isinstance(cb, FLCallback)]


def brought_runner(module, trainer=None) -> Optional[ClientRunner]:
    """A ClientRunner object a Lightning callback of ``trainer`` (default: the module's) hands over as its
    ``client_runner`` (deploy's ``FlowerClients``: the SuperNodes), else None: the options' choice trains the
    clients."""
    trainer = trainer or attached_trainer(module)
    return next((cb.client_runner for cb in (trainer.callbacks if trainer is not None else [])
                 if isinstance(getattr(cb, "client_runner", None), ClientRunner)), None)


def describe_fit(module, datamodule, trainer=None) -> Fit:
    """The fit's description (fl_lightning.assembly.fit), from the module and its set-up data module (and the
    Trainer that will fit them, before the module is attached to it: the command line's check)."""
    hp, clients = module.hparams, datamodule.clients
    held_out = new_client_ids(datamodule.num_clients, hp.get("personal_new_clients"))  # never trained (pval_new/*)
    counts = datamodule.histogram() if datamodule.num_classes else None
    privacy, trainer = module.privacy, trainer or attached_trainer(module)
    return Fit(
        num_clients=datamodule.num_clients, per_round=hp.clients_per_round,
        samples=tuple(clients.num_samples(i) for i in range(len(clients))),
        label_counts=None if counts is None else tuple(tuple(int(c) for c in row) for row in counts.tolist()),
        held_out=tuple(held_out), batch_size=hp.batch_size, local_epochs=hp.local_epochs,
        local_optimizer=hp.local_optimizer, local_trainer=module.local_trainer is not None,
        parallel_clients=hp.parallel_clients, cohort_size=hp.get("cohort_size"), client_dropout=hp.client_dropout,
        privacy_sampling=None if privacy is None else privacy.sampling,
        population=module.system.population(datamodule.num_clients) if module.system is not None else None,
        round_policy=module.round_policy, asynchronous=module.asynchronous, schedule_epoch=module.schedule_epoch,
        algorithm=module.algorithm.name, algorithm_hooks=tuple(hook_traits(cb) for cb in module.algorithm.callbacks()),
        hooks=tuple(hook_traits(cb) for cb in fit_hooks(module)),
        codec_stateless=None if module.codec is None else module.codec.stateless,
        codec_deployable=None if module.codec is None else module.codec.deployable,
        processes=trainer.world_size if trainer is not None else 1,
        network=network_traits(module.flat, module.local_loss, clients, hp.batch_size))


def refuse_clashes(parts: Parts, fit: Fit, robust: Optional[RobustServer] = None,
                   runner: Optional[type[ClientRunner]] = None) -> None:
    """Every chosen part's refusal of the fit, the first one raised (schedule, sampler, runner — ``runner`` if the
    clients train elsewhere than the options say: the deployment's —, then the aggregator's and the attack's:
    fl_lightning.aggregation.server); before that, init_args its ``from_fit`` does not take."""
    for option, choice, leading in (("model.schedule", parts.schedule, ()), ("model.sampler", parts.sampler, ()),
                                    ("model.client_runner", parts.runner, (None,))):
        if choice.instance is None:
            try:
                builder = inspect.signature(choice.cls.from_fit)
                builder.bind(*leading, fit, **choice.options)
                if any(p.kind is p.VAR_KEYWORD for p in builder.parameters.values()):  # the default: to __init__
                    inspect.signature(choice.cls).bind_partial(**choice.options)
            except TypeError as err:
                raise ConfigError(option, f"{choice.label} takes no such init_args ({err}); give the options its "
                                  "from_fit takes") from None
    runner = runner or parts.runner.cls
    first_refusal(parts.schedule.cls.refuse(fit), parts.sampler.cls.refuse(fit), runner.refuse(fit),
                  robust.refuse(fit) if robust is not None else None)


def _built(choice: Choice, fit: Fit, *leading):
    if choice.instance is not None:  # an object: a runner is attached to the loop's trainer (leading)
        return choice.instance.attach(*leading) if leading else choice.instance
    return choice.cls.from_fit(*leading, fit, **choice.options)


def round_parts(parts: Parts, fit: Fit) -> tuple[Sampler, RoundSchedule]:
    """The sampler and the schedule, built from the fit; the schedule may ask whom it can reach instead (the
    round simulator: the clients online); client dropout wraps the schedule."""
    schedule = _built(parts.schedule, fit)
    if fit.client_dropout > 0:
        schedule = ClientDropout(schedule, fit.client_dropout)
    return schedule.sampler(_built(parts.sampler, fit)), schedule


def runner_for(choice: Choice, fit: Fit) -> Callable[[LocalTrainer], ClientRunner]:
    """The runner's constructor from the loop's LocalTrainer. A callback that declares ``thread_safe = False``
    keeps the clients one at a time, with a line that says so."""

    def build(trainer: LocalTrainer) -> ClientRunner:
        unsafe = [type(cb).__name__ for cb in trainer.callbacks if not cb.thread_safe]
        if unsafe and choice.cls is not SerialRunner:
            chosen = f"model.client_runner {choice.label}" if choice.label != "threads" else \
                f"model.parallel_clients {fit.parallel_clients}"
            rank_zero_warn(f"{', '.join(unsafe)} declares thread_safe = False: clients train one at a time "
                           f"({chosen} ignored)")
            return SerialRunner(trainer)
        return _built(choice, fit, trainer)

    return build


def received_for(module) -> Callable[..., ReceivedSums]:
    """Where a round's uploads go: kept whole for ``model.aggregator``'s robust rule, else summed as they arrive."""
    robust = getattr(module, "robust", None)
    return robust.received_sums if robust is not None else ReceivedSums


def fit_callbacks(module) -> list:
    """The fit's callbacks, in the order they run: the algorithm's hooks; with ``model.privacy`` client-level DP
    after them and, with control variates, Δc's noise before them; the codec on what they upload; robust
    aggregation last (fl_lightning.aggregation), and a data attack's relabelled data (fl_lightning.attacks)."""
    algorithm = module.algorithm.callbacks()
    privacy = first = []
    if module.privacy is not None:  # after the algorithm, before the codec; Δc's noise before the algorithm reads it
        dp = ClientDP(module.privacy, controls=any(hook_traits(cb).uploads_control_variates for cb in algorithm))
        privacy, first = [dp], ([NoisedControlSum(dp)] if dp.controls else [])
    robust = [module.robust] if getattr(module, "robust", None) is not None else []
    return (first + algorithm + privacy + ([CompressedUpload(module.codec)] if module.codec is not None else []) +
            robust + data_parts(module))


def data_parts(module) -> list[PoisonedData]:
    """The fit's parts that change its clients' data: a data attack's relabelled malicious clients (an attack that
    forges no upload; fl_lightning.attacks). Where the data is: the fit's Trainer, or a Flower node's copy."""
    robust = getattr(module, "robust", None)
    return [PoisonedData(robust)] if robust is not None and robust.attack is not None \
        and not robust.attack.forges_uploads else []


def check_before_fit(module, num_clients: int) -> None:
    """Refusals that need the data's client count, before any run file is written: client-level DP's δ, target ε
    and budget (fl_lightning.privacy)."""
    if module.privacy is not None:
        check_privacy(module.privacy, num_clients, module.hparams.clients_per_round, module.trainer.max_epochs)


def chosen_runner(module, fit: Optional[Fit]) -> Callable[[LocalTrainer], ClientRunner]:
    """The fit's runner: the one a callback brings (``brought_runner``), else the options' choice."""
    brought = brought_runner(module)
    return brought.attach if brought is not None else runner_for(module.parts.runner, fit)


# -- a federation outside fit: InProcessServer and AlgorithmStrategy (fl_lightning.assembly.outside) ----------------
# They take fit's parts the ways fit takes them, and refuse here, at construction, in one line naming their own
# argument (``InProcessServer(aggregator=...)``): the same parts' ``refuse(fit)`` as fit's, then what no client of
# the user's own Trainer can serve.

@dataclass(frozen=True)
class OutsideParts:
    """The parts beside the algorithm a server outside fit runs: the sampler (None: uniform) and its recorded form,
    the robust server (None: the streamed mean)."""

    sampler: Optional[Sampler]
    sampler_spec: Optional[dict]
    robust: Optional[RobustServer]


def outside_field(field: str, error: ConfigError) -> ConfigError:
    """``model.attack.fraction: …`` → ``InProcessServer(attack=...): …``, raised in one line."""
    if not error.field.startswith("model."):
        return refuse_in_one_line(error)
    key = error.field.split(".")[1]
    return refuse_in_one_line(ConfigError(f"{field}({key}=...)", str(error)[len(error.field) + 2:]))


def choose_algorithm(algorithm, compression, field: str = "model") -> tuple[Algorithm, Optional[Codec]]:
    """The algorithm (None: FedAvg; a name, with its implied codec; its options as a mapping with ``name``; an
    object) and the codec (a name or object; None: the implied one; ``"none"``: none). ``field``: ``"model"`` names
    the options as fit does (``model.algorithm``), a server's name as its arguments (``InProcessServer(algorithm=...)``)."""
    option, codec_option = ((f"{field}.algorithm", f"{field}.compression") if field == "model" else
                            (f"{field}(algorithm=...)", f"{field}(compression=...)"))
    implied = None
    if isinstance(algorithm, dict) and "name" in algorithm:  # {"name": ..., option: value}: the command line's
        options = {key: value for key, value in algorithm.items() if key != "name"}
        base, implied = create(algorithm["name"])
        try:
            algorithm = type(base)(**read_numbers(type(base), options, lambda _: option, algorithm["name"]))
        except ConfigError as err:
            raise refuse_in_one_line(err) from None
        except TypeError as err:
            raise refuse_in_one_line(ConfigError(option, f"{err}; `fl-lightning algorithms {algorithm['name']}` lists "
                                                 "its options")) from None
    elif algorithm is None or isinstance(algorithm, str):
        algorithm, implied = create(algorithm or DEFAULT_ALGORITHM)
    algorithm = resolve_part(algorithm, Algorithm, option, "a fl_lightning.algorithms.Algorithm or a name", off=())
    if compression == "none":
        return algorithm, None

    def codec_named(name: str) -> Codec:
        if name not in CODECS:
            raise ConfigError(codec_option, f"unknown codec {name!r}; choose one of {', '.join(CODECS)}, none")
        return CODECS[name]()

    codec = resolve_part(compression, Codec, codec_option, "a fl_lightning.compression.codecs.Codec or a name",
                         codec_named)
    return algorithm, codec if codec is not None else implied


def client_hooks(algorithm: Algorithm, codec: Optional[Codec]) -> tuple[list, list]:
    """The FLCallbacks a client runs outside fit (the user's Trainer, a user's ClientApp): the algorithm's, and the
    codec's on what they upload; run in that order, as fit's (``fit_callbacks``)."""
    return algorithm.callbacks(), [CompressedUpload(codec)] if codec is not None else []


def accumulation_refusal(algorithm: Algorithm, callbacks) -> Optional[str]:
    """Why a client's Trainer may not accumulate micro-batches (a hook that counts local steps τ_i), or None."""
    if any(hook_traits(cb).counts_local_steps for cb in callbacks):
        return (f"{type(algorithm).__name__} normalises each update by the client's local optimizer steps τ_i; with "
                "accumulated micro-batches a step is several minibatches and τ_i would be wrong: set "
                "accumulate_grad_batches=1")
    return None


def outside_parts(field: str, fit: Fit, blocks, seed: int, aggregator=None, attack=None, sampler=None,
                  privacy=None, runner=SerialRunner) -> OutsideParts:
    """The sampler, aggregator and attack as fit takes them, built from ``fit`` and refused by the same
    ``refuse(fit)`` (and the runner's: ``protocol.NodeClients``' for AlgorithmStrategy); then what the user's own
    Trainers cannot serve: client-level DP (it clips on the client), an algorithm that pools every client's data,
    S < N blocks, an attack on the data (the user's loaders hold it)."""
    if privacy is not None:
        raise refuse_in_one_line(ConfigError(f"{field}(privacy=...)", "client-level DP clips every update on its "
                                             "client, and here the clients are your own Trainers, which "
                                             "fl-lightning does not clip yet: run it with fl-lightning fit"))
    if any(hook.pools_clients_data for hook in fit.algorithm_hooks):
        raise refuse_in_one_line(ConfigError(f"{field}(algorithm=...)", f"{fit.algorithm} trains one model on every "
                                             "client's data pooled in one place, which no federated client holds; "
                                             "run it with fl-lightning fit"))
    if blocks is not None and fit.per_round < blocks.num_blocks:
        raise refuse_in_one_line(ConfigError(f"{field}(per_round=...)", f"S={fit.per_round} < N={blocks.num_blocks} "
                                             "blocks: every block needs a client each round; raise per_round (and "
                                             "clients) or lower the algorithm's num_blocks"))
    try:
        choice = resolve_choice(sampler, SAMPLERS, Sampler, "model.sampler")
        first_refusal(choice.cls.refuse(fit) if choice is not None else None, runner.refuse(fit))
        robust_aggregator, robust_attack = resolve_aggregator(aggregator), resolve_attack(attack)
    except ConfigError as error:
        raise outside_field(field, error) from None
    built, spec = None, None
    if choice is not None:
        built = choice.instance or choice.cls.from_fit(fit, **choice.options)
        spec = {"class_path": class_path(choice.cls), "init_args": dict(choice.options)}
    if robust_aggregator is None and robust_attack is None:
        return OutsideParts(built, spec, None)
    if robust_attack is not None and not robust_attack.forges_uploads:
        raise refuse_in_one_line(ConfigError(f"{field}(attack=...)", f"{robust_attack.name} changes the clients' "
                                             "data, which your own data loaders hold: relabel the malicious shards "
                                             "yourself, or run it with fl-lightning fit"))
    robust = RobustServer(robust_aggregator, robust_attack, blocks, fit.per_round)
    refusal = robust.refuse(fit)
    if refusal is not None:
        raise outside_field(field, refusal)
    with run_seed_set(seed):
        robust.start(fit.num_clients, fit.per_round)
    return OutsideParts(built, spec, robust)
