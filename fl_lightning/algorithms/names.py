"""Registry names on the command line and in YAML: ``--model.algorithm fedpaq`` becomes the class
path jsonargparse instantiates (``fl_lightning.algorithms.fedavg.FedAvg``) and, for a name that
implies a codec, ``--model.compression fl_lightning.compression.codecs.QSGD``; ``--model.compression
qsgd`` becomes that codec's class path (``none``: no compression). A name that implies no codec
switches compression off unless the command gives ``--model.compression`` itself. Class names
(``--model.algorithm FedProx``) and class paths pass through unchanged."""
from __future__ import annotations

from typing import Optional

import yaml
from jsonargparse import set_loader

from fl_lightning.algorithms import DEFAULT_ALGORITHM, REGISTRY, get
from fl_lightning.class_paths import class_path, current_path, import_class  # noqa: F401  (re-exported)
from fl_lightning.compression import CODECS
from fl_lightning.errors import ConfigError

ALGORITHM, COMPRESSION, HELP = "--model.algorithm", "--model.compression", "--model.algorithm.help"


def codec_path(name: Optional[str]) -> Optional[str]:
    """A codec name → its class path; ``none``/None → None."""
    if name is None or str(name).lower() in ("none", "null"):
        return None
    if name not in CODECS:
        raise ConfigError("model.compression", f"unknown codec {name!r}; choose one of {', '.join(CODECS)}, none")
    return class_path(CODECS[name])


def _is_name(value) -> bool:
    return isinstance(value, str) and "." not in value and value[:1].islower()


# Options named by a word whose object has options of its own: ``--model.round_policy deadline
# --model.round_policy.deadline_s 30`` means the class with that word as its first option.
NAMED_OBJECTS = {"--model.system": ("fl_lightning.systems.model.SystemModel", "profile"),
                 "--model.round_policy": ("fl_lightning.systems.policies.RoundPolicy", "kind"),
                 "--model.asynchronous": ("fl_lightning.systems.fedbuff.Asynchronous", "kind")}


def _named_objects(args: list[str]) -> list[str]:
    out, index = [], 0
    while index < len(args):
        key, inline, value = args[index].partition("=")
        if key in NAMED_OBJECTS and not inline and index + 1 < len(args):
            value, index = args[index + 1], index + 1
        index += 1
        has_options = any(a.startswith(key + ".") for a in args)
        if key in NAMED_OBJECTS and _is_name(value) and has_options:
            path, field = NAMED_OBJECTS[key]
            out += [key, path, f"{key}.{field}", value]
        else:
            out += [key, value] if key in NAMED_OBJECTS and not inline else [args[index - 1]]
    return out


def expand_args(args: list[str]) -> list[str]:
    """The command line with registry names replaced (module docstring), and every
    ``--model.algorithm.OPTION`` / ``--model.compression.OPTION`` moved after the class it belongs to
    (jsonargparse applies an option to the class chosen so far)."""
    args = _named_objects(args)
    args = [current_path(arg) if arg.startswith("fl_lightning.") else arg for arg in args]
    out, held = [], {ALGORITHM: [], COMPRESSION: []}
    gives_compression = any(a == COMPRESSION or a.startswith(COMPRESSION + "=") for a in args)
    index = 0
    while index < len(args):
        key, inline, value = args[index].partition("=")
        owner = next((o for o in held if key.startswith(o + ".") and key != HELP), None)
        takes_value = key in (ALGORITHM, COMPRESSION, HELP) or owner is not None
        if takes_value and not inline and index + 1 < len(args):
            value, index = args[index + 1], index + 1
        index += 1
        if owner is not None:
            held[owner] += [key, value] if value or inline else [key]
        elif key == ALGORITHM and _is_name(value):
            entry = get(value)
            out += [ALGORITHM, class_path(entry.algorithm)]
            if not gives_compression:
                out += [COMPRESSION, codec_path(entry.codec) or "null"]
        elif key == HELP and _is_name(value):  # jsonargparse's option list of one class
            out += [HELP, class_path(get(value).algorithm)]
        elif key == COMPRESSION and _is_name(value):
            out += [COMPRESSION, codec_path(value) or "null"]
        elif takes_value and (value or inline):
            out += [key, value]
        else:
            out.append(args[index - 1])
    for owner, words in held.items():
        last = max((i for i, word in enumerate(out) if word == owner), default=None)
        position = len(out) if last is None else last + 2
        out[position:position] = words
    return out


def _named(spec) -> tuple[Optional[str], Optional[dict]]:
    """(class_path or name, init_args) of a YAML value: a string, or {class_path, init_args}."""
    if isinstance(spec, dict):
        return spec.get("class_path"), spec.get("init_args")
    return spec, None


def _spec(path: Optional[str], init_args: Optional[dict]) -> Optional[dict]:
    return None if path is None else {"class_path": path, **({"init_args": init_args} if init_args else {})}


def expand_model_section(model: dict) -> dict:
    """The same for a YAML file's ``model:`` section: ``algorithm: fedbcgd`` or ``algorithm: {class_path:
    fedbcgd, init_args: {...}}``, and ``compression: qsgd`` (or ``{class_path: qsgd, init_args: {...}}``)."""
    name, init_args = _named(model.get("algorithm"))
    if _is_name(name):
        entry = get(name)
        model["algorithm"] = _spec(class_path(entry.algorithm), init_args)
        if "compression" not in model and entry.codec:
            model["compression"] = _spec(codec_path(entry.codec), None)
    name, init_args = _named(model.get("compression"))
    if _is_name(name):
        model["compression"] = _spec(codec_path(name), init_args)
    return model


def _current_class_paths(value):
    if isinstance(value, dict):
        return {key: current_path(item) if key == "class_path" and isinstance(item, str) else _current_class_paths(item)
                for key, item in value.items()}
    return [_current_class_paths(item) for item in value] if isinstance(value, list) else value


def load_yaml(text: str):
    """jsonargparse's loader for parser_mode ``fl_yaml``: YAML, with registry names in a config's model section."""
    data = _current_class_paths(yaml.safe_load(text))
    if isinstance(data, dict) and isinstance(data.get("model"), dict):
        expand_model_section(data["model"])
    return data


set_loader("fl_yaml", load_yaml, exceptions=(yaml.YAMLError,))  # parser_mode "fl_yaml": the command's and a node's


def algorithm_name(algorithm, compression=None) -> str:
    """The registry name of a parsed ``model.algorithm`` (and ``model.compression``): ``fedpaq`` for
    FedAvg + QSGD, ``fedprox+topk`` where no name pairs them."""
    def path_of(spec) -> Optional[str]:
        if spec is None or isinstance(spec, str):
            return spec
        return spec.get("class_path") if isinstance(spec, dict) else getattr(spec, "class_path", None)

    algorithm_path, codec = path_of(algorithm), path_of(compression)
    if algorithm_path is None or _is_name(algorithm_path):
        name = algorithm_path or DEFAULT_ALGORITHM
        if codec is None or name not in REGISTRY or REGISTRY[name].codec is not None:
            return name
        algorithm_path = class_path(REGISTRY[name].algorithm)  # a name plus a codec: as for a class path
    codec_name = next((name for name, cls in CODECS.items() if class_path(cls) == codec), None)
    for name, entry in REGISTRY.items():
        if class_path(entry.algorithm) == algorithm_path and entry.codec == codec_name:
            return name
    base = next((name for name, entry in REGISTRY.items()
                 if class_path(entry.algorithm) == algorithm_path and entry.codec is None),
                algorithm_path.rsplit(".", 1)[-1])
    return f"{base}+{codec_name}" if codec_name else base
