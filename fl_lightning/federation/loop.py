"""``FederatedLoop``: one communication round (spec, "FedAvg" and the hooks of every algorithm).

    plan = configure_round(r)                 sample S of M clients (seeded by round)
    for client in this rank's share of plan:  one at a time on one reused working model, or K at a
        y ← x^r                                 time (fl_lightning.federation.parallel)       client_init
        T local SGD steps                       (fl_lightning.federation.local_training)      client_step
        upload Δ = y − x^r over upload_ranges                                       client_final
        received.add(upload)                    in plan order, if it arrives and is finite
    uploads combined over ranks, in plan order (one process: nothing to do; fl_lightning.federation.distributed)
    x^{r+1} = server_optimizer.step(g = −Δ̄)   server_update (FLCallbacks may transform Δ̄ first);
                                              skipped if no client reported

Algorithms change this only through ``FLCallback`` hooks (fl_lightning.callbacks.base), each called
with a typed context (fl_lightning.federation.contexts); per-client vectors they keep across rounds live in the
client-state store (fl_lightning.federation.client_state).
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Callable, ContextManager, Iterator, Optional, Sequence

import numpy as np
import torch
from pytorch_lightning.utilities import rank_zero_warn

from fl_lightning.federation.blocks import BlockPartition
from fl_lightning.callbacks.base import FLCallback
from fl_lightning.federation.client_state import ClientStateStore
from fl_lightning.compression.accounting import CommMeter, ReceivedSums
from fl_lightning.federation.contexts import ClientTask, RoundContext, ServerContext
from fl_lightning.data.datamodule import ClientData
from fl_lightning.federation.distributed import Collective
from fl_lightning.errors import DivergenceError
from fl_lightning.federation.flat import FlatModel
from fl_lightning.federation.user_module import LoggedValues
from fl_lightning.federation.local_training import LocalConfig, LocalTrainer, call_hook
from fl_lightning.federation.parallel import ClientPool
from fl_lightning.federation.batched import BatchedRunner
from fl_lightning.federation.seeding import Purpose, derive_seed


class RoundTally:
    """Per position in the round's plan: bytes each way, what became of the client's upload, and the
    reporting clients' loss sums and step counts. Rows are filled on the rank that trained the client,
    then combined over ranks with the round's uploads (``combine``); the mean loss adds them in plan order."""

    def __init__(self, num_clients: int, device: torch.device):
        rows = torch.zeros(6, num_clients, dtype=torch.float64, device=device)
        self._rows = rows
        self.upload_bytes, self.download_bytes, self.lost, self.non_finite, self.loss, self.steps = rows.unbind()
        self.reported: list[int] = []

    def add_loss(self, position: int, loss_sum: torch.Tensor, steps: int) -> None:
        self.loss[position] = loss_sum.float()  # fp32, as the loss (exact in the fp64 row)
        self.steps[position] = steps

    def mean_loss(self) -> torch.Tensor:
        """Σ loss / Σ steps over the reporting clients, summed in plan order in fp32."""
        loss, steps = torch.zeros(2, dtype=torch.float32, device=self._rows.device).unbind()
        for position in self.reported:
            loss += self.loss[position].float()
            steps += self.steps[position].float()
        return loss / steps

    def combine(self, collective: Collective, received: ReceivedSums, plan: RoundContext,
                written: dict[str, set[int]]) -> dict[str, list[int]]:
        """Combines everything over the ranks: the rows and which clients' state rows were written (one
        small collective), then the uploads (``ReceivedSums.combine``). Returns, per client-state table,
        the clients whose rows to commit."""
        tables = sorted(written)
        device = self._rows.device
        flags = torch.tensor([[float(client.client_id in written[name]) for client in plan.clients] for name in tables],
                             dtype=torch.float64, device=device).reshape(len(tables), len(plan.clients))
        packed = collective.sum_(torch.cat([self._rows.flatten(), flags.flatten()]))  # one rank's value + zeros: exact
        rows, flags = packed.split([self._rows.numel(), flags.numel()])
        self._rows.copy_(rows.view_as(self._rows))
        reported = (self.lost == 0) & (self.non_finite == 0)  # every position was trained on one rank
        self.reported = [p for p in range(len(plan.clients)) if bool(reported[p])]
        if collective.world_size > 1:
            received.combine(collective)
        flags = flags.view(len(tables), len(plan.clients)).tolist()
        return {name: [client.client_id for client, flag in zip(plan.clients, flags[t]) if flag]
                for t, name in enumerate(tables)}


