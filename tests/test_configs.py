"""Every YAML in configs/ parses and runs one short round on a small stand-in the test builds.

Stand-ins go through the ordinary code paths: idx files in torchvision's MNIST/EMNIST layout,
a tiny image tree for ImageFolder / Tiny ImageNet, and a saved state dict as the pretrained
ViT file (loaded through timm's ``pretrained_cfg_overlay``).
"""
import csv
import struct
from pathlib import Path

import pytest
import timm
import torch
from PIL import Image

from fl_lightning.cli import FederatedCLI, main

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs").rglob("*.yaml"))
SMALL = ["--trainer.max_epochs", "1", "--trainer.check_val_every_n_epoch", "1", "--trainer.enable_progress_bar",
         "false", "--trainer.enable_model_summary", "false", "--trainer.enable_checkpointing", "false", "--data.num_clients", "6", "--data.samples_per_client",
         "2", "--model.clients_per_round", "6", "--model.batch_size", "2", "--model.local_epochs", "1", "--data.eval_batch_size", "8"]


def write_idx(folder: Path, prefix: str, images: torch.Tensor, labels: torch.Tensor) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    n, h, w = images.shape
    (folder / f"{prefix}images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, n, h, w) + images.numpy().tobytes())
    (folder / f"{prefix}labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, n) + labels.numpy().tobytes())


def idx_standin(root: Path, dataset: str) -> None:
    g = torch.Generator().manual_seed(0)
    for part, n in (("train", 24), ("t10k" if dataset == "mnist" else "test", 8)):
        images = torch.randint(0, 256, (n, 28, 28), generator=g, dtype=torch.uint8)
        labels = (torch.arange(n) % 3).to(torch.uint8)
        if dataset == "mnist":
            write_idx(root / "MNIST" / "raw", f"{part}-", images, labels)
        else:
            write_idx(root / "EMNIST" / "raw", f"emnist-byclass-{part}-", images, labels)


def image_tree(folder: Path, classes=("a", "b", "c"), per_class=5, nested=False) -> None:
    g = torch.Generator().manual_seed(0)
    for label in classes:
        target = folder / label / "images" if nested else folder / label
        target.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = torch.randint(0, 256, (32, 32, 3), generator=g, dtype=torch.uint8)
            Image.fromarray(pixels.numpy()).save(target / f"{label}_{i}.png")


def standin_args(config: str, tmp: Path) -> list[str]:
    text = (ROOT / config).read_text()
    dataset = next(line.split(":")[1].strip() for line in text.splitlines() if line.strip().startswith("dataset:"))
    args = ["--data.cache_dir", str(tmp / "cache")]
    if dataset in ("mnist", "emnist"):
        idx_standin(tmp / "data", dataset)
        args += ["--data.root", str(tmp / "data"), "--data.download", "false"]
    elif dataset == "tinyimagenet":
        root = tmp / "data" / "tiny-imagenet-200"
        image_tree(root / "train", classes=("n01", "n02", "n03"), nested=True)
        image_tree(root / "val" / "images" / "x", classes=("v",), per_class=3)
        for path in (root / "val" / "images" / "x" / "v").iterdir():
            path.rename(root / "val" / "images" / path.name)
        (root / "val" / "val_annotations.txt").write_text(
            "".join(f"v_{i}.png\tn0{i + 1}\t0\t0\t32\t32\n" for i in range(3)))
        args += ["--data.root", str(tmp / "data"), "--data.download", "false", "--model.network.init_args.num_classes", "3"]
    elif dataset in ("cifar10", "cifar100", "imagefolder"):
        image_tree(tmp / "data" / "train")
        image_tree(tmp / "data" / "test", per_class=2)
        args += ["--data.dataset", "imagefolder", "--data.root", str(tmp / "data")]  # built-in networks: 3 classes
        args += ["--model.network.init_args.num_classes", "3"] if "TimmModel" in text else []  # from the data
    if "TimmModel" in text:  # a small ViT and a saved state dict standing in for the hub weights
        weights = tmp / "vit.pth"
        torch.save(timm.create_model("vit_tiny_patch16_224", num_classes=5).state_dict(), weights)
        args += ["--model.network.init_args.name", "vit_tiny_patch16_224", "--model.network.init_args.pretrained_file",
                 str(weights), "--model.network.init_args.img_size", "32", "--model.network.init_args.patch_size", "8",
                 "--data.image_size", "32"]
    return args


@pytest.mark.parametrize("config", CONFIGS)
def test_config_runs_one_round(config, tmp_path, capsys):
    args = ["--config", str(ROOT / config), *SMALL, *standin_args(config, tmp_path),
            "--trainer.logger.init_args.save_dir", str(tmp_path / "runs")]
    if "TimmModel" in (ROOT / config).read_text():
        cli = FederatedCLI(args=args, run=False)
        cli.trainer.fit(cli.model, cli.datamodule)
        # a pretrained ViT is fed what timm trained it on: its mean/std and interpolation, its input side
        for transform in (cli.datamodule.split.train_transform, cli.datamodule.split.eval_transform):
            assert (transform.mean, transform.std) == ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
            assert transform.interpolation == "bicubic" and transform.image_size == 32
    else:
        code = main(["fit", *args])
        out = capsys.readouterr()
        assert code == 0, out.err[-3000:]
    (metrics,) = (tmp_path / "runs").rglob("metrics.csv")
    rows = list(csv.DictReader(open(metrics)))
    assert rows[-1]["round"] == "1.0" and float(rows[-1]["comm/upload_d"]) > 0 and rows[-1]["val/acc"] != ""


def test_every_paper_experiment_has_a_config():
    names = {Path(c).stem for c in CONFIGS}
    for model in ("lenet5", "vgg11", "resnet18", "vgg19"):
        for dataset in ("cifar10", "cifar100"):
            assert {f"{model}_{dataset}_rho0.6", f"{model}_{dataset}_rho0.1"} <= names
    assert {"vit_base_cifar100", "vit_base_tinyimagenet", "logreg_emnist", "vit_tiny", "quickstart"} <= names
