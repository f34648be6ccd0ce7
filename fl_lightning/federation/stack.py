"""A cohort's working models stacked for the batched client runner (fl_lightning.federation.batched).

``Stack`` holds the rows the cohort's ``ClientContext`` views point into: ``models`` Y [B, d] (row i:
client i's y), ``grads`` G, SGD's momentum buffers, the summed losses, and, when an algorithm asks for
them, the minibatch gradients at x^r (``at_global``) and the full gradients ∇f_i(x^r) (``full``).
Gradients of the clients training at a step come from one vmapped call per minibatch size.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, ContextManager, Optional

import torch
from torch import nn

from fl_lightning.federation.memory_format import HANDLE, set_channels_last


@contextmanager
def contiguous_inputs(net: nn.Module):
    """Inside: no channels-last input hook (fl_lightning.federation.memory_format), which vmap cannot run."""
    laid_out = HANDLE in net.__dict__
    set_channels_last(net, False)
    try:
        yield
    finally:
        set_channels_last(net, laid_out)


class Stack:
    """The stacked rows of one cohort.

    Args:
        gradients: ``(rows [k, d], x [k, b, ...], y [k, b], out=None) → (∇ [k, d], loss [k])``, vmapped; ∇
            written into ``out`` when given.
        global_vector: x^r; every row starts there.
        momentum: SGD momentum (0: no buffers).
        replays: keep ∇f_i(x^r; ζ) of every minibatch (``ClientContext.gradient_at_global``).
        pad: every call over the whole cohort (``_call_group``), for a compiled ``gradients``.
    """

    def __init__(self, gradients: Callable, global_vector: torch.Tensor, clients: int, num_params: int,
                 momentum: float, replays: bool, forward_context: Callable[[], ContextManager], net: nn.Module,
                 pad: bool = False):
        self._gradients, self._forward_context, self._net = gradients, forward_context, net
        self.global_params = global_vector[:num_params]
        self.models = global_vector.unsqueeze(0).repeat(clients, 1)  # Y: every row y ← x^r
        self.grads = torch.zeros(clients, num_params, dtype=self.models.dtype, device=self.models.device)
        self.buffers = torch.zeros_like(self.grads) if momentum else None
        self.momentum = momentum
        self.losses = torch.zeros(clients, device=self.models.device)
        self.at_global = torch.zeros_like(self.grads) if replays else None
        self.full: Optional[torch.Tensor] = None  # ∇f_i(x^r), once an algorithm asked for it
        self._indices: dict[tuple, torch.Tensor] = {}
        self.pad = pad
        self._global_rows: Optional[torch.Tensor] = None

    def _call(self, weights: torch.Tensor, batches: list[tuple], out: Optional[torch.Tensor] = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
        xb = torch.stack([batch[0] for batch in batches])
        yb = torch.stack([batch[1] for batch in batches])
        with self._forward_context(), contiguous_inputs(self._net):
            return self._gradients(weights, xb, yb, out=out)

    def _call_group(self, batches: list[tuple], group: list[int], at_global: bool = False,
                    out: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """∇ [len(group), d] and loss of the clients in ``group`` (cohort rows, ascending) on their ``batches``, at
        their own rows of Y or, with ``at_global``, at x^r. Padded, every row of the cohort is computed (the others
        on the group's first batch) and the group's rows are taken: the function sees one cohort size, so a
        compiled one is compiled once per minibatch size, not once per (clients still training, size)."""
        d, cohort = self.grads.shape[1], self.models.shape[0]
        whole = len(group) == cohort
        if self.pad and not whole:
            by_row = dict(zip(group, batches))
            padded = [by_row.get(row, batches[0]) for row in range(cohort)]
            grads, loss = self._call(self.global_rows if at_global else self.models[:, :d], padded)
            index = self._index(group)
            return grads.index_select(0, index), loss.index_select(0, index)
        if at_global:
            weights = self.global_rows if self.pad else self.global_params.expand(len(group), d)
        else:
            weights = self.models[:, :d] if whole else self.models[self._index(group), :d]
        return self._call(weights, batches, out=out)

    @property
    def global_rows(self) -> torch.Tensor:
        """x^r as a row per client, laid out as Y (a compiled function is specialised on its inputs' strides too)."""
        if self._global_rows is None:
            self._global_rows = self.global_params.expand(self.models.shape[0], -1).clone()
        return self._global_rows

    @staticmethod
    def _by_size(batches: list[tuple]) -> dict[int, list[int]]:
        """Indices into ``batches`` grouped by minibatch size: each group is one vmapped call."""
        groups: dict[int, list[int]] = {}
        for i, batch in enumerate(batches):
            groups.setdefault(len(batch[1]), []).append(i)
        return groups

    def _rows(self, rows: list[int]):
        """None when ``rows`` is the whole cohort (in order), else their index tensor."""
        if len(rows) == self.models.shape[0]:
            return None
        return self._index(rows)

    def _index(self, rows: list[int]) -> torch.Tensor:
        """``rows`` as an index tensor on the rows' device, made once per set of rows (a cohort has a few:
        all, then fewer as clients finish): on a GPU each is a host-to-device copy that waits for the device."""
        key = tuple(rows)
        index = self._indices.get(key)
        if index is None:
            index = self._indices[key] = torch.tensor(rows, device=self.models.device)
        return index

    def forward_backward(self, batches: list[tuple], rows: list[int]) -> None:
        """∇f_i(y_i; ζ_i) into G's ``rows`` and the losses added (and ∇f_i(x^r; ζ_i) with replays)."""
        for members in self._by_size(batches).values():
            group = [rows[i] for i in members]
            index = self._rows(group)
            batch = [batches[i] for i in members]
            grads, loss = self._call_group(batch, group, out=self.grads if index is None else None)
            if index is None:
                self.losses.add_(loss.detach().float())
            else:
                self.grads.index_copy_(0, index, grads.to(self.grads.dtype))
                self.losses.index_add_(0, index, loss.detach().float())
            if self.at_global is not None:
                at_global, _ = self._call_group(batch, group, at_global=True)
                self.at_global.index_copy_(0, self._index(group), at_global)

    def add_full_gradient(self, batches: list[tuple], rows: list[int]) -> None:
        """``full[row] += ∇f_i(x^r; batch) · len(batch)/n_i`` for one batch (x, y, n_i) of each of ``rows``."""
        for members in self._by_size(batches).values():
            group = [rows[i] for i in members]
            grads, _ = self._call_group([batches[i][:2] for i in members], group, at_global=True)
            for k, (i, row) in enumerate(zip(members, group)):
                self.full[row].add_(grads[k], alpha=len(batches[i][1]) / batches[i][2])

    def sgd_step(self, rows: list[int], lr: float, weight_decay: float, first: bool) -> None:
        """``torch.optim.SGD``'s step on ``rows``: g + wd·y, momentum buffer (the gradient at the first step), y − lr·step."""
        d = self.grads.shape[1]
        index = self._rows(rows)
        params = self.models[:, :d] if index is None else self.models[index, :d]
        step = self.grads if index is None else self.grads[index]
        if weight_decay:
            step = step.add(params, alpha=weight_decay)
        if self.momentum:
            buffer = self.buffers if index is None else self.buffers[index]
            if first:
                buffer.copy_(step)
            else:
                buffer.mul_(self.momentum).add_(step)
            if index is not None:
                self.buffers.index_copy_(0, index, buffer)
            step = buffer
        params.add_(step, alpha=-lr)
        if index is not None:
            self.models[:, :d].index_copy_(0, index, params)
