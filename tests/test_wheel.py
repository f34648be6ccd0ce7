"""The wheel built from the repository is complete: installed outside the repository, it
imports every subpackage and runs a fit — not only the editable install of ``make``."""
import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_every_module_and_fits_outside_the_repository(tmp_path):
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(tmp_path / "dist")],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("fl_lightning-*.whl")
    shipped = {name for name in zipfile.ZipFile(wheel).namelist() if name.endswith(".py")}
    expected = {str(p.relative_to(ROOT)) for p in (ROOT / "fl_lightning").rglob("*.py")}
    expected |= {"fl_lightning/callbacks/" + str(p.relative_to(ROOT / "callbacks")) for p in (ROOT / "callbacks").rglob("*.py")}
    assert shipped == expected
    site = tmp_path / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                               capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr[-2000:]
    script = ("import fl_lightning, fl_lightning.algorithms, fl_lightning.callbacks, fl_lightning.compression;"
              "print(fl_lightning.__file__);"
              "from fl_lightning.cli import main;"
              f"raise SystemExit(main(['fit', '--config', {str(ROOT / 'configs' / 'quickstart.yaml')!r},"
              "'--model.algorithm', 'fedbcgd', '--trainer.max_epochs', '1', '--trainer.enable_progress_bar', 'false']))")
    env = {**os.environ, "PYTHONPATH": str(site)}
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    ran = subprocess.run([sys.executable, "-c", script], cwd=outside, env=env, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.splitlines()[0].startswith(str(site))
    assert "fl-lightning: 1 rounds" in ran.stdout
