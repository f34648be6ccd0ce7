"""A user's own LightningModule as the federated network (docs/models_and_data.md, "Your own model and data").

- ``training_step`` is the local loss; its ``self.log``/``self.log_dict`` calls are collected
  (``LoggedValues``) and reach the loggers once per round, as the mean over the round's local
  steps, under the user's own names.
- ``validation_step`` (``test_step``), when the class defines one, is the evaluation of the global model
  (its logged values averaged over the evaluation set's samples; fl_lightning.federation.evaluation), instead of
  fl-lightning's own val/acc and val/loss: forward is then never called by the loop.
- from ``pytorch_lightning`` or ``lightning.pytorch`` alike (fl_lightning.federation.namespaces).
- ``configure_optimizers`` becomes the local optimizer with ``local_optimizer: network``
  (rebuilt over the flat parameters with the same class and settings); otherwise it is
  replaced by SGD with a one-line warning.
- ``hparams`` (``save_hyperparameters``) are logged with the run under ``network/``.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch

from fl_lightning.federation.distributed import Collective
from fl_lightning.errors import ConfigError
from fl_lightning.federation.namespaces import is_lightning_module, lightning_base


def is_lightning(net) -> bool:
    """A LightningModule of either namespace (pytorch_lightning or lightning.pytorch)."""
    return is_lightning_module(net)


def overrides(net, hook: str) -> bool:
    """Whether the user's class defines ``hook`` itself."""
    base = lightning_base(net)
    return base is not None and getattr(type(net), hook) is not getattr(base, hook)


class LoggedValues:
    """Stands in for ``self.log``/``self.log_dict`` of the user's module: records what it logs, and sums it
    when asked (``pop_means``) in one order however many ranks logged it: by ``key`` (a client's plan
    position), then rank, then call (evaluation leaves key 0: ranks hold consecutive batches)."""

    def __init__(self):
        self._calls: list[tuple[int, str, torch.Tensor, int]] = []  # (key, name, mean × weight, weight)
        self.weight = 1  # evaluation sets the batch's size: the mean over samples, as Lightning's on_epoch
        self.key = 0

    def log(self, name: str, value, *args, batch_size=None, **kwargs) -> None:
        weight = self.weight if batch_size is None else batch_size
        self._calls.append((self.key, name, torch.as_tensor(value).detach().float().mean() * weight, weight))

    def log_dict(self, dictionary: dict, *args, **kwargs) -> None:
        for name, value in dictionary.items():
            self.log(name, value)

    def pop_means(self, collective: Collective) -> dict[str, float]:
        """Means of what was logged since the last call, over every rank's clients (or batches)."""
        calls, self._calls = self._calls, []
        names = collective.union(sorted({name for _, name, _, _ in calls}))
        if collective.world_size > 1 and names:
            index = {name: i for i, name in enumerate(names)}
            rows = torch.tensor([[key, index[name], float(value), weight] for key, name, value, weight in calls],
                                dtype=torch.float64).reshape(-1, 4)
            rows = collective.concat(rows.to(collective.device)).cpu()
            calls = [(0, names[int(name)], torch.tensor(value, dtype=torch.float32), int(weight))
                     for _, name, value, weight in sorted(rows.tolist(), key=lambda row: row[0])]
        sums: dict[str, torch.Tensor] = {}
        counts: dict[str, int] = {}
        for _, name, value, weight in calls:
            sums[name] = sums[name] + value if name in sums else value
            counts[name] = counts.get(name, 0) + weight
        return {name: float(sums[name]) / counts[name] for name in names if counts.get(name)}


class RecordedLogs:
    """What one client's ``self.log`` calls logged, in order; replayed into the round's ``LoggedValues``
    in plan order, so the sums are the same however many clients train at once."""

    def __init__(self):
        self.entries: list[tuple[str, object]] = []
        self._this_step: list[object] = []  # the values logged since the last training step returned

    def log(self, name: str, value, *args, **kwargs) -> None:
        self.entries.append((name, value.detach() if isinstance(value, torch.Tensor) else value))
        self._this_step.append(value)

    def drop_the_loss(self, loss) -> None:
        """The step's loss, logged under the user's name (``self.log("train_loss", loss)``), is train/loss
        already: logged once, under that name."""
        first = len(self.entries) - len(self._this_step)
        self.entries[first:] = [entry for entry, value in zip(self.entries[first:], self._this_step)
                                if value is not loss]
        self._this_step = []

    def log_dict(self, dictionary: dict, *args, **kwargs) -> None:
        for name, value in dictionary.items():
            self.log(name, value)

    def replay(self, sink: LoggedValues) -> None:
        for name, value in self.entries:
            sink.log(name, value)


def loss_logged_once(net, loss) -> None:
    """After ``net.training_step`` returned ``loss``: drops the loss from what it logged (it is train/loss)."""
    sink = getattr(vars(net).get("log"), "__self__", None)  # set by logging_into while a client trains
    if isinstance(sink, RecordedLogs):
        sink.drop_the_loss(loss)


@contextmanager
def logging_into(net, sink):
    """Routes the user's module's ``self.log`` calls into ``sink`` (instance attributes shadow the methods)."""
    if not is_lightning(net):
        yield
        return
    net.log, net.log_dict = sink.log, sink.log_dict
    try:
        yield
    finally:
        del net.log, net.log_dict


def network_optimizer_settings(net) -> dict:
    """What ``local_optimizer="network"`` trains clients with, as hparams record it: the optimizer's class
    path and its lr / weight_decay / momentum (0 where it has none)."""
    optimizer = network_optimizer(net, [torch.zeros(1, requires_grad=True)])
    group = optimizer.param_groups[0]
    return {"network_optimizer": f"{type(optimizer).__module__}.{type(optimizer).__qualname__}", "lr": group["lr"],
            "weight_decay": group.get("weight_decay", 0.0), "client_momentum": group.get("momentum", 0.0)}


def network_optimizer(net, params: list[torch.Tensor]) -> torch.optim.Optimizer:
    """The optimizer the user's ``configure_optimizers`` returns, rebuilt over ``params``."""
    configured = net.configure_optimizers()
    if isinstance(configured, dict):
        configured = configured.get("optimizer")
    while isinstance(configured, (list, tuple)) and configured:
        configured = configured[0]
    if not isinstance(configured, torch.optim.Optimizer) or len(configured.param_groups) != 1:
        raise ConfigError("model.local_optimizer", f"{type(net).__name__}.configure_optimizers() must return one "
                          "optimizer with one parameter group to train clients with it; or use local_optimizer: sgd")
    settings = {key: value for key, value in configured.param_groups[0].items() if key != "params"}
    return type(configured)(params, **settings)
