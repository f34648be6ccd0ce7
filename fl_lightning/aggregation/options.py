"""``model.aggregator`` and ``model.attack`` resolved and checked (docs/robustness.md): a name, a class path,
``{class_path, init_args}`` or an object → the part; what they cannot serve is one ConfigError line."""
from __future__ import annotations

from typing import Optional

from fl_lightning.aggregation.base import AGGREGATORS, Aggregator
from fl_lightning.aggregation.server import RobustServer
from fl_lightning.attacks.base import ATTACKS, Attack
from fl_lightning.errors import ConfigError
from fl_lightning.resolve import resolve_part

NAMED = {"--model.aggregator": AGGREGATORS, "--model.attack": ATTACKS}


def _by_name(registry, option: str, value, base: type):
    """A registered name, or ``{class_path: NAME, init_args}``, → the instance; anything else to resolve_part."""
    if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
        return None
    if isinstance(value, dict) and value.get("class_path") in registry:
        return registry[value["class_path"]](**(value.get("init_args") or {}))
    if isinstance(value, str) and "." not in value:
        if value not in registry:
            raise registry.unknown(value, option)
        return registry[value]()
    return resolve_part(value, base, option, f"a {registry.kind} name ({', '.join(registry)}) or a class path",
                        from_name=lambda path: _import_part(path, base, option))


def _import_part(path: str, base: type, option: str):
    return resolve_part({"class_path": path}, base, option, "a class path")


def resolve_aggregator(value) -> Optional[Aggregator]:
    return _by_name(AGGREGATORS, "model.aggregator", value, Aggregator)


def resolve_attack(value) -> Optional[Attack]:
    return _by_name(ATTACKS, "model.attack", value, Attack)


def settle_robustness(module, aggregator, attack) -> Optional[RobustServer]:
    """The fit's RobustServer (None with the default mean and no attack: the server sums uploads as they come),
    after the refusals; records the parts in the hparams as plain data."""
    aggregator, attack = resolve_aggregator(aggregator), resolve_attack(attack)
    if aggregator is not None and type(aggregator).__name__ == "Mean":
        aggregator = None  # today's streamed sums, bit for bit
    hp = module.hparams
    if hp.get("aggregator") is not None or hp.get("attack") is not None:  # what ran, as plain data
        module.save_hyperparameters({**hp, "aggregator": aggregator.spec() if aggregator else None,
                                     "attack": attack.spec() if attack else None})
    if aggregator is None and attack is None:
        return None
    if module.privacy is not None:
        raise ConfigError("model.aggregator" if aggregator is not None else "model.attack",
                          "is not combined with model.privacy: clipping and noise change what a robust aggregate "
                          "or an attack means; leave one of them unset")
    if module.asynchronous is not None or getattr(module, "schedule_name", None) == "fedbuff":
        if attack is not None:
            raise ConfigError("model.attack", "needs synchronous rounds; leave model.asynchronous unset")
    if aggregator is not None:
        blocks = module.blocks.num_blocks if module.blocks is not None else 1
        fewest = hp.clients_per_round // blocks if blocks > 1 else hp.clients_per_round
        where = (f"a block of {fewest} uploads (S={hp.clients_per_round} over N={blocks} blocks)" if blocks > 1
                 else f"a round of S={hp.clients_per_round} uploads")
        aggregator.check_group(fewest, where)
    return RobustServer(aggregator, attack, module.blocks)


def expand_names(args: list[str]) -> list[str]:
    """``--model.aggregator NAME`` / ``--model.attack NAME`` → the registered class's path, so that its options
    (``--model.aggregator.beta 0.2``) apply to it."""
    out, index = [], 0
    while index < len(args):
        key, inline, value = args[index].partition("=")
        registry = NAMED.get(key)
        if registry is not None and not inline and index + 1 < len(args):
            value, index = args[index + 1], index + 1
        index += 1
        if registry is not None and value in registry:
            cls = registry[value]
            out += [key, f"{cls.__module__}.{cls.__qualname__}"]
        elif registry is not None:
            out += [key, value]
        else:
            out.append(args[index - 1])
    return out
