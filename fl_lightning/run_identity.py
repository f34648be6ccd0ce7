"""What a run is: its identity settings, its id, and the name of its directory (README, "Run identity").

A run is identified by every model and data setting and the seed — not by the options that may
change when it resumes (the budget, evaluation schedule, trainer and logging options). Its id is a
digest of those settings; it is written at the top of the run's config.yaml and into every
checkpoint, so that ``--ckpt_path last`` resumes only the same run and ``report`` joins the
version_N pieces of one run and nothing else. The directory a run logs to is
``<save_dir>/<name>/<label>/version_N``: the label names the algorithm, every model/data option the
command line set, and the seed (``fedprox,mu=0.5,seed=0``), unless the command gives the logger
its name itself (``--trainer.logger.init_args.name``, as ``sweep`` does).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

# Model options a resumed run may change: they steer when to stop, evaluate or test, not the algorithm.
# parallel_clients: the same numbers, faster; channels_last: how the CPU computes (like the thread count), not what.
TAKES_EFFECT_AT_RESUME = {"max_upload_d", "target_accuracy", "test_every_n_rounds", "eval_train_objective",
                          "eval_every_d", "parallel_clients", "channels_last"}
ID_LINE = "# fl-lightning run id: "
NAME_OPTIONS = ("--trainer.logger.init_args.name", "--trainer.logger.name")


def identity_settings(config: dict) -> dict:
    """The settings that make a run what it is: model and data (less TAKES_EFFECT_AT_RESUME) and the seed."""
    model = {k: v for k, v in (config.get("model") or {}).items() if k not in TAKES_EFFECT_AT_RESUME}
    return json.loads(json.dumps({"model": model, "data": config.get("data") or {},
                                  "seed_everything": config.get("seed_everything")}, sort_keys=True, default=str))


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


def run_label(config: dict, algorithm: str, args: list[str]) -> str:
    """``<algorithm>[,option=value ...],seed=<seed>`` for the model/data options given in ``args``;
    ``algorithm`` names the codec too (``algorithm_name``: topk, fedprox+topk)."""
    parts, seen = [algorithm], set()
    for arg in args:
        key = arg[2:].split("=", 1)[0] if arg.startswith("--") else ""
        group, _, rest = key.partition(".")
        if group not in ("model", "data") or not rest or rest in ("algorithm", "compression") or key in seen:
            continue
        seen.add(key)
        top = rest.split(".")[0]
        if top in TAKES_EFFECT_AT_RESUME:
            continue
        path = key
        for nested in ("model.algorithm.", "model.compression.", "model.network."):
            if key.startswith(nested) and not key.startswith(nested + "init_args."):
                path = nested + "init_args." + key[len(nested):]
        if key == "model.network":
            path = "model.network.class_path"
        parts.append(f"{rest.split('.')[-1]}={_short(value_at(config, path))}")
    parts.append(f"seed={config.get('seed_everything')}")
    label = ",".join(parts)
    return label if len(label) <= 120 else f"{label[:100]}-{run_id(config)}"


def names_its_logger(args: list[str]) -> bool:
    """The command gives the logger's name itself (then the run directory is exactly that)."""
    return any(arg == option or arg.startswith(option + "=") for arg in args for option in NAME_OPTIONS)


def read_run_id(config_yaml: Path) -> Optional[str]:
    """The id at the top of a run's config.yaml; None for a run written before ids."""
    try:
        with open(config_yaml) as f:
            first = f.readline()
    except OSError:
        return None
    return first[len(ID_LINE):].strip() if first.startswith(ID_LINE) else None
