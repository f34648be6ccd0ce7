"""What a run is: its identity settings, its id, and the name of its directory (docs/command_line.md, "Resuming and run identity").

A run is identified by everything that changes its numbers: every model setting and every data
setting except where files lie, the seed, the Trainer's arithmetic (precision, gradient
accumulation and clipping, where set) and every callback in ``trainer.callbacks`` that acts on
training or aggregation (an ``FLCallback``, or any callback with ``changes_numbers = True``) with
its init args. Not by the options that may change when it resumes (the budget, evaluation
schedule, logging, parallel clients, threads) nor by paths: the data's identity is its content,
checked at resume by the datamodule's fingerprint. Classes of fl-lightning enter by their class
name, not their module path, so code can move without changing any id; ``model.algorithm`` left out (None) is
the default algorithm as a run that names it records it; other settings that are None are left out, so a new
option whose default is None (off) changes no id either; a built-in network's sizes
(input features, channels, image side, classes) are the data's and are left out too, so the id is
the same before the CLI fills them in from the data (sweep, --ckpt_path last) and after (config.yaml). The id is a digest of
those settings; it is written at the top of the run's config.yaml and into every checkpoint, so
that ``--ckpt_path last`` resumes only the same run and ``report`` joins the version_N pieces of
one run and nothing else. The directory a run logs to is ``<save_dir>/<name>/<label>/version_N``:
the label names the algorithm, the callbacks that change numbers, every model/data option the
command line set, the seed and where it ran if not simulated (``fedavg+proximal,mu=0.1,seed=0``,
``fedavg,seed=0,deployed=flower``; past 80 characters the options that fit — the algorithm's, the data's (its
partition), the others, the network's last —, the seed and the run id), under any
logger name (``--trainer.logger.init_args.name X``: ``X/<label>/version_N``, as ``sweep``'s runs); a version
the command or config gives (``--trainer.logger.init_args.version V``) names the run's folder itself: ``X/V``.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
from pathlib import Path
from typing import Optional

from fl_lightning.aggregation.options import settle_config
from fl_lightning.algorithms import default_spec
from fl_lightning.algorithms.names import import_class
from fl_lightning.callbacks import FLCallback
from fl_lightning.errors import FLUserError
from fl_lightning.models.sizing import SIZES

# Model options a resumed run may change: they steer when to stop, evaluate or test, not the algorithm.
# parallel_clients: the same numbers, faster; channels_last, client_runner, cohort_size: how the numbers are computed
# (like the thread count; the last bits may differ), not what.
TAKES_EFFECT_AT_RESUME = {"max_upload_d", "target_accuracy", "target_metric", "target_mode", "target",
                          "test_every_n_rounds", "eval_train_objective", "eval_every_d", "parallel_clients",
                          "channels_last", "client_runner", "cohort_size", "personal_eval_every",
                          "personal_eval_clients"}
# Data options that say where files lie, not what they hold (the fingerprint checks the content).
DATA_LOCATION = {"root", "cache_dir", "download"}
# Trainer options that change the arithmetic, with the value that changes nothing.
TRAINER_ARITHMETIC = {"precision": ("32-true", "32", 32, None), "accumulate_grad_batches": (1, None),
                      "gradient_clip_val": (0, 0.0, None), "gradient_clip_algorithm": (None, "norm")}
# Model options whose label and id come from the part they resolve to (fl_lightning.aggregation.settle_config).
RECORDED_PARTS = ("aggregator", "attack")
ID_LINE = "# fl-lightning run id: "
MAX_LABEL = 80  # a longer label keeps its first options, the seed and the run id (every setting is in config.yaml)


def _class_name(path: str) -> str:
    """fl-lightning's own classes by their class name (stable when modules move); others by path."""
    cls = import_class(path)
    own = cls is not None and cls.__module__.split(".")[0] == "fl_lightning"
    return cls.__qualname__ if own else path


def _canonical(value):
    """``{class_path: fl_lightning.algorithms.fedbcgd.FedBCGD, ...}`` → ``{class_path: FedBCGD, ...}``, and
    settings that are None (off, or their default) left out, recursively: an option added later whose default
    is None changes no run's id."""
    if isinstance(value, dict):
        out = {key: _canonical(item) for key, item in value.items() if item is not None}
        if isinstance(out.get("class_path"), str):
            out["class_path"] = _class_name(out["class_path"])
        return out
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    return value


