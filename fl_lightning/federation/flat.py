"""One flat, contiguous vector behind a network's parameters and floating buffers.

The federated state of a model (spec, "Notation": x ∈ R^d) lives in a single tensor
``FlatModel.vector``; every parameter and floating-point buffer of the network is a
*view* into it, and gradients are gathered into ``FlatModel.grad``. So:

* broadcasting the global model is one ``copy_`` (``load``),
* a backward pass writes ∇ into ``grad`` (``backward``), whatever else touches ``.grad``,
* a client's update Δ = y − x^r is one subtraction,
* a block of the model is a contiguous slice when the layout orders it so,
* the local optimizer steps one tensor (``params``) instead of dozens.

Layout: parameters first (``[0, num_params)``), floating buffers after
(``[num_params, numel)``). ``num_params`` is the paper's d. Integer buffers (BatchNorm's
``num_batches_tracked``) are not federated and stay inside the network.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

import torch
from torch import nn


@dataclass(frozen=True)
class Segment:
    """Where one named tensor of the network lives in the flat vector."""

    name: str
    module: str
    start: int
    stop: int
    shape: tuple
    is_param: bool

    @property
    def numel(self) -> int:
        return self.stop - self.start


def _named_tensors(net: nn.Module):
    for name, p in net.named_parameters():
        yield name, p, True
    for name, b in net.named_buffers():
        if b is not None and b.is_floating_point():
            yield name, b, False


def tensor_layout(net: nn.Module, order: Optional[Iterable[str]] = None) -> list[tuple[Segment, torch.Tensor]]:
    """Where each parameter and floating buffer goes in the flat vector: parameters first,
    each group in ``order`` (tensor names; unnamed ones keep module order, after the named)."""
    named = list(_named_tensors(net))
    rank = {name: i for i, name in enumerate(order or ())}
    named.sort(key=lambda item: (not item[2], rank.get(item[0], len(rank))))
    layout, start = [], 0
    for name, tensor, is_param in named:
        module = name.rsplit(".", 1)[0] if "." in name else ""
        layout.append((Segment(name, module, start, start + tensor.numel(), tuple(tensor.shape), is_param), tensor))
        start += tensor.numel()
    return layout


class FlatModel:
    """Rebinds ``net``'s parameters and floating buffers as views of one flat vector.

    ``order`` optionally lists tensor names in the order they should be laid out
    (parameters first regardless), so that a block of the model can be one slice.
    """

    def __init__(self, net: nn.Module, order: Optional[Iterable[str]] = None):
        self.net = net
        self.segments: list[Segment] = [seg for seg, _ in tensor_layout(net, order)]
        self.numel = self.segments[-1].stop if self.segments else 0
        self.num_params = sum(s.numel for s in self.segments if s.is_param)
        self.rebind()

    def rebind(self) -> None:
        """(Re)build the flat storage from the tensors currently in the network.

        Called at construction and after the network moves device or dtype
        (``module._apply`` gives every parameter fresh storage).
        """
        named = {name: tensor for name, tensor, _ in _named_tensors(self.net)}
        current = [named[s.name] for s in self.segments]
        ref = current[0] if current else torch.zeros(0)
        vector = torch.empty(self.numel, dtype=torch.float32, device=ref.device)
        grad = torch.zeros(self.num_params, dtype=torch.float32, device=ref.device)
        with torch.no_grad():
            for seg, tensor in zip(self.segments, current):
                vector[seg.start:seg.stop].copy_(tensor.reshape(-1))
        modules = dict(self.net.named_modules())
        for seg, tensor in zip(self.segments, current):
            view = vector[seg.start:seg.stop].view(seg.shape)
            if seg.is_param:
                tensor.data = view
                tensor.grad = None
            else:
                owner = modules[seg.module]
                owner._buffers[seg.name.rsplit(".", 1)[-1]] = view
        self.vector = vector
        self.grad = grad
        self._param_list = [t for seg, t in zip(self.segments, current) if seg.is_param]
        # A leaf tensor sharing the parameters' storage: what the local optimizer steps.
        self.params = vector[: self.num_params].detach()
        self.params.grad = grad

    @property
    def device(self) -> torch.device:
        return self.vector.device

    def load(self, source: torch.Tensor) -> None:
        """Set every parameter and floating buffer from a flat vector (one copy)."""
        self.vector.copy_(source)

    def backward(self, loss: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Write ∇loss w.r.t. every parameter into ``out`` (default ``grad``); zeros for unused ones."""
        grads = torch.autograd.grad(loss, self._param_list, allow_unused=True, materialize_grads=True)
        target = self.grad if out is None else out
        torch.cat([g.reshape(-1) for g in grads], out=target)
        self.params.grad = self.grad
        return target

