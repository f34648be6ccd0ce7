"""timm models by name: local pretrained files through timm, and a fast, clear offline failure."""
import time

import pytest
import timm
import torch

import fl_lightning.models.timm_models as timm_models
from fl_lightning.federation.blocks import build_partition
from fl_lightning.errors import ConfigError
from fl_lightning.models import TimmModel


def test_pretrained_file_is_loaded_and_adapted_by_timm(tmp_path):
    source = timm.create_model("vit_tiny_patch16_224", num_classes=10)
    weights = tmp_path / "vit_tiny.pth"
    torch.save(source.state_dict(), weights)
    model = TimmModel("vit_tiny_patch16_224", num_classes=7, pretrained_file=str(weights), img_size=32, patch_size=8)
    assert type(model).__name__ == "VisionTransformer"
    assert torch.equal(model.blocks[5].mlp.fc1.weight, source.blocks[5].mlp.fc1.weight)  # weights came from the file
    assert model.pos_embed.shape == (1, 1 + 16, 192)  # resampled for 32 px / patch 8
    assert model.patch_embed.proj.weight.shape == (192, 3, 8, 8)
    assert model.get_classifier().out_features == 7  # a new head for 7 classes
    assert build_partition(model).num_blocks == 6


def test_other_timm_models_get_the_balanced_divider():
    model = TimmModel("resnet10t", num_classes=5)
    partition = build_partition(model, num_blocks=4)
    assert partition.source == "balanced" and partition.shared.layers == ["fc"]


def test_offline_pretrained_fails_fast_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(timm_models, "_hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-cache"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-hf-cache" / "hub"))
    start = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        TimmModel("vit_tiny_patch16_224", pretrained=True)
    assert time.perf_counter() - start < 10
    message = str(err.value)
    assert "\n" not in message and "pretrained_file" in message and message.startswith("model.network.init_args")


def test_bad_names_and_files_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="timm has no model 'vit_nope'"):
        TimmModel("vit_nope")
    with pytest.raises(ConfigError, match="pretrained_file: no file at"):
        TimmModel("vit_tiny_patch16_224", pretrained_file=str(tmp_path / "missing.pth"))


def test_timm_model_is_fed_its_own_input_config():
    from fl_lightning import FederatedDataModule
    from tests.conftest import fl_module

    images = torch.randint(0, 256, (30, 3, 8, 8), dtype=torch.uint8)
    labels = torch.arange(30) % 3
    dataset = torch.utils.data.TensorDataset(images, labels)

    def data():
        return FederatedDataModule.from_datasets(train_dataset=dataset, test_dataset=dataset, num_clients=3,
                                                 val_fraction=0.0)

    vit = TimmModel(name="vit_tiny_patch16_224", num_classes=3, img_size=16, patch_size=8)
    dm = data()
    fl_module(vit, clients_per_round=2).check_compatible(dm)
    transform = dm.split.eval_transform
    assert (transform.mean, transform.std, transform.interpolation) == ((0.5,) * 3, (0.5,) * 3, "bicubic")
    assert transform.image_size == 16 and dm.eval_transform(images[:2]).shape == (2, 3, 16, 16)
    own = data()  # a model that is not timm's keeps the data set's own statistics and size
    own.setup()
    mean = own.split.eval_transform.mean
    plain = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 3))
    fl_module(plain, clients_per_round=2).check_compatible(own)
    assert own.split.eval_transform.mean == mean and own.split.eval_transform.image_size is None