def _spec(callback) -> tuple[Optional[str], dict]:
    if isinstance(callback, str):
        return callback, {}
    if isinstance(callback, dict):
        return callback.get("class_path"), dict(callback.get("init_args") or {})
    return None, {}


def changes_numbers(class_path: Optional[str]) -> bool:
    """A callback acts on training or aggregation: an FLCallback, or it says so (``changes_numbers = True``).
    One whose class does not import is counted (it cannot be told apart)."""
    cls = import_class(class_path) if class_path else None
    if cls is None:
        return class_path is not None
    return issubclass(cls, FLCallback) or bool(getattr(cls, "changes_numbers", False))


def trainer_callbacks(config: dict) -> list:
    """``trainer.callbacks`` as given: specs, class paths, or objects (``main(callbacks=...)``, e.g. the ServerApp's)."""
    callbacks = (config.get("trainer") or {}).get("callbacks") or []
    return callbacks if isinstance(callbacks, list) else [callbacks]


def callback_specs(config: dict) -> list[tuple[Optional[str], dict]]:
    """(class path, init args) of each callback in ``trainer.callbacks`` named by its class path, in order."""
    return [_spec(cb) for cb in trainer_callbacks(config)]


def deployment(callback) -> Optional[str]:
    """The deployment a callback (a spec or an object) says the run is on (``deployment``, e.g. ``"flower"``): its
    label then says so, and the run is not in the simulation's folder (the same id: the same numbers)."""
    path = _spec(callback)[0]
    cls = import_class(path) if path else type(callback)
    return getattr(cls, "deployment", None)


def numeric_callbacks(config: dict) -> list[tuple[str, dict]]:
    """(class path, init args) of each callback in ``trainer.callbacks`` that changes numbers, in order."""
    return [(path, args) for path, args in callback_specs(config) if changes_numbers(path)]


@functools.lru_cache(maxsize=256)
def recorded_form(parts: str) -> str:
    """The aggregator and the attack (JSON) as fit records them, however config.yaml spells them (jsonargparse
    writes only the options given); resolved once per spelling (``report`` reads many runs of few parts)."""
    recorded = json.loads(parts)
    try:
        settle_config(recorded, [])
    except FLUserError:
        pass  # a part that no longer resolves: identified as written
    return json.dumps(recorded, sort_keys=True, default=str)


def identity_settings(config: dict) -> dict:
    """The settings that make a run what it is (module docstring)."""
    model = {k: v for k, v in (config.get("model") or {}).items() if k not in TAKES_EFFECT_AT_RESUME}
    data = {k: v for k, v in (config.get("data") or {}).items() if k not in DATA_LOCATION}
    trainer_config = config.get("trainer") or {}
    trainer = {k: trainer_config[k] for k, neutral in TRAINER_ARITHMETIC.items()
               if trainer_config.get(k) not in neutral}
    callbacks = [{"class_path": path, "init_args": args} for path, args in numeric_callbacks(config)]
    if callbacks:
        trainer["callbacks"] = callbacks
    if model.get("algorithm") is None:  # left out: the default algorithm, as a run that names it records it
        model["algorithm"] = default_spec()
    network = model.get("network")
    if isinstance(network, dict) and _class_name(str(network.get("class_path"))) != network.get("class_path"):
        # a built-in network's sizes are the data's (filled in from it, or checked against it): the data
        # settings say them, and the id is the same before and after they are filled in
        model["network"] = {**network, "init_args": {k: v for k, v in (network.get("init_args") or {}).items()
                                                     if k not in SIZES}}
    recorded = json.dumps({part: model[part] for part in RECORDED_PARTS if part in model}, sort_keys=True,
                          default=str)
    model.update(json.loads(recorded_form(recorded)))
    settings = {"model": model, "data": data, "seed_everything": config.get("seed_everything")}
    if trainer:
        settings["trainer"] = trainer
    return _canonical(json.loads(json.dumps(settings, sort_keys=True, default=str)))


def run_id(config: dict) -> str:
    return hashlib.sha1(json.dumps(identity_settings(config), sort_keys=True).encode()).hexdigest()[:12]


def value_at(config: dict, key: str):
    """``config['a']['b']`` for ``'a.b'``; None where absent."""
    node = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _short(value) -> str:
    """A value as a directory name: a class path by its class name, lists and dicts as JSON."""
    if isinstance(value, str) and value.count(".") > 1:
        text = value.rsplit(".", 1)[-1]
    elif isinstance(value, (dict, list)):
        text = json.dumps(value)
    else:
        text = str(value)
    return text.replace("/", "_").replace(" ", "")


