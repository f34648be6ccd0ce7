"""The federated hooks an algorithm is written in (docs/algorithms.md, "Writing an algorithm").

An ``FLCallback`` is an ordinary Lightning ``Callback`` (so Lightning saves its
``state_dict()`` in checkpoints and restores it on resume) with extra hooks that the
``FederatedLoop`` calls during a round, in this order, each with a typed context
(``fl_lightning.federation.contexts``)::

    configure_round(round)            server: which clients, what each uploads, channels, state tables
      for each sampled client:
        on_client_start(client)       client_init: the working model holds x^r
          for each local step:
            on_local_gradient(client)     after backward: may change client.grad
            on_local_step_end(client)     after the optimizer step: may change client.params
        on_client_end(client)         client_final: may add to / change client.upload
        on_upload(client)             client, last: encode client.upload for the wire (compression)
        on_client_reported(client)    server, in plan order: the upload arrived and is finite; commit
                                      client state (client.params: a copy of its final model)
    on_server_update(server)          server_update: may change server.update in place
    on_round_end(round)

A round in which no client reports skips the server hooks: nothing changes. A callback keeps
per-client scratch in ``client.scratch[self]`` (its own key; gone with the client's round), per-client vectors kept across
rounds in the client-state store (declare a table in ``configure_round``, read it in
``on_client_start``, write it in ``on_client_reported``), and values the server derives from a
reported upload in ``received.add_sum`` on a channel declared in ``round.channels``. Under DDP the
client hooks run on the rank that trains the client, the server hooks on every rank with the sums
over all ranks. With ``model.parallel_clients`` K > 1 the client hooks of up to K clients run at the
same time in worker threads (``on_client_reported`` and the server hooks in the main thread): keep
per-client values in ``client.scratch``, or set ``thread_safe = False``.
"""
from __future__ import annotations

from typing import Optional

import pytorch_lightning as pl

from fl_lightning.federation.contexts import ClientContext, RoundContext, ServerContext
from fl_lightning.errors import FLUserError, refuse_in_one_line


class FLCallback(pl.Callback):
    """Base class: every hook is a no-op; override the ones the algorithm needs."""

    # True if the callback calls client.gradient_at_global(): the loop then keeps each minibatch's RNG
    # state so that the second forward replays its dropout mask (otherwise it skips that work)
    replays_minibatch: bool = False
    # False if its client hooks must not run for two clients at once (shared buffers, a counter):
    # with model.parallel_clients > 1 the loop then trains the clients one at a time, with one warning
    thread_safe: bool = True
    # True if its configure_round only sizes the round's messages (a codec): a schedule that steps per arrival, which plans
    # one client at a time outside a round, runs these and no other callback's configure_round
    configures_messages: bool = False
    # Traits the fit's parts read (fl_lightning.assembly.fit.HookTraits), never the class: True if it keeps per-client
    # vectors across rounds in the client-state store; True if each client uploads one block of the division;
    # whether its client hooks change what a client computes or sends (None: True if it overrides a client hook);
    # True if it trains on every client's data pooled in one place (no federated client holds it); True if it reads
    # each client's count of local optimizer steps τ_i (a step of several accumulated micro-batches would skew it);
    # True if its clients upload control-variate changes Δc_i beside the update (SCAFFOLD, FedBCGD+)
    keeps_client_state: bool = False
    uploads_one_block: bool = False
    changes_local_training: Optional[bool] = None
    pools_clients_data: bool = False
    counts_local_steps: bool = False
    uploads_control_variates: bool = False

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Refuses to sit silently on a Trainer whose module runs no federated rounds."""
        if not getattr(pl_module, "runs_federated_rounds", False):
            raise refuse_in_one_line(FLUserError(
                f"{type(self).__name__} acts only inside federated rounds, but the Trainer fits a "
                f"{type(pl_module).__name__}; fit fl_lightning.FederatedModule(network=your_model) instead"))

    def configure_round(self, round: RoundContext) -> None:
        """Server, before any client trains: may change ``round.clients`` (their upload_ranges,
        local_epochs), add to ``round.channels``, declare client-state tables."""

    def on_client_start(self, client: ClientContext) -> None:
        """Client, once the global model is loaded into the working model: may add to client.download."""

    def on_local_gradient(self, client: ClientContext) -> None:
        """Client, after each backward pass: ``client.grad`` holds ∇f_i(y; ζ); may change it in place."""

    def on_local_step_end(self, client: ClientContext) -> None:
        """Client, after each optimizer step: may change ``client.params`` in place."""

    def on_client_end(self, client: ClientContext) -> None:
        """Client, after local training: ``client.upload`` holds Δ over its upload_ranges; may add channels."""

    def on_upload(self, client: ClientContext) -> None:
        """Client, after every on_client_end: may replace client.upload's parts by what is really sent."""

    def on_client_reported(self, client: ClientContext) -> None:
        """Server, once the client's upload arrived and is finite (the working model still holds its y).
        Keep per-client state (c_i, h_i) here, not in on_client_end: a client that fails to report
        (a dropout part) or sends NaN/inf is dropped, and its state must stay as it was. Must not
        change the upload or the working model."""

    def on_server_update(self, server: ServerContext) -> None:
        """Server: may change ``server.update`` (applied as x ← x + η_g·update) in place and the
        callback's own server state; not the received sums."""

    def on_round_end(self, round: RoundContext) -> None:
        """Server, after the global model changed: its own bookkeeping only."""

    def metrics(self) -> dict[str, float]:
        """What it adds to every round's row (client-level DP: privacy/epsilon, ...); default nothing."""
        return {}

    def files(self) -> list[tuple[str, tuple, list[dict]]]:
        """(file name, columns, rows) it appends to the run folder's CSV files after each round (a robust server:
        clients.csv); default none."""
        return []

    def stops_before(self, round_idx: int) -> bool:
        """True: the fit ends before round ``round_idx`` (0-based) runs (client-level DP: it would pass the ε
        budget); default never."""
        return False

    def summary(self, accuracy: Optional[float], loss: Optional[float], classes: int) -> str:
        """What it adds to the fit's summary line, given the final val/acc and val/loss (client-level DP: ε, δ
        and, near chance, a hint); default nothing."""
        return ""
