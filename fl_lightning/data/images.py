"""Image data sets as cached uint8 tensors, with the paper's transforms run batched on the device.

* Folders (ImageFolder layout: CIFAR-10 JPEG copy, Tiny ImageNet, any ``train/<class>/…``)
  are decoded once — file list from ``torchvision.datasets.ImageFolder``, pixels from
  ``torchvision.io`` — and cached as a uint8 tensor; later runs load the cache.
* Transforms (paper, App. 12.2): random crop with padding 4 and horizontal flip for
  training, per-data-set normalisation, optional resize (ViT). ``ImageTransform`` runs on
  a whole minibatch on the training device, drawing from torch's RNG (seeded per client).
"""
from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Optional

import torch
import torch.nn.functional as F

STATS = {  # per-data-set normalisation (mean, std)
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "emnist": ((0.1736,), (0.3248,)),
    "tinyimagenet": ((0.4802, 0.4481, 0.3975), (0.2770, 0.2691, 0.2821)),
}


@dataclass
class ImageTransform:
    """uint8 NCHW batch → normalised float batch; training adds crop-with-padding and flip."""

    mean: tuple
    std: tuple
    train: bool = False
    crop_padding: int = 4
    flip: bool = True
    image_size: Optional[int] = None
    interpolation: str = "bilinear"  # of the resize; timm models say which (e.g. bicubic)
    _on_device: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __call__(self, x: torch.Tensor, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """Augmentation draws from ``generator`` (on x's device), else from torch's global RNG."""
        x = x.float().div_(255.0)
        if self.train and self.crop_padding:
            x = random_crop(x, self.crop_padding, generator)
        if self.train and self.flip:
            flip = torch.rand(x.shape[0], 1, 1, 1, device=x.device, generator=generator) < 0.5
            x = torch.where(flip, x.flip(3), x)
        if self.image_size is not None and x.shape[-1] != self.image_size:
            x = F.interpolate(x, size=(self.image_size, self.image_size), mode=self.interpolation, align_corners=False)
        mean, std = self._statistics(x.device)
        return (x - mean) / std

    def _statistics(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """mean and std as [1, C, 1, 1] tensors on ``device``, made once per device: a tensor made from a
        tuple on a GPU is a host-to-device copy that waits for the device, once per minibatch otherwise."""
        cached = self._on_device.get(device)
        if cached is None:
            cached = self._on_device[device] = (torch.tensor(self.mean, device=device).view(1, -1, 1, 1),
                                                torch.tensor(self.std, device=device).view(1, -1, 1, 1))
        return cached


def random_crop(x: torch.Tensor, padding: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Per-sample random crop of the zero-padded batch back to its size (torchvision's RandomCrop)."""
    b, _, h, w = x.shape
    padded = F.pad(x, (padding,) * 4)
    dy = torch.randint(0, 2 * padding + 1, (b,), device=x.device, generator=generator)
    dx = torch.randint(0, 2 * padding + 1, (b,), device=x.device, generator=generator)
    rows = (dy[:, None] + torch.arange(h, device=x.device))[:, None, :, None]
    cols = (dx[:, None] + torch.arange(w, device=x.device))[:, None, None, :]
    batch = torch.arange(b, device=x.device)[:, None, None, None]
    channels = torch.arange(x.shape[1], device=x.device)[None, :, None, None]
    return padded[batch, channels, rows, cols]


def list_folder(folder: str) -> tuple[list[str], torch.Tensor, list[str]]:
    """Image paths, labels and class names of an ImageFolder tree (``torchvision.datasets.ImageFolder``)."""
    from torchvision.datasets import ImageFolder

    listing = ImageFolder(folder, loader=lambda path: path)
    labels = torch.tensor([label for _, label in listing.samples], dtype=torch.long)
    return [path for path, _ in listing.samples], labels, listing.classes


def decode_files(paths: list[str], cache_dir: Optional[str]) -> torch.Tensor:
    """The images at ``paths`` as one uint8 N×3×H×W tensor, cached in ``cache_dir`` (keyed by the paths)."""
    from torchvision.io import ImageReadMode, decode_image, read_file

    key = hashlib.sha1("\n".join(os.path.abspath(p) for p in paths).encode()).hexdigest()
    cache = os.path.join(cache_dir, f"{key[:20]}.pt") if cache_dir else None
    if cache and os.path.exists(cache):
        return torch.load(cache, weights_only=True)
    images = torch.stack([decode_image(read_file(path), mode=ImageReadMode.RGB) for path in paths])
    if cache:
        os.makedirs(cache_dir, exist_ok=True)
        partial = f"{cache}.{os.getpid()}.partial"
        torch.save(images, partial)
        os.replace(partial, cache)  # never a half-written cache
    return images


def channel_stats(images: torch.Tensor) -> tuple[tuple, tuple]:
    """Per-channel (mean, std) in [0, 1] of uint8 N×C×H×W images, the same at any thread count.

    A float32 reduction splits its work by the process's intra-op threads and rounds differently at 1
    and 2 threads (a 60,000-image grey data set's mean: 0.2860405743 against 0.2860406041), so a
    process that trains K clients at one thread each would normalise every pixel differently from a
    one-thread process (docs/scale_out.md). It runs at one thread: the numbers of every one-thread run
    made before are kept, and the experiments' numbers depend on this exact float32 reduction."""
    pixels = images.float().div_(255.0)
    with intra_op_threads(1):
        return tuple(pixels.mean((0, 2, 3)).tolist()), tuple(pixels.std((0, 2, 3)).clamp_min(1e-6).tolist())


@contextmanager
def intra_op_threads(count: int) -> Iterator[None]:
    """torch's intra-op thread count set to ``count`` inside the block, restored after it."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def to_nchw_uint8(array) -> torch.Tensor:
    """torchvision's CIFAR ``.data`` (N×H×W×C numpy) or MNIST-like (N×H×W) → uint8 N×C×H×W."""
    tensor = torch.as_tensor(array)
    return tensor.unsqueeze(1) if tensor.ndim == 3 else tensor.permute(0, 3, 1, 2).contiguous()
