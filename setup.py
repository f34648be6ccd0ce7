"""Packages are found, not listed (pyproject.toml holds everything else): every package under
fl_lightning/, and callbacks/ shipped inside it as fl_lightning.callbacks (PyPI already has an
unrelated top-level package called ``callbacks``, so none is installed under that name)."""
from setuptools import find_packages, setup

setup(packages=find_packages(include=["fl_lightning", "fl_lightning.*"]) + ["fl_lightning.callbacks"],
      package_dir={"fl_lightning.callbacks": "callbacks"})
