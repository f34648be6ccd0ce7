"""The one resolver of a configurable part: ``None | name | {class_path, init_args} | mapping | object`` → the
part, or one ``ConfigError`` line naming the option. Every option that takes a part (``model.algorithm``,
``model.compression``, ``model.system``, ``model.round_policy``, ``model.asynchronous``, ``model.privacy``)
goes through ``resolve_part``; the round's seams, built only once the fit is known (``model.sampler``,
``model.schedule``, ``model.client_runner``), through ``resolve_choice``."""
from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from fl_lightning.class_paths import import_class
from fl_lightning.errors import ConfigError


def resolve_part(value, base: type, option: str, wanted: str, from_name: Optional[Callable[[str], object]] = None,
                 off: tuple = ("none",)):
    """``value`` as a ``base`` instance. None (or a name in ``off``) → None; a ``base`` → itself; a name →
    ``from_name(name)``; ``{class_path, init_args}`` (a checkpoint's hparams) → that class, if a ``base``; any
    other mapping → ``base(**mapping)`` (unknown keys named). ``wanted`` says what the option takes."""
    if value is None or (isinstance(value, str) and value in off):
        return None
    if isinstance(value, base):
        return value
    if isinstance(value, type) and issubclass(value, base):
        raise ConfigError(option, f"got the class {value.__name__}; pass an instance, {value.__name__}() or "
                          f"{value.__name__}(option=value)")
    if isinstance(value, str) and from_name is not None:
        return from_name(value)
    if isinstance(value, dict) and "class_path" in value:
        cls = import_class(value["class_path"])
        if cls is None or not (isinstance(cls, type) and issubclass(cls, base)):
            raise ConfigError(option, f"cannot import {value['class_path']!r} as a {base.__name__}")
        return cls(**(value.get("init_args") or {}))
    if isinstance(value, dict):
        try:
            return base(**value)
        except TypeError as err:
            raise ConfigError(option, f"{err}; {option} takes {wanted}") from None
    raise ConfigError(option, f"needs {wanted}, got {type(value).__name__}")


def number_types(cls: type, option: str) -> set:
    """The number types ``cls``'s ``option`` takes, from its annotation (else its default): {int}, {float}, both,
    or none — what a string given for it (a script's, a command line's) is read as."""
    parameter = inspect.signature(cls).parameters.get(option)
    try:
        hint = typing.get_type_hints(cls.__init__).get(option)
    except Exception:  # a user's class whose annotations do not resolve here
        hint = None
    if hint is None:
        types = {type(parameter.default)} if parameter is not None else set()
    else:
        types = set(typing.get_args(hint) or (hint,))
    return set() if str in types or bool in types else {t for t in types if t in (int, float)}


def read_numbers(cls: type, options: dict, field, owner: str = "") -> dict:
    """``options`` with a string given for a number option read as that number, or one ConfigError naming
    ``field(option)`` ("[owner's option] takes a number, got 'abc'")."""
    out = dict(options)
    for option, value in options.items():
        wanted = number_types(cls, option) if isinstance(value, str) else set()
        if wanted:
            try:
                out[option] = float(value) if float in wanted or "." in value else int(value)
            except ValueError:
                subject = f"{owner}'s {option} " if owner else ""
                raise ConfigError(field(option), f"{subject}takes a number, got {value!r}") from None
    return out


@dataclass(frozen=True)
class Choice:
    """A seam's part as chosen, before the fit is known: its class and options (built later by
    ``cls.from_fit(fit, **options)``), or the object given; ``label``: how the options named it."""

    cls: type
    options: dict = field(default_factory=dict)
    instance: Any = None
    label: str = ""


def resolve_choice(value, registry, base: type, option: str) -> Optional[Choice]:
    """``value`` — a registered name, a class path, ``{class_path, init_args}`` (also as a JSON/YAML string) or a
    ``base`` object — as a ``Choice``; None → None. An unknown name lists the registered ones and says that a class
    path works."""
    if value is None:
        return None
    if isinstance(value, base):
        return Choice(type(value), {}, value, f"{type(value).__module__}.{type(value).__qualname__}")
    if isinstance(value, str) and value.lstrip().startswith("{"):
        import yaml

        value = yaml.safe_load(value)
    if isinstance(value, dict) and "class_path" in value and set(value) <= {"class_path", "init_args"}:
        options = value.get("init_args") or {}
        if not isinstance(options, dict):
            raise ConfigError(option, f"init_args must be a mapping of option: value, got {options!r}")
        return Choice(_part_class(value["class_path"], registry, base, option), dict(options), None,
                      str(value["class_path"]))
    if isinstance(value, str):
        return Choice(_part_class(value, registry, base, option), {}, None, value)
    raise ConfigError(option, f"takes a name ({', '.join(registry)}), a class path or {{class_path, init_args}}, "
                      f"got {type(value).__name__}")


def _part_class(name: str, registry, base: type, option: str) -> type:
    if name in registry:
        return registry[name]
    if "." not in name:
        raise registry.unknown(name, option)
    cls = import_class(name)
    if cls is None:
        raise ConfigError(option, f"cannot import {name!r}; give a registered name ({', '.join(registry)}) or a full "
                          "class path such as my_package.module.MyClass (its module on PYTHONPATH)")
    if not issubclass(cls, base):
        raise ConfigError(option, f"{name} is not a {base.__module__}.{base.__qualname__}; subclass it")
    return cls
