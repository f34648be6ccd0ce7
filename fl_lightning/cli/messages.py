"""jsonargparse's reports of a value or an option it refuses, as one line: the option by its full name, what it got
and what it takes (docs/command_line.md). ``plain_message(report)`` returns None for a report it does not read;
``lightning_cli.argument_error`` then goes on with its own reading (unknown options of an algorithm or codec, a
class that does not import).
"""
from __future__ import annotations

import inspect
import re
from typing import Optional

from fl_lightning.algorithms.names import import_class

KEY = re.compile(r'Parser key "([^"]+)":')
CLASS = re.compile(r"Problem with given class_path '([^']+)':")
GIVEN = re.compile(r"(?:Given value|Got value): (.*)")
TYPE_WORDS = {"int": "an integer", "float": "a number", "bool": "true/false", "str": "a string",
              "NoneType": "null", "Sequence": "a list (e.g. [200, 200])", "list": "a list", "dict": "a mapping"}
HINTS = {"seed_everything": " (the run's seed, e.g. 0)", "trainer.max_epochs": " (rounds; -1: until the budget)"}


def type_words(text: str) -> str:
    """``[<class 'int'>, <class 'NoneType'>]`` or ``<class 'float'>`` → ``an integer or null``."""
    names = [name.rsplit(".", 1)[-1] for name in re.findall(r"<class '([^']+)'>", text)]
    words = list(dict.fromkeys(TYPE_WORDS.get(name, name) for name in names))
    return " or ".join(words) if words else "another value"


def class_options(path: str) -> str:
    cls = import_class(path)
    if cls is None:
        return ""
    names = [name for name in inspect.signature(cls.__init__).parameters if name not in ("self", "args", "kwargs")]
    return f"; its options: {', '.join(names)}" if names else "; it takes no options"


def plain_message(report: str) -> Optional[str]:
    """One line for a refused value (a type error, also inside a class's options, from a config file or the command
    line), an option a class (model.network, a data set, a logger) does not accept, or a class whose required
    arguments are missing; None for anything else."""
    lines = [line.strip() for line in report.splitlines() if line.strip()]
    text = "\n".join(lines)
    outer = KEY.search(text)
    if outer is None:
        return None
    key = outer.group(1)
    inside = CLASS.search(text)
    if inside is None:  # a plain option: "Expected a <class 'float'>. Got value: abc", or a Union of scalars
        given = GIVEN.findall(text)
        if not given or "NestedArg" in given[-1]:
            return None
        subtypes = text.find("Subtypes:")
        takes = type_words(text[subtypes:text.find("\n", subtypes)] if subtypes >= 0 else text)
        return f"{key}: got {given[-1].strip()!r}; it takes {takes}{HINTS.get(key, '')}"
    path = inside.group(1)
    name = path.rsplit(".", 1)[-1]
    rest = text[inside.end():]
    nested = KEY.search(rest)
    if nested is not None:  # a value of the class's option
        option = nested.group(1)
        body = rest[nested.end():]
        given = GIVEN.search(body)
        if given is None:
            return None
        subtypes = body.find("Subtypes:")
        takes = type_words(body[subtypes:body.find("\n", subtypes)] if subtypes >= 0 else body[:given.start()])
        return f"{key}.{option}: got {given.group(1).strip()!r}; {name}'s {option} takes {takes}"
    unaccepted = re.search(r"Option '(\w+)' is not accepted", rest)
    if unaccepted is not None:
        if key in ("model.algorithm", "model.compression"):
            return None  # lightning_cli names the algorithms or codecs that have it
        option = unaccepted.group(1)
        return f"{key}.{option}: {name} has no option {option!r}{class_options(path)}"
    required = re.search(r"the following arguments are required: (.+)", rest)
    if required is not None:
        names = [n.strip() for n in required.group(1).split(",")]
        given = " ".join(f"--{key}.init_args.{n} V" for n in names)
        built_in = " or a built-in network (fl-lightning fills in its sizes from the data: fl_lightning.models)" \
            if key == "model.network" else ""
        return f"{key}: {path} needs {', '.join(names)}, which nothing fills in; give them ({given}){built_in}"
    return None
