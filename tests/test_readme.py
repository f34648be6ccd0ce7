"""The README's opening counts what is registered."""
from pathlib import Path

from fl_lightning.algorithms.base import REGISTRY
from fl_lightning.compression import CODECS

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_counts_every_registered_algorithm_and_codec():
    text = " ".join(README.read_text().split())
    assert f"{len(REGISTRY)} algorithms by name" in text and f"and {len(list(CODECS))} codecs that compress" in text
