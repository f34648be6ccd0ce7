"""Image data sets (paper Sec. 5.1): CIFAR-10/100 and EMNIST through torchvision, Tiny ImageNet
and any ImageFolder tree decoded once and cached. Stored as uint8; ``ImageTransform`` does the
paper's crop/flip/normalise (and resize) per minibatch on the device."""
from __future__ import annotations

import os

import torch

from fl_lightning.data.images import STATS, ImageTransform, channel_stats, decode_files, list_folder, to_nchw_uint8
from fl_lightning.data.split import DATASETS, DataOptions, DataSplit
from fl_lightning.errors import ConfigError

TINY_IMAGENET_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"


def image_split(train_x, train_y, test_x, test_y, num_classes, stats, opts: DataOptions, augment=None) -> DataSplit:
    mean, std = stats
    augment = opts.augment if augment is None else augment
    train = ImageTransform(mean, std, train=augment, image_size=opts.image_size)
    test = ImageTransform(mean, std, train=False, image_size=opts.image_size)
    return DataSplit(train_x, train_y, test_x, test_y, num_classes, train_transform=train, eval_transform=test)


def _not_found(name: str, opts: DataOptions, err: Exception) -> ConfigError:
    hint = "set data.download=true" if not opts.download else "check the network connection"
    return ConfigError("data.root", f"{name} not found under {os.path.abspath(opts.root)} "
                       f"({str(err).splitlines()[0]}); {hint}")


def load_cifar(name: str, opts: DataOptions) -> DataSplit:
    from torchvision import datasets

    cls = {"cifar10": datasets.CIFAR10, "cifar100": datasets.CIFAR100}[name]
    try:
        train = cls(opts.root, train=True, download=opts.download)
        test = cls(opts.root, train=False, download=opts.download)
    except (RuntimeError, OSError) as err:
        raise _not_found(name, opts, err) from None
    return image_split(to_nchw_uint8(train.data), torch.tensor(train.targets), to_nchw_uint8(test.data),
                       torch.tensor(test.targets), len(train.classes), STATS[name], opts)


@DATASETS.register("cifar10")
def load_cifar10(opts: DataOptions) -> DataSplit:
    return load_cifar("cifar10", opts)


@DATASETS.register("cifar100")
def load_cifar100(opts: DataOptions) -> DataSplit:
    return load_cifar("cifar100", opts)


@DATASETS.register("emnist")
def load_emnist(opts: DataOptions) -> DataSplit:
    """EMNIST ``byclass`` (62 classes) or ``balanced`` (47): ``data.emnist_split``. No augmentation."""
    from torchvision.datasets import EMNIST

    if opts.emnist_split not in ("byclass", "balanced"):
        raise ConfigError("data.emnist_split", f"use byclass or balanced, got {opts.emnist_split!r}")
    try:
        train = EMNIST(opts.root, split=opts.emnist_split, train=True, download=opts.download)
        test = EMNIST(opts.root, split=opts.emnist_split, train=False, download=opts.download)
    except (RuntimeError, OSError) as err:
        raise _not_found("EMNIST", opts, err) from None
    return image_split(to_nchw_uint8(train.data), train.targets.long(), to_nchw_uint8(test.data),
                       test.targets.long(), len(train.classes), STATS["emnist"], opts, augment=False)


def _folder(root: str, part: str) -> str:
    if part == "test" and not os.path.isdir(os.path.join(root, "test")):
        return os.path.join(root, "val")
    return os.path.join(root, part)


def check_image_folder(opts: DataOptions) -> None:
    for part in ("train", "test"):
        if not os.path.isdir(_folder(opts.root, part)):
            raise ConfigError("data.root", f"no {part}/ folder of class folders under {os.path.abspath(opts.root)}; "
                              "give the folder that holds train/<class>/… and test/<class>/… (or val/)")


@DATASETS.register("imagefolder")
def load_image_folder(opts: DataOptions) -> DataSplit:
    """Any ``root/{train,test|val}/<class>/<image>`` tree (e.g. the CIFAR-10 JPEG copy),
    normalised with the training set's own per-channel mean and std."""
    check_image_folder(opts)
    train_paths, train_y, classes = list_folder(_folder(opts.root, "train"))
    test_paths, test_y, _ = list_folder(_folder(opts.root, "test"))
    train_x, test_x = decode_files(train_paths, opts.cache_dir), decode_files(test_paths, opts.cache_dir)
    return image_split(train_x, train_y, test_x, test_y, len(classes), channel_stats(train_x), opts)


def _tiny_root(opts: DataOptions) -> str:
    nested = os.path.join(opts.root, "tiny-imagenet-200")
    return nested if os.path.isdir(nested) else opts.root


def check_tiny_imagenet(opts: DataOptions) -> None:
    root = _tiny_root(opts)
    if not os.path.isfile(os.path.join(root, "val", "val_annotations.txt")) and not opts.download:
        raise ConfigError("data.root", f"Tiny ImageNet not found under {os.path.abspath(opts.root)} (expected "
                          "tiny-imagenet-200/{train,val}/ with val/val_annotations.txt); set data.download=true")


@DATASETS.register("tinyimagenet")
def load_tiny_imagenet(opts: DataOptions) -> DataSplit:
    """Tiny ImageNet's own layout: train/<wnid>/images/*.JPEG; val/images + val_annotations.txt (the test set)."""
    if opts.download and not os.path.isdir(os.path.join(_tiny_root(opts), "val")):
        from torchvision.datasets.utils import download_and_extract_archive

        download_and_extract_archive(TINY_IMAGENET_URL, opts.root)
    check_tiny_imagenet(opts)
    root = _tiny_root(opts)
    train_paths, train_y, classes = list_folder(os.path.join(root, "train"))
    index = {wnid: i for i, wnid in enumerate(classes)}
    with open(os.path.join(root, "val", "val_annotations.txt")) as f:
        annotations = [line.split("\t")[:2] for line in f if line.strip()]
    test_paths = [os.path.join(root, "val", "images", name) for name, _ in annotations]
    test_y = torch.tensor([index[wnid] for _, wnid in annotations])
    train_x, test_x = decode_files(train_paths, opts.cache_dir), decode_files(test_paths, opts.cache_dir)
    return image_split(train_x, train_y, test_x, test_y, len(classes), STATS["tinyimagenet"], opts)
