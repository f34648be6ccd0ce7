"""The Flower app directory that ``flwr run`` bundles: a pyproject.toml naming fl-lightning's
ServerApp and ClientApp, with the run config's keys and their defaults (fl_lightning.deploy.server_app).

    python -m fl_lightning.deploy.project DIR     writes DIR/pyproject.toml
"""
from __future__ import annotations

import os
import sys

PUBLISHER, NAME = "fl-lightning", "fl-lightning-app"
FAB_ID = f"{PUBLISHER}/{NAME}"  # how the SuperNodes' runs name this app (fl_lightning.deploy.executor)
APP_TOML = f"""\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "{NAME}"
version = "1.0.0"
description = "fl-lightning's federated algorithms as a Flower app"
license = "Apache-2.0"
dependencies = ["fl-lightning[flower]"]

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "{PUBLISHER}"

[tool.flwr.app.components]
serverapp = "fl_lightning.deploy.server_app:app"
clientapp = "fl_lightning.deploy.client_app:app"

[tool.flwr.app.config]
config = "configs/quickstart.yaml"
args = ""
workdir = ""
join-timeout = 120.0
round-timeout = 600.0
result-file = ""
"""


def write_app(directory: str) -> str:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "pyproject.toml")
    with open(path, "w") as f:
        f.write(APP_TOML)
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m fl_lightning.deploy.project DIR")
    print(write_app(sys.argv[1]))
