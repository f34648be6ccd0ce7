"""The federated hooks an algorithm is written in (README, "Writing an algorithm").

An ``FLCallback`` is an ordinary Lightning ``Callback`` (so Lightning saves its
``state_dict()`` in checkpoints and restores it on resume) with extra hooks that the
``FederatedLoop`` calls during a round, in this order::

    configure_round(loop, plan)            server: which clients, what each uploads
      for each sampled client:
        on_client_start(loop, client)      client_init: after the global model is loaded
          for each local step:
            on_local_gradient(loop, client)    after backward: may change loop.flat.grad
            on_local_step_end(loop, client)    after the optimizer step
        on_client_end(loop, client)        client_final: may change client.upload
        on_upload(loop, client)            client, last: encode client.upload for the wire (compression)
        on_client_reported(loop, client)   server: its upload arrived and is finite; commit client state
    on_server_update(loop, update, received)   server_update: may change `update` in place
    on_round_end(loop, plan)

A round in which no client reports skips the server hooks: nothing changes.
``loop.flat`` is the working model as one flat vector (``vector``, ``grad``),
``loop.global_vector`` the server model x^r, ``loop.client_state`` the per-client vectors kept
across rounds (declare a table in ``configure_round``; write rows in ``on_client_reported``),
``loop.received`` the round's running sums (``add_sum`` for values the server derives from a
reported upload; declare the channel in ``plan.channels``). Under DDP the client hooks run on the
rank that trains the client, the server hooks on every rank with the sums over all ranks.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pytorch_lightning as pl
import torch

from fl_lightning.errors import FLUserError

if TYPE_CHECKING:  # pragma: no cover
    from fl_lightning.comm import ReceivedSums
    from fl_lightning.loop import ClientTask, FederatedLoop, RoundPlan


class FLCallback(pl.Callback):
    """Base class: every hook is a no-op; override the ones the algorithm needs."""

    # True if the callback calls loop.gradient_at_global: the loop then keeps each minibatch's RNG
    # state so that the second forward replays its dropout mask (otherwise it skips that work)
    replays_minibatch: bool = False

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Refuses to sit silently on a Trainer whose module runs no federated rounds."""
        from fl_lightning.module import FederatedModule

        if not isinstance(pl_module, FederatedModule):
            raise FLUserError(f"{type(self).__name__} acts only inside federated rounds, but the Trainer fits a "
                              f"{type(pl_module).__name__}; fit fl_lightning.FederatedModule(network=your_model) instead")

    def configure_round(self, loop: "FederatedLoop", plan: "RoundPlan") -> None:
        """Server, before any client trains: e.g. assign upload masks (client.upload_ranges)."""

    def on_client_start(self, loop: "FederatedLoop", client: "ClientTask") -> None:
        """Client, once the global model is loaded into the working model."""

    def on_local_gradient(self, loop: "FederatedLoop", client: "ClientTask") -> None:
        """Client, after each backward pass: ``loop.flat.grad`` holds ∇f_i(y; ζ)."""

    def on_local_step_end(self, loop: "FederatedLoop", client: "ClientTask") -> None:
        """Client, after each optimizer step."""

    def on_client_end(self, loop: "FederatedLoop", client: "ClientTask") -> None:
        """Client, after local training: ``client.upload`` holds what it will send."""

    def on_upload(self, loop: "FederatedLoop", client: "ClientTask") -> None:
        """Client, after every on_client_end: replace client.upload's parts by what is really sent."""

    def on_client_reported(self, loop: "FederatedLoop", client: "ClientTask") -> None:
        """Server, once the client's upload arrived and is finite (the working model still holds its y).
        Keep per-client state (c_i, h_i) here, not in on_client_end: a client that fails to report
        (client_dropout) or sends NaN/inf is dropped, and its state must stay as it was."""

    def on_server_update(self, loop: "FederatedLoop", update: torch.Tensor, received: "ReceivedSums") -> None:
        """Server: ``update`` is the aggregated parameter update, applied as x += η_g·update."""

    def on_round_end(self, loop: "FederatedLoop", plan: "RoundPlan") -> None:
        """Server, after the global model changed."""
