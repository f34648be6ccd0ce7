"""What a user sees of a run: the round progress bar, and the PNG every fit leaves behind."""
import csv
import subprocess
import sys
from pathlib import Path

import torch
from PIL import Image

from fl_lightning.cli import main

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")
FL = str(Path(sys.executable).parent / "fl-lightning")


def test_progress_bar_counts_rounds_without_epoch_or_validation_bars():
    run = subprocess.run([FL, "fit", "--config", QUICKSTART, "--trainer.max_epochs", "4",
                          "--trainer.enable_model_summary", "false"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    frames = [frame.strip() for frame in run.stdout.replace("\r", "\n").splitlines() if frame.strip()]
    bar = [frame for frame in frames if frame.startswith("round")]
    assert bar and "4/4" in bar[-1] and "val/acc=" in bar[-1] and "comm/upload_d=4.00" in bar[-1]
    assert not any(frame.startswith(("Epoch", "Validation")) for frame in frames)


def test_every_fit_leaves_a_png_with_the_whole_curve_after_resume():
    common = ["fit", "--config", QUICKSTART, "--trainer.enable_progress_bar", "false"]
    assert main([*common, "--trainer.max_epochs", "3"]) == 0
    run_dir = Path("runs/quickstart/fedavgm,seed=0/version_0")
    image = Image.open(run_dir / "accuracy_vs_upload_d.png")
    assert [round(v) for v in image.info["dpi"]] == [300, 300] and image.size[0] > 1500  # print resolution
    assert (run_dir / "accuracy_vs_upload_d.pdf").read_bytes().startswith(b"%PDF")
    (ckpt,) = (run_dir / "checkpoints").glob("*.ckpt")
    curve = torch.load(ckpt, weights_only=True)["federated"]["curve"]
    assert [point[0] for point in curve["val"]] == [1.0, 2.0, 3.0] and [p[0] for p in curve["test"]] == [3.0]
    assert main([*common, "--trainer.max_epochs", "5", "--ckpt_path", str(ckpt)]) == 0
    resumed = Path("runs/quickstart/fedavgm,seed=0/version_0")  # the run goes on in its checkpoint's folder
    assert not Path("runs/quickstart/fedavgm,seed=0/version_1").exists()
    assert (resumed / "accuracy_vs_upload_d.png").exists()
    with open(resumed / "metrics.csv") as f:
        assert [row["round"] for row in csv.DictReader(f)] == ["1.0", "2.0", "3.0", "4.0", "5.0"]
    # Lightning keeps the checkpoint a fit resumed from beside its new one
    assert sorted(p.name for p in (resumed / "checkpoints").glob("*.ckpt")) == ["epoch=2-step=3.ckpt", "epoch=4-step=5.ckpt"]
    curve = torch.load(resumed / "checkpoints" / "epoch=4-step=5.ckpt", weights_only=True)["federated"]["curve"]
    assert [point[0] for point in curve["val"]] == [1.0, 2.0, 3.0, 4.0, 5.0]  # the curve is never split
    assert [point[0] for point in curve["test"]] == [3.0, 5.0]
