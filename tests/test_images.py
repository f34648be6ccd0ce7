"""Image folders decoded once and cached; the paper's transforms, batched on the device."""
import pytest
import torch
from PIL import Image

from fl_lightning.data import FederatedDataModule
from fl_lightning.data.images import ImageTransform, random_crop
from fl_lightning.errors import ConfigError


def make_folder(root, per_class=6):
    g = torch.Generator().manual_seed(0)
    for part in ("train", "test"):
        for label, name in enumerate(["cat", "dog", "frog"]):
            (root / part / name).mkdir(parents=True)
            for i in range(per_class if part == "train" else 2):
                pixels = torch.randint(0, 256, (8, 8, 3), generator=g, dtype=torch.uint8)
                Image.fromarray(pixels.numpy()).save(root / part / name / f"{i:04d}.png")


def test_image_folder_is_decoded_once_then_cached(tmp_path, monkeypatch):
    make_folder(tmp_path / "pets")
    kwargs = dict(num_clients=3, partition="iid", root=str(tmp_path / "pets"), cache_dir=str(tmp_path / "cache"),
                  val_fraction=0.0)
    dm = FederatedDataModule("imagefolder", **kwargs)
    dm.setup()
    assert dm.split.train_x.shape == (18, 3, 8, 8) and dm.split.train_x.dtype == torch.uint8
    assert dm.split.test_y.tolist() == [0, 0, 1, 1, 2, 2] and dm.split.num_classes == 3
    assert len(list((tmp_path / "cache").glob("*.pt"))) == 2
    first = Image.open(tmp_path / "pets" / "train" / "cat" / "0000.png")
    assert torch.equal(dm.split.train_x[0], torch.as_tensor(list(first.getdata()), dtype=torch.uint8).T.reshape(3, 8, 8))

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded again instead of reading the cache")

    monkeypatch.setattr("torchvision.io.decode_image", no_decoding)
    again = FederatedDataModule("imagefolder", **kwargs)
    again.setup()
    assert torch.equal(again.split.train_x, dm.split.train_x)


def test_missing_folder_is_one_clear_error(tmp_path):
    dm = FederatedDataModule("imagefolder", root=str(tmp_path / "nothing"))
    with pytest.raises(ConfigError, match="data.root: no train/ folder of class folders"):
        dm.check()


def test_eval_transform_normalises_exactly():
    x = torch.tensor([0, 255, 51], dtype=torch.uint8).view(1, 3, 1, 1).expand(2, 3, 2, 2).contiguous()
    out = ImageTransform(mean=(0.5, 0.5, 0.2), std=(0.5, 0.25, 0.1))(x)
    assert out[0, :, 0, 0].tolist() == pytest.approx([-1.0, 2.0, 0.0])


def test_random_crop_is_a_window_of_the_padded_image():
    x = torch.arange(2 * 1 * 5 * 5, dtype=torch.float32).view(2, 1, 5, 5) + 1
    torch.manual_seed(0)
    out = random_crop(x, padding=2)
    torch.manual_seed(0)
    dy, dx = torch.randint(0, 5, (2,)), torch.randint(0, 5, (2,))
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    for b in range(2):
        assert torch.equal(out[b], padded[b, :, dy[b]:dy[b] + 5, dx[b]:dx[b] + 5])


def test_training_transform_flips_about_half_and_resizes():
    x = torch.zeros(400, 3, 4, 4, dtype=torch.uint8)
    x[..., 0] = 255  # left column white
    torch.manual_seed(1)
    out = ImageTransform((0.0,) * 3, (1.0,) * 3, train=True, crop_padding=0)(x)
    flipped = (out[:, 0, 0, -1] == 1.0).float().mean().item()
    assert 0.4 < flipped < 0.6
    resized = ImageTransform((0.0,) * 3, (1.0,) * 3, image_size=8)(x)
    assert resized.shape == (400, 3, 8, 8)


def reduced_at(threads: int, images: torch.Tensor, reduce) -> tuple:
    from fl_lightning.data.images import intra_op_threads

    with intra_op_threads(threads):
        return reduce(images)


def float32_stats_at_the_process_threads(images: torch.Tensor) -> tuple:
    """What channel_stats did before: the float32 reduction at whatever thread count the process has."""
    pixels = images.float().div_(255.0)
    return tuple(pixels.mean((0, 2, 3)).tolist()), tuple(pixels.std((0, 2, 3)).tolist())


@pytest.mark.parametrize("shape", [(60_000, 1, 28, 28), (50_000, 3, 32, 32)], ids=["mnist_size", "cifar_size"])
def test_channel_stats_are_bit_identical_at_1_2_and_4_threads(shape):
    from fl_lightning.data.images import channel_stats
    from tests.layout_data import images_where_thread_count_changes_the_float32_mean

    images = images_where_thread_count_changes_the_float32_mean(shape)
    before = {threads: reduced_at(threads, images, float32_stats_at_the_process_threads) for threads in (1, 2, 4)}
    if shape[1] == 1:  # one channel: the whole reduction is split over the threads, and these images show it
        assert before[1] != before[2] and before[1] != before[4]
    stats = {threads: reduced_at(threads, images, channel_stats) for threads in (1, 2, 4)}
    assert stats[1] == stats[2] == stats[4]
    assert stats[1][0] == before[1][0]  # a one-thread run's numbers are kept
