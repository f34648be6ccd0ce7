"""Any timm model by name, e.g. ViT (paper Sec. 5.2, Table 11).

In a config::

    network:
      class_path: fl_lightning.models.TimmModel
      init_args: {name: vit_tiny_patch16_224, num_classes: 100, pretrained: true}

``TimmModel(...)`` returns timm's own model object (a ``VisionTransformer`` for ViT), so
module names, ``get_classifier()`` and the paper's ViT block preset apply unchanged.

* ``pretrained: true`` loads timm's weights the ordinary way (the Hugging Face Hub when
  online, its local cache otherwise). With neither, it fails at once with one line that
  says to pass ``pretrained_file``.
* ``pretrained_file: PATH`` loads a local checkpoint through timm
  (``pretrained_cfg_overlay=dict(file=PATH)``), with timm's own adaptation: a new head for
  another ``num_classes``, position embeddings resampled for ``img_size`` and the patch
  embedding for ``patch_size``.
"""
from __future__ import annotations

import os
import socket
from contextlib import contextmanager
from typing import Optional

from torch import nn

from fl_lightning.errors import ConfigError
from fl_lightning.models._registry import MODELS

HUB_HOST = ("huggingface.co", 443)
_ARCHITECTURE_ONLY = False


@contextmanager
def architecture_only():
    """Inside, TimmModel builds the architecture without loading weights (``fl-lightning blocks``)."""
    global _ARCHITECTURE_ONLY
    previous, _ARCHITECTURE_ONLY = _ARCHITECTURE_ONLY, True
    try:
        yield
    finally:
        _ARCHITECTURE_ONLY = previous


def _hub_reachable(timeout: float = 3.0) -> bool:
    try:
        socket.create_connection(HUB_HOST, timeout=timeout).close()
        return True
    except OSError:
        return False


@MODELS.register("timm")
class TimmModel(nn.Module):
    """Builder with a class face (jsonargparse wants a class): returns ``timm.create_model(...)``."""

    def __new__(cls, name: str = "vit_tiny_patch16_224", num_classes: int = 10, pretrained: bool = False,
                pretrained_file: Optional[str] = None, img_size: Optional[int] = None,
                patch_size: Optional[int] = None, in_chans: int = 3, drop_path_rate: float = 0.0) -> nn.Module:
        import timm

        field = "model.network.init_args"
        if not timm.is_model(name):
            raise ConfigError(f"{field}.name", f"timm has no model {name!r} (see timm.list_models())")
        kwargs = dict(num_classes=num_classes, in_chans=in_chans)
        if drop_path_rate:
            kwargs["drop_path_rate"] = drop_path_rate
        if img_size is not None:
            kwargs["img_size"] = img_size
        if patch_size is not None:
            kwargs["patch_size"] = patch_size
        if _ARCHITECTURE_ONLY:
            return timm.create_model(name, pretrained=False, **kwargs)
        if pretrained_file is not None:
            if not os.path.isfile(pretrained_file):
                raise ConfigError(f"{field}.pretrained_file", f"no file at {pretrained_file!r}; give a .pth, .bin "
                                  "or .safetensors state dict of the model")
            try:
                return timm.create_model(name, pretrained=True, pretrained_cfg_overlay=dict(file=pretrained_file),
                                         **kwargs)
            except (RuntimeError, KeyError, ValueError) as err:
                raise ConfigError(f"{field}.pretrained_file", f"cannot load {pretrained_file!r} into {name}: "
                                  f"{str(err).splitlines()[0]}") from None
        if pretrained and not _hub_reachable():
            from huggingface_hub import constants

            offline, constants.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE, True  # local cache only, no retries
            try:
                return timm.create_model(name, pretrained=True, **kwargs)
            except Exception:  # not in the local cache either
                raise ConfigError(f"{field}.pretrained", f"cannot download {name} weights (no network, not in the "
                                  f"Hugging Face cache); pass {field}.pretrained_file=/path/to/weights") from None
            finally:
                constants.HF_HUB_OFFLINE = offline
        return timm.create_model(name, pretrained=pretrained, **kwargs)


def timm_input_config(net: nn.Module) -> Optional[dict]:
    """What a timm model expects as input — timm's data config: mean, std, interpolation and input
    side (a ViT's own ``patch_embed.img_size``) — or None for a model that is not timm's."""
    if not isinstance(getattr(net, "pretrained_cfg", None), dict):
        return None
    from timm.data import resolve_model_data_config

    config = resolve_model_data_config(net)
    side = config["input_size"][-1]
    patch_embed = getattr(net, "patch_embed", None)
    if patch_embed is not None and getattr(patch_embed, "img_size", None) is not None:
        side = patch_embed.img_size[-1]
    return {"mean": tuple(config["mean"]), "std": tuple(config["std"]), "interpolation": config["interpolation"],
            "image_size": int(side)}
