"""FedBN (Li et al., ICLR 2021, "FedBN: Federated Learning on Non-IID Features via Local Batch
Normalization"): FedAvg, except that every normalisation layer — its affine parameters and running
statistics — stays on each client (fl_lightning.personalization.personal.PersonalPart): never
uploaded, never averaged. BatchNorm, InstanceNorm, GroupNorm and LayerNorm layers count; a network
without any is refused (the algorithm would be FedAvg).
"""
from __future__ import annotations

from typing import Optional

from torch import nn

from fl_lightning.algorithms.base import Algorithm, positive, register
from fl_lightning.errors import ConfigError
from fl_lightning.personalization.personal import PersonalPart, module_ranges

NORMALISATION = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)


def normalisation_layers(network: nn.Module) -> list[str]:
    """Names of the normalisation modules that hold parameters or floating statistics."""
    def holds_values(module: nn.Module) -> bool:
        return any(True for _ in module.parameters(recurse=False)) or any(
            b is not None and b.is_floating_point() for b in module.buffers(recurse=False))
    return [name for name, module in network.named_modules() if isinstance(module, NORMALISATION)
            and holds_values(module)]


@register("fedbn")
class FedBN(Algorithm):
    """FedBN: FedAvg with every normalisation layer kept on each client.

    Args:
        server_lr: η_g, the server step on the mean update.
    """

    summary = "FedBN: FedAvg, normalisation layers (weights and statistics) kept on each client"
    upload = "d − |norm layers|"

    def __init__(self, server_lr: float = 1.0):
        self.server_lr = positive(self, "server_lr", server_lr)
        self.modules: Optional[list[str]] = None

    def check_network(self, network):
        self.modules = normalisation_layers(network)
        if not self.modules:
            raise ConfigError("model.algorithm", f"fedbn keeps normalisation layers local, but {type(network).__name__}"
                              " has none (BatchNorm, GroupNorm, LayerNorm, InstanceNorm); choose a network with "
                              "normalisation (e.g. fl_lightning.models.ResNet18) or another algorithm")

    def select(self, round):
        return module_ranges(round.segments, self.modules)

    def callbacks(self):
        return [PersonalPart(self.select, f"fedbn: {len(self.modules)} normalisation layers")]
