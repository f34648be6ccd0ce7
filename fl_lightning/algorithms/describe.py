"""``fl-lightning algorithms [NAME]``: every registered algorithm with its summary, upload size and
options, or one algorithm's options with their types, defaults and meaning."""
from __future__ import annotations

import inspect
import re

from fl_lightning.algorithms import REGISTRY, Algorithm, Entry, get
from fl_lightning.algorithms.names import import_class
from fl_lightning.compression import CODECS


def option_help(cls: type) -> dict[str, str]:
    """``name → one line`` from the ``Args:`` sections of the class's docstring and its bases' (the
    first class that describes an option wins: a subclass documents only what it changes)."""
    lines: dict[str, str] = {}
    for owner in cls.__mro__:
        doc = owner.__dict__.get("__doc__") or ""
        args = doc.split("Args:", 1)[1] if "Args:" in doc else ""
        current = None
        for line in inspect.cleandoc(args).splitlines() if args else []:
            match = re.match(r"(\w+): (.*)", line)
            if match:
                current = match.group(1) if match.group(1) not in lines else None
                if current:
                    lines[current] = match.group(2).strip()
            elif current and line.strip():
                lines[current] += " " + line.strip()
    return lines


def entry_for(name: str) -> Entry:
    """A registry name, a registered class's name, or the class path of any Algorithm (your own)."""
    if name in REGISTRY:
        return REGISTRY[name]
    for entry in REGISTRY.values():
        if entry.codec is None and name in (entry.algorithm.__name__, f"{entry.algorithm.__module__}."
                                                                       f"{entry.algorithm.__qualname__}"):
            return entry
    cls = import_class(name)
    if cls is not None and issubclass(cls, Algorithm):
        return Entry(name, cls, None, cls.summary, cls.upload)
    return get(name)  # one line naming the choices


def describe(name: str) -> str:
    entry = entry_for(name)
    cls = entry.algorithm
    out = [f"{name}: {entry.summary}", f"  class: {cls.__module__}.{cls.__qualname__}"
           + (f" with --model.compression {entry.codec}" if entry.codec else ""), f"  upload per client and round: "
           f"{entry.upload} floats", "  options (--model.algorithm.OPTION VALUE):"]
    helps = option_help(cls)
    for option, param in inspect.signature(cls.__init__).parameters.items():
        if option == "self":
            continue
        kind = getattr(param.annotation, "__name__", str(param.annotation).strip("'"))
        out.append(f"    {option} ({kind}, default {param.default!r}): {helps.get(option, '')}")
    if len(out) == 4:
        out.append("    (none)")
    if entry.codec:
        codec = CODECS[entry.codec]
        out.append(f"  codec {entry.codec} ({codec.__name__}) options (--model.compression.OPTION VALUE): "
                   + ", ".join(f"{o} (default {p.default!r})" for o, p in inspect.signature(codec.__init__)
                               .parameters.items() if o != "self"))
    return "\n".join(out)


def main(args: list[str]) -> int:
    if args[:1] in (["-h"], ["--help"]):
        print("usage: fl-lightning algorithms [NAME]   every algorithm, or NAME's options")
        return 0
    if args:
        print(describe(args[0]))
        return 0
    width = max(map(len, REGISTRY))
    for name, entry in REGISTRY.items():
        options = ", ".join(entry.algorithm.option_names()) or "-"
        codec = f" [+{entry.codec}]" if entry.codec else ""
        print(f"{name:<{width}}  {entry.summary}{codec}\n{'':<{width}}  upload {entry.upload}; options: {options}")
    print("\none algorithm's options: fl-lightning algorithms NAME; use: --model.algorithm NAME "
          "--model.algorithm.OPTION VALUE")
    return 0


def markdown_table() -> str:
    """docs/algorithms.md's algorithm table, made from the registry (tests/test_algorithm_api.py keeps them equal)."""
    rows = ["| name | what it is | class | options (`--model.algorithm.OPTION`) | upload per client and round |",
            "| --- | --- | --- | --- | --- |"]
    for name, entry in REGISTRY.items():
        cls = entry.algorithm
        where = f"`{cls.__name__}` ({cls.__module__.rsplit('.', 1)[-1]}.py)"
        if entry.codec:
            where += f" + `--model.compression {entry.codec}`"
        options = ", ".join(f"`{option}`" for option in cls.option_names()) or "—"
        upload = entry.upload.replace("|", "\\|")
        rows.append(f"| `{name}` | {entry.summary} | {where} | {options} | {upload} |")
    return "\n".join(rows)


def fit_description() -> str:
    """What ``fit --help`` shows first: the algorithms and the options most runs set."""
    names = "; ".join(f"{name}: {entry.summary}" for name, entry in REGISTRY.items())
    return ("Train; one epoch is one communication round. Algorithm: --model.algorithm NAME "
            "[--model.algorithm.OPTION VALUE] (fl-lightning algorithms NAME lists its options), NAME one of — "
            f"{names}. Main options: --model.clients_per_round S, --model.local_epochs E, --model.batch_size B, "
            "--model.lr, --model.compression topk|randk|qsgd, --model.max_upload_d, --data.dataset, "
            "--data.num_clients M, --data.dirichlet_rho, --trainer.max_epochs (rounds), --seed_everything, "
            "--ckpt_path last (resume this run). Every option follows.")
