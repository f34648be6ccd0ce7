"""The names of the model, data and trainer options, read from the source with ``ast`` — without
importing torch or Lightning — so that a mistyped option is answered at once, with a suggestion.
Only the first name after ``--model.``, ``--data.`` or ``--trainer.`` is checked; what lies
below it (a network's init_args, a logger's) is left to the full parser."""
from __future__ import annotations

import ast
import difflib
import importlib.util
import os
from functools import lru_cache
from typing import Optional

from fl_lightning.errors import ConfigError

HERE = os.path.dirname(os.path.abspath(__file__))
GROUPS = {"model": (os.path.join(HERE, "module.py"), "FederatedModule"),
          "data": (os.path.join(HERE, "data", "datamodule.py"), "FederatedDataModule")}
ALWAYS = {"help"}  # jsonargparse's --model.help CLASS


def _init_args(path: str, class_name: str) -> Optional[set[str]]:
    with open(path) as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    return {a.arg for a in item.args.args + item.args.kwonlyargs if a.arg != "self"}
    return None


@lru_cache(maxsize=1)
def known_options() -> dict[str, set[str]]:
    known = {group: _init_args(*where) for group, where in GROUPS.items()}
    spec = importlib.util.find_spec("pytorch_lightning")  # finds the files, imports nothing
    if spec is not None and spec.origin:
        known["trainer"] = _init_args(os.path.join(os.path.dirname(spec.origin), "trainer", "trainer.py"), "Trainer")
    return {group: names | ALWAYS for group, names in known.items() if names}


def check_option_names(command: list[str]) -> None:
    """One line for ``--model.lrr`` and the like: ``did you mean --model.lr``."""
    known = known_options()
    for arg in command:
        if not arg.startswith("--"):
            continue
        parts = arg[2:].split("=", 1)[0].rstrip("+").split(".")
        if len(parts) < 2 or parts[0] not in known or parts[1] in known[parts[0]]:
            continue
        close = difflib.get_close_matches(parts[1], known[parts[0]], n=1)
        hint = f"did you mean --{parts[0]}.{close[0]}? " if close else ""
        raise ConfigError(f"--{parts[0]}.{parts[1]}", f"no such option; {hint}(every option: fl-lightning fit --help)")