class FederatedLoop:
    """Runs the rounds: configure clients, train each, aggregate, step the server.

    Args:
        optimizer: the local optimizer over ``flat.params``; its first param group's lr and
            weight_decay are the round's (the lr schedule steps it).
        global_vector: x^r (parameters, then floating buffers); its first ``num_params`` entries are
            the parameters ``server_optimizer`` steps.
        server_optimizer: anything with ``step()`` over ``global_vector[:num_params]`` (the module
            passes Lightning's optimizer wrapper, so each round is one Lightning optimizer step).
        client_state: where callbacks keep per-client vectors across rounds.
        collective: this process's rank among the run's processes (default: the only one).
        train_logs: receives what the network's own ``self.log`` calls logged during the round.
    """

    def __init__(self, flat: FlatModel, clients: ClientData, loss_fn: Callable, optimizer: torch.optim.Optimizer,
                 config: LocalConfig, callbacks: Sequence[FLCallback], global_vector: torch.Tensor, server_optimizer,
                 client_state: ClientStateStore, forward_context: Callable[[], ContextManager] = nullcontext,
                 blocks: Optional[BlockPartition] = None, collective: Optional[Collective] = None,
                 train_logs: Optional[LoggedValues] = None, systems=None):
        self.flat = flat
        self.systems = systems  # issue 32: a fl_lightning.systems.RoundSimulator, or None (no simulation)
        self.blocks = blocks
        self.clients = clients
        self.config = config
        self.callbacks = list(callbacks)
        self.global_vector = global_vector
        self.server_optimizer = server_optimizer
        self.client_state = client_state
        self.collective = collective or Collective()
        self.comm = CommMeter(flat.num_params)
        self.local_trainer = LocalTrainer(flat, optimizer, loss_fn, clients, config, self.callbacks, global_vector,
                                          forward_context)
        self.train_logs = train_logs  # where the network's own self.log calls go, in plan order
        self.pool: Optional[ClientPool] = None
        self.elsewhere = None  # issue 34: clients that train on other machines (fl_lightning.deploy.remote)
        unsafe = [type(cb).__name__ for cb in self.callbacks if not cb.thread_safe]
        if config.parallel_clients > 1 and unsafe:
            rank_zero_warn(f"{', '.join(unsafe)} declares thread_safe = False: clients train one at a time "
                           f"(model.parallel_clients {config.parallel_clients} ignored)")
        elif config.parallel_clients > 1:
            self.pool = ClientPool(self.local_trainer, config.parallel_clients, torch.get_num_threads())
        self.runner = None  # model.client_runner batched: B clients as one batched model
        if config.client_runner == "batched" and unsafe:
            rank_zero_warn(f"{', '.join(unsafe)} declares thread_safe = False: clients train one at a time "
                           "(model.client_runner batched ignored)")
        elif config.client_runner == "batched":
            self.runner = BatchedRunner(self.local_trainer, config.cohort_size)

    def _call(self, hook: str, context) -> None:
        call_hook(self.callbacks, hook, context)

    # -- configure clients (server) -----------------------------------------------------
    def sample_clients(self, round_idx: int) -> list[int]:
        rng = np.random.default_rng(derive_seed(round_idx, Purpose.SAMPLING))
        if self.systems is not None:  # issue 32: only clients online at the round's start (policy's count)
            return self.systems.sample(rng, self.config.clients_per_round)
        if self.config.poisson_rate is not None:  # issue 31: each client independently, with probability q
            return np.flatnonzero(rng.random(len(self.clients)) < self.config.poisson_rate).tolist()
        if self.config.excluded_clients:  # issue 33: clients held out of training (pval_new/*)
            eligible = np.setdiff1d(np.arange(len(self.clients)), self.config.excluded_clients)
            return sorted(rng.choice(eligible, self.config.clients_per_round, replace=False).tolist())
        return sorted(rng.choice(len(self.clients), self.config.clients_per_round, replace=False).tolist())

    def configure_round(self, round_idx: int) -> RoundContext:
        everything = [(0, self.flat.numel)]
        epochs = self.config.local_epochs
        tasks = [ClientTask(cid, pos, derive_seed(round_idx, cid), self.clients.num_samples(cid), list(everything),
                            epochs) for pos, cid in enumerate(self.sample_clients(round_idx))]
        if self.config.client_dropout > 0:
            lost = np.random.default_rng(derive_seed(round_idx, Purpose.FAILURE)).random(len(tasks))
            for task, draw in zip(tasks, lost):
                task.lost = bool(draw < self.config.client_dropout)
        # "delta": model updates (params and buffers); "control": control-variate updates (params)
        plan = RoundContext(round_idx, self.optimizer.param_groups[0]["lr"], tasks,
                            {"delta": self.flat.numel, "control": self.flat.num_params}, len(self.clients),
                            self.flat.num_params, self.flat.numel, self.blocks, self.client_state, self.flat.device,
                            self.clients.offsets[-1], tuple(self.flat.segments))
        self._call("configure_round", plan)
        if self.systems is not None:  # issue 32: partial work — each client's step budget by the deadline
            self.systems.budget_steps(plan, self.flat.numel)
        self.client_state.begin_round(round_idx, [client.client_id for client in plan.clients])
        return plan

    # -- one round ----------------------------------------------------------------------
    def run_round(self, round_idx: int) -> Optional[torch.Tensor]:
        """Runs round ``round_idx``; returns the reporting clients' mean local training loss (a 0-dim
        tensor), or None if no client reported (then nothing changed)."""
        if getattr(self.systems, "replaces_rounds", False):  # issue 32: FedBuff, one server step
            return self.systems.step(self, round_idx)
        plan = self.configure_round(round_idx)
        received = ReceivedSums(plan.channels, self.global_vector.device, ordered=self.collective.world_size > 1)
        tally = RoundTally(len(plan.clients), self.global_vector.device)
        positions = self.collective.share([c.num_samples * c.local_epochs for c in plan.clients])
        trained = self.trained_clients(positions, plan)
        if self.systems is not None:  # issue 32: clients timed; those the round policy drops become lost
            trained = self.systems.admit(trained, plan, self.config.clients_per_round)
        for position, (client, loss_sum, logs) in trained:
            task = plan.clients[position]
            if self.train_logs is not None:
                self.train_logs.key = position
                logs.replay(self.train_logs)
            if task.lost:
                tally.lost[position] = 1
            elif not client.upload.is_finite():  # dropped, not averaged into the model
                tally.non_finite[position] = 1
            else:
                received.position = position
                received.add(client.upload, delta_weight=client.weight)
                client.received = received
                self.client_reported(client)
                tally.add_loss(position, loss_sum, client.steps)
            tally.upload_bytes[position] = 0 if task.pooled or task.lost else client.upload.nbytes
            tally.download_bytes[position] = 0 if task.pooled else client.download.nbytes
            del client, logs  # its upload and scratch go now, not while the next client trains
        committed = tally.combine(self.collective, received, plan, self.client_state.written())
        self.client_state.end_round(committed)
        lost, non_finite = int(tally.lost.sum()), int(tally.non_finite.sum())
        self.comm.add_round(tally.upload_bytes.long().tolist(), tally.download_bytes.long().tolist(),
                            clients_dropped=lost + non_finite)
        self._report_drops(round_idx, len(plan.clients), lost, non_finite)
        reported = len(plan.clients) - lost - non_finite
        if reported:
            self.server_update(round_idx, received)
        self.flat.load(self.global_vector)
        self._call("on_round_end", plan)
        return tally.mean_loss() if reported else None

    @staticmethod
    def _report_drops(round_idx: int, sampled: int, lost: int, non_finite: int) -> None:
        if non_finite and non_finite == sampled - lost:
            raise DivergenceError(f"round {round_idx + 1}: every client's update was NaN/inf; lower model.lr or "
                                  "model.server_lr")
        if non_finite:
            rank_zero_warn(f"round {round_idx + 1}: dropped {non_finite} client update(s) with NaN/inf")
        if lost == sampled:
            rank_zero_warn(f"round {round_idx + 1}: none of the {sampled} sampled clients reported; the global "
                           "model and the algorithm's state are unchanged this round")

    def client_reported(self, client) -> None:
        """The client's upload arrived: ``on_client_reported``. Clients elsewhere ran it where they keep their
        state; what it derived for the server arrives with the upload."""
        if self.elsewhere is not None:
            self.elsewhere.reported(client)
        else:
            self._call("on_client_reported", client)

    def trained_clients(self, positions: list[int], plan: RoundContext) -> Iterator[tuple[int, tuple]]:
        """(position, (client, loss sum, logs)) for each of this rank's clients, in plan order."""
        if self.elsewhere is not None:
            yield from self.elsewhere.run(positions, plan)
            return
        if self.pool is not None or self.runner is not None:
            yield from (self.runner or self.pool).run(positions, plan)
            return
        for position in positions:
            yield position, self.local_trainer.run_client(plan.clients[position], plan)

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.local_trainer.optimizer

    # -- aggregate (server) -------------------------------------------------------------
    def server_update(self, round_idx: int, received: ReceivedSums) -> None:
        """Parameters: the server optimizer steps on the pseudo-gradient g = −Δ̄ (after FLCallbacks
        transform Δ̄; FedAvg's SGD(lr=η_g) gives x + η_g Δ̄). Floating buffers take the mean, never stepped."""
        mean = received.mean("delta")
        d = self.flat.num_params
        update = mean[:d]
        self._call("on_server_update", ServerContext(round_idx, update, received, self.global_vector[:d],
                                                     len(self.clients), self.blocks))
        server_params = self.server_optimizer.param_groups[0]["params"][0]
        unreported = received.weight("delta")[:d] == 0  # e.g. a FedBCGD block whose clients all dropped
        kept = self._server_coordinates(unreported) if bool(unreported.any()) else []
        server_params.grad = update.neg_()
        self.server_optimizer.step()
        server_params.grad = None
        for tensor, values in kept:  # a coordinate nobody reported stays as it was: x, momentum, moments
            tensor[unreported] = values
        self.global_vector[d:].add_(mean[d:])

    def _server_coordinates(self, mask: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(tensor, its values at ``mask``) for x^r's parameters and the server optimizer's state of them."""
        params = self.server_optimizer.param_groups[0]["params"][0]
        state = self.server_optimizer.state.get(params, {})
        tensors = [params] + [t for t in state.values() if isinstance(t, torch.Tensor) and t.shape == params.shape]
        return [(tensor, tensor[mask].clone()) for tensor in tensors]

    def is_finite(self) -> bool:
        return bool(torch.isfinite(self.global_vector).all())