def _callback_label(path: str, init_args: dict, sort: bool = True) -> tuple[str, list[str]]:
    """``proximal`` and ``['mu=0.1']``: the class name and the init args that differ from their defaults."""
    cls = import_class(path)
    name = (cls.__name__ if cls is not None else path.rsplit(".", 1)[-1]).lower()
    defaults = {}
    if cls is not None:
        defaults = {key: p.default for key, p in inspect.signature(cls.__init__).parameters.items()
                    if p.default is not inspect.Parameter.empty}
    items = sorted(init_args.items()) if sort else init_args.items()
    return name, [f"{key}={_short(value)}" for key, value in items if key not in defaults or defaults[key] != value]


def _part_label(key: str, spec: Optional[dict]) -> list[str]:
    """``['attack=SignFlip', 'fraction=0.3']``: a recorded part's class name and the options that differ from
    its class's defaults; nothing for None (the default mean, no attack)."""
    if not isinstance(spec, dict):
        return []
    name, given = _callback_label(str(spec["class_path"]), dict(spec.get("init_args") or {}), sort=False)
    cls = import_class(str(spec["class_path"]))
    return [f"{key}={cls.__name__ if cls is not None else name}", *given]


def run_label(config: dict, algorithm: str, args: list[str]) -> str:
    """``<algorithm>[+callback ...][,option=value ...],seed=<seed>`` for the numeric callbacks and the model/data
    options given in ``args``; ``algorithm`` names the codec too (``algorithm_name``: topk, fedprox+topk).
    Data locations (root, cache_dir) never name a run."""
    parts, seen, options, labelled = [algorithm], set(), [], set()
    for path, init_args in numeric_callbacks(config):
        name, given = _callback_label(path, init_args)
        parts[0] += f"+{name}"
        options += given
    rank: dict[str, int] = {}  # a cut label keeps the algorithm's options, then the data's, the others, the network's
    for arg in args:
        key = arg[2:].split("=", 1)[0] if arg.startswith("--") else ""
        group, _, rest = key.partition(".")
        if group not in ("model", "data") or not rest or rest in ("algorithm", "compression") or key in seen:
            continue
        seen.add(key)
        top = rest.split(".")[0]
        if top in TAKES_EFFECT_AT_RESUME or (group == "data" and top in DATA_LOCATION):
            continue
        if group == "model" and top in RECORDED_PARTS:  # named by the part as recorded, however it was written
            if top not in labelled:
                labelled.add(top)
                options += [word for word in _part_label(top, value_at(config, f"model.{top}")) if word not in options]
            continue
        path, words = key, key.split(".")
        owner = value_at(config, ".".join(words[:2]))
        if len(words) > 2 and words[2] != "init_args" and isinstance(owner, dict) and "class_path" in owner:
            path = ".".join(words[:2] + ["init_args"] + words[2:])  # an option of a class: algorithm, policy, ...
        name, value = rest.split(".")[-1], value_at(config, path)
        if path.endswith(".init_args.kind") and len(words) == 3:  # a class named by its kind: the option's name
            name = words[1]
        if isinstance(value, dict) and "class_path" in value:  # a class named by its kind, else its class name
            value = (value.get("init_args") or {}).get("kind") or value["class_path"]
        if f"{name}={_short(value)}" not in options:
            options.append(f"{name}={_short(value)}")
            rank[options[-1]] = 1 if group == "data" else 3 if top == "network" else 0 if top == "algorithm" else 2
    deployed = [f"deployed={name}" for name in map(deployment, trainer_callbacks(config)) if name]
    seed = [f"seed={config.get('seed_everything')}"]
    label = ",".join(parts + options + seed + deployed)
    if len(label) <= MAX_LABEL:
        return label
    tail = [*seed, *deployed, run_id(config)]
    room, head = MAX_LABEL - len(",".join(tail)) - 1, list(parts)
    for word in sorted(options, key=lambda word: rank.get(word, 0)):  # stable: the command's order within a rank
        if len(",".join(head + [word])) > room:
            break  # whole options only, by rank; config.yaml has them all
        head.append(word)
    return ",".join(head + tail)


def read_run_id(config_yaml: Path) -> Optional[str]:
    """The id at the top of a run's config.yaml; None for a run written before ids."""
    try:
        with open(config_yaml) as f:
            first = f.readline()
    except OSError:
        return None
    return first[len(ID_LINE):].strip() if first.startswith(ID_LINE) else None
