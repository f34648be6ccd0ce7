"""Registry names on the command line and in YAML: ``--model.algorithm fedpaq`` becomes the class
path jsonargparse instantiates (``fl_lightning.algorithms.fedavg.FedAvg``) and, for a name that
implies a codec, ``--model.compression fl_lightning.compression.QSGD``; ``--model.compression
qsgd`` becomes that codec's class path (``none``: no compression). A name that implies no codec
switches compression off unless the command gives ``--model.compression`` itself. Class names
(``--model.algorithm FedProx``) and class paths pass through unchanged."""
from __future__ import annotations

from typing import Optional

import yaml

from fl_lightning.algorithms import REGISTRY, get
from fl_lightning.compression import CODECS
from fl_lightning.errors import ConfigError

ALGORITHM, COMPRESSION, HELP = "--model.algorithm", "--model.compression", "--model.algorithm.help"


def class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def codec_path(name: Optional[str]) -> Optional[str]:
    """A codec name → its class path; ``none``/None → None."""
    if name is None or str(name).lower() in ("none", "null"):
        return None
    if name not in CODECS:
        raise ConfigError("model.compression", f"unknown codec {name!r}; choose one of {', '.join(CODECS)}, none")
    return class_path(CODECS[name])


def _is_name(value) -> bool:
    return isinstance(value, str) and "." not in value and value[:1].islower()


def expand_args(args: list[str]) -> list[str]:
    """The command line with registry names replaced (module docstring), and every
    ``--model.algorithm.OPTION`` / ``--model.compression.OPTION`` moved after the class it belongs to
    (jsonargparse applies an option to the class chosen so far)."""
    return _options_after_their_class(_expand_names(args))


def _options_after_their_class(args: list[str]) -> list[str]:
    out, held = [], {ALGORITHM: [], COMPRESSION: []}
    index = 0
    while index < len(args):
        arg = args[index]
        key, inline, _ = arg.partition("=")
        owner = next((o for o in (ALGORITHM, COMPRESSION) if key.startswith(o + ".") and key != HELP), None)
        width = 1 if inline or owner is None and key not in (ALGORITHM, COMPRESSION) else 2
        words = args[index:index + width]
        index += width
        if owner is not None:
            held[owner].extend(words)
        else:
            out.extend(words)
    for owner, words in held.items():
        last = max((i for i, word in enumerate(out) if word == owner), default=None)
        position = len(out) if last is None else last + 2
        out[position:position] = words
    return out


def _expand_names(args: list[str]) -> list[str]:
    out, index = [], 0
    gives_compression = any(a == COMPRESSION or a.startswith(COMPRESSION + "=") for a in args)
    while index < len(args):
        arg = args[index]
        key, inline, value = arg.partition("=")
        if not inline and key in (ALGORITHM, COMPRESSION, HELP) and index + 1 < len(args):
            value, index = args[index + 1], index + 1
        index += 1
        if key == ALGORITHM and _is_name(value):
            entry = get(value)
            out += [ALGORITHM, class_path(entry.algorithm)]
            if not gives_compression:
                out += [COMPRESSION, codec_path(entry.codec) or "null"]
        elif key == HELP and _is_name(value):  # jsonargparse's option list of one class
            out += [HELP, class_path(get(value).algorithm)]
        elif key == COMPRESSION and _is_name(value):
            out += [COMPRESSION, codec_path(value) or "null"]
        elif key in (ALGORITHM, COMPRESSION, HELP) and (inline or value):
            out += [key, value]
        else:
            out.append(arg)
    return out


def expand_model_section(model: dict) -> dict:
    """The same for a YAML file's ``model:`` section: ``algorithm: fedbcgd`` or ``algorithm: {class_path:
    fedbcgd, init_args: {...}}``, and ``compression: qsgd`` (or ``{class_path: qsgd, init_args: {...}}``)."""
    algorithm = model.get("algorithm")
    name = algorithm.get("class_path") if isinstance(algorithm, dict) else algorithm
    if _is_name(name):
        entry = get(name)
        init_args = algorithm.get("init_args") if isinstance(algorithm, dict) else None
        model["algorithm"] = {"class_path": class_path(entry.algorithm), **({"init_args": init_args} if init_args
                                                                             else {})}
        if "compression" not in model and entry.codec:
            model["compression"] = {"class_path": codec_path(entry.codec)}
    compression = model.get("compression")
    name = compression.get("class_path") if isinstance(compression, dict) else compression
    if _is_name(name):
        path = codec_path(name)
        init_args = compression.get("init_args") if isinstance(compression, dict) else None
        model["compression"] = None if path is None else {"class_path": path, **({"init_args": init_args}
                                                                                   if init_args else {})}
    return model


def load_yaml(text: str):
    """jsonargparse's loader for parser_mode ``fl_yaml``: YAML, with registry names in a config's model section."""
    data = yaml.safe_load(text)
    if isinstance(data, dict) and isinstance(data.get("model"), dict):
        expand_model_section(data["model"])
    return data


def algorithm_name(algorithm, compression=None) -> str:
    """The registry name of a parsed ``model.algorithm`` (and ``model.compression``): ``fedpaq`` for
    FedAvg + QSGD, ``fedprox+topk`` where no name pairs them."""
    def path_of(spec) -> Optional[str]:
        if spec is None or isinstance(spec, str):
            return spec
        return spec.get("class_path") if isinstance(spec, dict) else getattr(spec, "class_path", None)

    algorithm_path, codec = path_of(algorithm), path_of(compression)
    if algorithm_path is None or _is_name(algorithm_path):
        return algorithm_path or "fedavg"
    codec_name = next((name for name, cls in CODECS.items() if class_path(cls) == codec), None)
    for name, entry in REGISTRY.items():
        if class_path(entry.algorithm) == algorithm_path and entry.codec == codec_name:
            return name
    base = next((name for name, entry in REGISTRY.items()
                 if class_path(entry.algorithm) == algorithm_path and entry.codec is None),
                algorithm_path.rsplit(".", 1)[-1])
    return f"{base}+{codec_name}" if codec_name else base
