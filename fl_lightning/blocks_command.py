"""``fl-lightning blocks --config X [--model.option V ...]``: the model's block division, like the
paper's Tables 7–11, without Lightning: the config's model section is merged by hand (YAML files
in order, then dotted overrides), the network is built from its class path without weights, and
the division printed. Anything this reading does not cover (a network given without
``class_path``, nested class paths) goes to the full LightningCLI path instead."""
from __future__ import annotations

import importlib
from typing import Optional

import yaml

from fl_lightning.errors import ConfigError


class NeedsFullParser(Exception):
    """The command is beyond the light reading: let LightningCLI parse it."""


def _merge(into: dict, update: dict) -> dict:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict) and "class_path" not in value:
            _merge(into[key], value)
        else:
            into[key] = value
    return into


def model_section(args: list[str]) -> dict:
    """The ``model`` settings: --config files in order, then --model.* overrides."""
    model: dict = {}
    index = 0
    while index < len(args):
        arg = args[index]
        key, _, inline = arg.partition("=")
        value: Optional[str] = inline if inline else (args[index + 1] if index + 1 < len(args) else None)
        index += 1 if inline else 2
        if key == "--config":
            with open(value) as f:
                _merge(model, (yaml.safe_load(f) or {}).get("model") or {})
        elif key.startswith("--model."):
            path = key[len("--model."):].split(".")
            if path[:2] == ["network", "init_args"]:
                path = ["network", "init_args", *path[2:]]
            elif path == ["network"]:
                path = ["network", "class_path"]
            node = model
            for name in path[:-1]:
                node = node.setdefault(name, {})
            node[path[-1]] = yaml.safe_load(value)
        elif key.startswith("--"):
            continue  # data, trainer and seed options do not change the division
        else:
            raise NeedsFullParser(arg)
    return model


def build_network(spec) -> "object":
    if not isinstance(spec, dict) or "class_path" not in spec:
        raise NeedsFullParser("network")
    init_args = spec.get("init_args") or {}
    if any(isinstance(v, dict) and "class_path" in v for v in init_args.values()):
        raise NeedsFullParser("nested class_path")
    module_name, _, class_name = spec["class_path"].rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError):
        raise ConfigError("model.network", f"cannot import {spec['class_path']!r}") from None
    from fl_lightning.models.timm_models import architecture_only

    with architecture_only():
        return cls(**init_args)


def print_blocks(args: list[str]) -> None:
    try:
        model = model_section(args)
        net = build_network(model.get("network"))
    except NeedsFullParser:
        from fl_lightning.lightning_cli import print_blocks as full

        full(args)
        return
    from fl_lightning.blocks import build_partition

    blocks = build_partition(net, model.get("block_division", "auto"), model.get("num_blocks"),
                             model.get("shared_block", True))
    print(blocks.table())
