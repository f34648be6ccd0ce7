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

PACKAGE = os.path.dirname(importlib.util.find_spec("fl_lightning").origin)  # found, not imported (it is light)
GROUPS = {"model": (os.path.join(PACKAGE, "module.py"), "FederatedModule"),
          "data": (os.path.join(PACKAGE, "data", "datamodule.py"), "FederatedDataModule")}
ALWAYS = {"help"}  # jsonargparse's --model.help CLASS
# Module options that became options of an algorithm or a codec: where each one lives now.
MOVED = {"server_lr": "--model.algorithm.server_lr V", "server_momentum": "--model.algorithm.server_momentum V",
         "fedprox_mu": "--model.algorithm fedprox --model.algorithm.mu V",
         "feddc_alpha": "--model.algorithm feddc --model.algorithm.alpha V",
         "control_variate": "--model.algorithm.control_variate V (scaffold, fedbcgd_plus)",
         "control_rule": "--model.algorithm.rule V (scaffold, fedbcgd_plus)",
         "control_keep": "--model.algorithm.keep V (fedbcgd_plus)",
         "shared_control_coefficient": "--model.algorithm.shared_coefficient V (fedbcgd_plus)",
         "variance_reduction": "--model.algorithm.variance_reduction V (fedbcgd_plus)",
         "num_blocks": "--model.algorithm.num_blocks V (fedbcgd*)",
         "block_division": "--model.algorithm.block_division V (fedbcgd*)",
         "shared_block": "--model.algorithm.shared_block V (fedbcgd*)", "compression_k": "--model.compression.k V",
         "qsgd_levels": "--model.compression.levels V", "qsgd_bucket_size": "--model.compression.bucket_size V",
         "error_feedback": "--model.compression.error_feedback V"}


def moved(option: str) -> Optional[str]:
    """One line for a module option that moved into the algorithm or the codec, else None."""
    if option not in MOVED:
        return None
    return (f"--model.{option}: moved to {MOVED[option]} (in YAML under model.algorithm.init_args / "
            "model.compression.init_args; fl-lightning algorithms NAME lists an algorithm's options)")


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
        if parts[0] == "model" and moved(parts[1]):
            raise ConfigError(f"--model.{parts[1]}", moved(parts[1]).split(": ", 1)[1])
        close = difflib.get_close_matches(parts[1], known[parts[0]], n=1)
        hint = f"did you mean --{parts[0]}.{close[0]}? " if close else ""
        raise ConfigError(f"--{parts[0]}.{parts[1]}", f"no such option; {hint}(every option: fl-lightning fit --help)")


def pop_count(command: list[str], option: str, meaning: str = "") -> tuple[Optional[int], list[str]]:
    """``--option N`` or ``--option=N`` taken out of ``command``: (N, the other words); (None, command) without it.
    N must be an integer ≥ 1 (else one line naming the option; ``meaning`` says what N counts)."""
    value, rest, i = None, [], 0
    while i < len(command):
        word = command[i]
        if word == option or word.startswith(option + "="):
            text = word.split("=", 1)[1] if "=" in word else (command[i + 1] if i + 1 < len(command) else "")
            i += 1 if "=" in word else 2
            if not text.isdigit() or int(text) < 1:
                raise ConfigError(option, f"must be an integer ≥ 1{meaning}, got {text!r}")
            value = int(text)
            continue
        rest.append(word)
        i += 1
    return value, rest
