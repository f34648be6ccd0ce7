"""Reading runs from their folders (``fl-lightning report``, kept runs): which folders are runs, their version_N
pieces joined into one curve, the settings in their config.yaml.

A resumed run goes on in its checkpoint's folder; several version_N pieces of one run id (a run resumed by an older
release, or two fits of the same run started at once) are joined round by round, the later version's row replacing
an earlier one's, and ``merge_note`` says so in one line.
"""
from __future__ import annotations

import csv
import functools
import re
from pathlib import Path
from typing import Optional

import yaml

from fl_lightning.errors import ConfigError
from fl_lightning.runs.identity import identity_settings, read_run_id, run_id


@functools.lru_cache(maxsize=256)
def _parsed(path: str, changed_ns: int) -> dict:
    with open(path) as f:
        return yaml.safe_load(f) or {}


def read_config(path: Path) -> dict:
    """A run's config.yaml, parsed once per version of the file (report reads it for the id, the settings and
    whether the run ended); {} where absent. Do not change the mapping it returns."""
    return _parsed(str(path), path.stat().st_mtime_ns) if path.is_file() else {}


def version_number(path: Path) -> int:
    return int(path.name.split("_")[1]) if path.name.split("_")[-1].isdigit() else -1


def is_fit(version: Path) -> bool:
    """A fit's metrics.csv logs rounds; validate/test outputs do not."""
    with open(version / "metrics.csv") as f:
        return "round" in f.readline().split(",")


def numeric_order(path: Path) -> list:
    """Sort key that reads the numbers in a run's path as numbers: num_blocks=2 before num_blocks=10."""
    return [float(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+(?:\.\d+)?)", str(path)))]


def find_runs(paths: list[Path]) -> tuple[dict[Path, list[Path]], list[str]]:
    """Every run under ``paths`` (a folder of version_N/ pieces, or one version_N/ given itself) → its fit
    pieces, oldest first; and the validate/test outputs it ignored."""
    runs: dict[Path, list[Path]] = {}
    for path in paths:
        pieces = [path / "metrics.csv"] if (path / "metrics.csv").is_file() else sorted(path.rglob("*/metrics.csv"))
        for metrics in pieces:  # version_N/ is a piece of its parent; another folder (W&B's <project>/<id>) a run
            own = metrics.parent == path or not metrics.parent.name.startswith("version_")
            run = metrics.parent if own else metrics.parent.parent
            runs.setdefault(run, []).append(metrics.parent)
    ignored = [str(v) for versions in runs.values() for v in versions if not is_fit(v)]
    runs = {run: sorted({v for v in versions if is_fit(v)}, key=version_number) for run, versions in runs.items()}
    return {run: versions for run, versions in sorted(runs.items(), key=lambda item: numeric_order(item[0]))
            if versions}, ignored


def check_one_run(run: Path, versions: list[Path]) -> None:
    """The version_N pieces of a folder are joined only when they are one run resumed (same run id, or
    for runs written before ids the same identity settings); otherwise one line naming them."""
    ids = {v.name: version_id(v) for v in versions}
    if len(set(ids.values())) > 1:
        named = ", ".join(f"{name} ({identity})" for name, identity in ids.items())
        raise ConfigError("report", f"{run} holds different runs ({named}); give their version_N folders "
                          "separately, or move them apart")


def version_id(version: Path) -> str:
    """The run id at the top of ``version``'s config.yaml; for runs written before ids, the digest of its settings."""
    config = version / "config.yaml"
    if not config.is_file():
        return "no config.yaml"
    return read_run_id(config) or run_id(read_config(config))


def read_curve(versions: list[Path]) -> list[dict]:
    by_round = {}
    for version in versions:
        with open(version / "metrics.csv") as f:
            for row in csv.DictReader(f):
                values = {k: float(v) for k, v in row.items() if k and v not in ("", None)}
                if "round" in values:
                    by_round[values["round"]] = values
    return [by_round[r] for r in sorted(by_round)]


def unfinished(versions: list[Path], curve: list[dict]) -> Optional[str]:
    """``rounds 4/10, unfinished`` for a run that did not end — its newest piece still holds ``.fit.lock`` (its fit
    runs, or was killed), or, without the curve every fit leaves when it ends (a kept run: metrics.csv and
    config.yaml only), it logged fewer rounds than its config.yaml plans and no budget (``model.max_upload_d``, the
    privacy ε budget) stopped it; None for a finished run (or one without a config.yaml to tell)."""
    from fl_lightning.runs.leftovers import LOCK
    from fl_lightning.runs.plot import CURVE_FILE

    config_path = versions[-1] / "config.yaml"
    config = read_config(config_path)
    planned = (config.get("trainer") or {}).get("max_epochs")
    done = int(curve[-1]["round"]) if curve else 0
    shown = f"rounds {done}/{planned}" if isinstance(planned, int) and planned > 0 else f"rounds {done}"
    if (versions[-1] / LOCK).is_file():
        return f"{shown}, unfinished"
    if (versions[-1] / CURVE_FILE).is_file():  # every fit that ended (any stop) leaves its curve
        return None
    model = config.get("model") or {}
    budget = model.get("max_upload_d")
    stopped = (budget is not None and curve and curve[-1].get("comm/upload_d", 0) >= budget - 1e-6) or \
        (model.get("privacy") or {}).get("epsilon_budget") is not None
    if isinstance(planned, int) and 0 < planned and done < planned and not stopped and config:
        return f"{shown}, unfinished"
    return None


def read_settings(versions: list[Path]) -> Optional[dict]:
    """The run's identity settings (fl_lightning.runs.identity: model, data less paths, the Trainer's
    arithmetic and numeric callbacks) from its config.yaml (newest piece), flattened to dotted keys;
    None when absent."""
    configs = [v / "config.yaml" for v in versions if (v / "config.yaml").is_file()]
    if not configs:
        return None
    flat: dict = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict) and value:
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), inner)
        else:
            flat[prefix] = value

    walk("", identity_settings(read_config(configs[-1])))
    return flat


def merge_note(run: Path, versions: list[Path]) -> Optional[str]:
    """One line when a run's curve joins several version_N pieces: each one's rounds, and which one's rows were
    taken where they overlap (the newest)."""
    if len(versions) < 2:
        return None
    curves = [read_curve([version]) for version in versions]
    spans = [f"{v.name} rounds {c[0]['round']:g}–{c[-1]['round']:g}" if c else f"{v.name} no rounds"
             for v, c in zip(versions, curves)]
    overlap = any(a and b and b[0]["round"] <= a[-1]["round"] for a, b in zip(curves, curves[1:]))
    taken = f"where rounds overlap, {versions[-1].name}'s rows are taken" if overlap else "no round is in two"
    return f"{run}: merged {len(versions)} versions of one run ({', '.join(spans)}); {taken}"
