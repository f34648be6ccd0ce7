"""``model.aggregator`` and ``model.attack`` resolved and checked (docs/robustness.md): a name, a class path,
``{class_path, init_args}`` or an object → the part; an unknown or mistyped option is one ConfigError line naming
the part, the key and its real options. ``spec_of`` is the one form a part is recorded in (run id, label,
config.yaml, hparams, checkpoint), whatever way it was written; the default mean is recorded as no aggregator."""
from __future__ import annotations

import difflib
import inspect
from typing import Optional

from fl_lightning.aggregation.base import AGGREGATORS, Aggregator
from fl_lightning.aggregation.server import RobustServer
from fl_lightning.attacks.base import ATTACKS, Attack
from fl_lightning.class_paths import class_path, import_class
from fl_lightning.errors import ConfigError
from fl_lightning.resolve import read_numbers

PARTS = {"aggregator": (AGGREGATORS, Aggregator), "attack": (ATTACKS, Attack)}


def _article(word: str) -> str:
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


def _part_class(key: str, name: str) -> type:
    registry, base = PARTS[key]
    option = f"model.{key}"
    if name in registry:
        return registry[name]
    if "." not in name:
        raise registry.unknown(name, option)
    cls = import_class(name)
    if cls is None or not issubclass(cls, base):
        raise ConfigError(option, f"cannot import {name!r} as {_article(registry.kind)}: give "
                          f"{_article(registry.kind)} name ({', '.join(registry)}) or the class path of a subclass "
                          f"of {class_path(base)}")
    return cls


def _options_of(cls: type) -> dict[str, inspect.Parameter]:
    return {k: p for k, p in inspect.signature(cls.__init__).parameters.items()
            if k != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _build(key: str, cls: type, options: dict):
    """``cls(**options)``, or one line naming the part and the bad key (did you mean) or value."""
    label = getattr(cls, "name", "") or cls.__name__
    known = _options_of(cls)
    for option, value in options.items():
        if option not in known:
            close = difflib.get_close_matches(option, list(known), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise ConfigError(f"model.{key}.{option}", f"{label} has no option {option!r}; {hint}its options: "
                              f"{', '.join(known) or 'none'}")
    options = read_numbers(cls, options, lambda option: f"model.{key}.{option}", label)
    try:
        return cls(**options)
    except (TypeError, ValueError) as err:
        if isinstance(err, ConfigError):
            raise
        raise ConfigError(f"model.{key}", f"{label}({', '.join(f'{k}={v!r}' for k, v in options.items())}): {err}") \
            from None


def resolve(key: str, value, named: Optional[str] = None):
    """``model.<key>`` (aggregator or attack) as its part, or None. ``named``: the class the command line named
    (``--model.attack NAME``), for a value that holds only its options (what the parser left of a bad one)."""
    registry, base = PARTS[key]
    if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
        return None
    if isinstance(value, base):
        return value
    if isinstance(value, type):
        raise ConfigError(f"model.{key}", f"got the class {value.__name__}; pass an instance, {value.__name__}()")
    if isinstance(value, str):
        return _build(key, _part_class(key, value), {})
    if isinstance(value, dict) and "class_path" in value:
        return _build(key, _part_class(key, str(value["class_path"])), dict(value.get("init_args") or {}))
    if isinstance(value, dict) and named is not None:
        return _build(key, _part_class(key, named), dict(value))
    raise ConfigError(f"model.{key}", f"takes {_article(registry.kind)} name ({', '.join(registry)}), a class path "
                      f"or {{class_path, init_args}}, got {value!r}")


def resolve_aggregator(value) -> Optional[Aggregator]:
    """The rule, or None for the default (also an explicit mean with nothing around it: the streamed sums)."""
    aggregator = resolve("aggregator", value)
    return None if aggregator is None or aggregator.streams else aggregator


def resolve_attack(value) -> Optional[Attack]:
    return resolve("attack", value)


def spec_of(part) -> Optional[dict]:
    """The recorded form: ``{class_path: its module path, init_args: its options}``, or None."""
    return None if part is None else {"class_path": class_path(type(part)), "init_args": part.options()}


def settle_robustness(module, aggregator, attack) -> Optional[RobustServer]:
    """The fit's RobustServer (None with the default mean and no attack: the server sums uploads as they come),
    after the refusals that need no data; records the parts in the hparams in their one recorded form."""
    aggregator, attack = resolve_aggregator(aggregator), resolve_attack(attack)
    hp = module.hparams
    if hp.get("aggregator") is not None or hp.get("attack") is not None:  # what ran, as plain data
        module.save_hyperparameters({**hp, "aggregator": spec_of(aggregator), "attack": spec_of(attack)})
    if aggregator is None and attack is None:
        return None
    server = RobustServer(aggregator, attack, module.blocks, hp.clients_per_round)
    buffer = module.asynchronous.buffer_size if module.asynchronous is not None else None  # FedBuff: K a step
    refusal = server.clash(module.privacy is not None, module.asynchronous) or \
        server.group_refusal(buffer or hp.clients_per_round, hp.client_dropout, "K" if buffer else "S")
    if refusal is not None:  # known without data: at construction (refuse(fit) asks again once the fit is described)
        raise refusal
    return server


def settle_config(model: dict, given: list[str]) -> None:
    """The command's ``model.aggregator`` and ``model.attack`` in place as their recorded form (None for the
    default mean), before the run is named: one setting, one id, label and config.yaml, however it was written.
    ``given``: the command line, which names the class when the parser kept only a bad value's options."""
    for key in PARTS:
        if key in model:
            named = next((given[i + 1] for i in range(len(given) - 2, -1, -1)
                          if given[i] == f"--model.{key}" and i + 1 < len(given)), None)
            value = model[key]
            value = value.as_dict() if hasattr(value, "as_dict") else value
            part = resolve(key, value, named)
            model[key] = spec_of(None if key == "aggregator" and part is not None and part.streams else part)


def expand_names(args: list[str]) -> list[str]:
    """``--model.aggregator NAME`` / ``--model.attack NAME`` → the registered class's path, so that its options
    (``--model.aggregator.beta 0.2``) apply to it."""
    out, index = [], 0
    while index < len(args):
        key, inline, value = args[index].partition("=")
        registry = PARTS.get(key.removeprefix("--model."), (None,))[0] if key.startswith("--model.") else None
        if registry is not None and not inline and index + 1 < len(args):
            value, index = args[index + 1], index + 1
        index += 1
        if registry is not None and value in registry:
            out += [key, class_path(registry[value])]
        elif registry is not None:
            out += [key, value]
        else:
            out.append(args[index - 1])
    return out
