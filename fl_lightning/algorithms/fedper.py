"""FedPer (Arivazhagan et al. 2019, "Federated Learning with Personalization Layers").

FedAvg on the base layers; the personalisation layers (default: the classifier head) stay on each
client: loaded from its row of the client-state store before local training, stored after,
never uploaded or averaged (fl_lightning.personalization.personal.PersonalPart). A client's model
is the global body with its own head.
"""
from __future__ import annotations

from typing import Optional

from torch import nn

from fl_lightning.algorithms.base import Algorithm, positive, register
from fl_lightning.errors import ConfigError
from fl_lightning.federation.blocks import classifier_head
from fl_lightning.personalization.personal import PersonalPart, module_ranges


def personal_modules(owner: Algorithm, network: nn.Module, names: Optional[list[str]]) -> list[str]:
    """The module names given (each must exist), or the classifier head."""
    modules = dict(network.named_modules())
    if names is None:
        head = classifier_head(network)
        if head is None:
            raise ConfigError(f"{type(owner).__name__}(personal_layers=...)", f"{type(network).__name__} has no "
                              "Linear classifier to keep local; name the personal modules, e.g. [fc3]")
        return [head]
    missing = [name for name in names if name not in modules or name == ""]
    if missing:
        raise ConfigError(f"{type(owner).__name__}(personal_layers=...)", f"{type(network).__name__} has no module "
                          f"{missing[0]!r}; choose among {', '.join(n for n in modules if n)}")
    return list(names)


def check_body_left(owner: Algorithm, network: nn.Module, modules: list[str]) -> None:
    """Refuses personal layers that hold every parameter: nothing would be uploaded or averaged."""
    def personal(name: str) -> bool:
        return any(name == m or name.startswith(m + ".") for m in modules)
    if all(personal(name.rpartition(".")[0]) for name, _ in network.named_parameters()):
        raise ConfigError("model.algorithm", f"{owner.name} keeps {modules} on each client, but they hold every "
                          f"parameter of {type(network).__name__}: nothing would be federated; choose a network with "
                          "layers before its head (e.g. MLP with hidden=[64]) or another algorithm")


@register("fedper")
class FedPer(Algorithm):
    """FedPer: FedAvg on the body; the personal layers (the head) stay on each client.

    Args:
        personal_layers: module names each client keeps (with their submodules); default: the classifier head.
        server_lr: η_g, the server step on the mean update.
    """

    summary = "FedPer: FedAvg on the body, the head kept on each client (personal_layers)"
    upload = "d − |head|"

    def __init__(self, personal_layers: Optional[list[str]] = None, server_lr: float = 1.0):
        self.personal_layers = personal_layers
        self.server_lr = positive(self, "server_lr", server_lr)
        self.modules: Optional[list[str]] = None

    def check_network(self, network):
        self.modules = personal_modules(self, network, self.personal_layers)
        check_body_left(self, network, self.modules)

    def select(self, round):
        return module_ranges(round.segments, self.modules)

    def callbacks(self):
        return [PersonalPart(self.select, f"{self.name} personal layers {self.modules}")]
