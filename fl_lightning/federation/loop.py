"""``FederatedLoop``: one communication round (spec, "FedAvg" and the hooks of every algorithm).

    plan = configure_round(r)                 the sampler's clients (seeded by round)
    for client in this rank's share of plan:  the runner trains them: one at a time on one reused working
        y ← x^r                                 model, K at a time, elsewhere (federation.seams) client_init
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
from typing import Callable, ContextManager, Optional, Sequence

import numpy as np
import torch
from pytorch_lightning.utilities import rank_zero_warn

from fl_lightning.federation.blocks import BlockPartition
from fl_lightning.federation.hooks import FLCallback
from fl_lightning.federation.client_state import ClientStateStore
from fl_lightning.federation.messages import CommMeter, ReceivedSums
from fl_lightning.federation.contexts import ClientTask, RoundContext, RoundPlanner, ServerContext
from fl_lightning.federation.distributed import Collective
from fl_lightning.errors import DivergenceError
from fl_lightning.federation.flat import FlatModel
from fl_lightning.federation.user_module import LoggedValues
from fl_lightning.federation.local_training import ClientData, LocalConfig, LocalTrainer, call_hook
from fl_lightning.federation.seams import (ClientRunner, Part, RoundSchedule, Sampler, SerialRunner,
                                          UniformSampler)
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
    """Runs the rounds: configure clients, train each, aggregate, step the server. Its parts
    (fl_lightning.federation.seams) say who is asked (``sampler``), who trains them (``runner``) and when the
    server steps (``schedule``).

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
        sampler: default: S of M clients, uniformly.
        runner: builds the ClientRunner from the loop's LocalTrainer (default: one client at a time).
        schedule: default: synchronous rounds.
        received: makes where a round's uploads go, ``(channel sizes, device, ordered=)`` → ``ReceivedSums``:
            summed as they arrive (the default), or kept whole for a robust rule (fl_lightning.aggregation).
    """

    def __init__(self, flat: FlatModel, clients: ClientData, loss_fn: Callable, optimizer: torch.optim.Optimizer,
                 config: LocalConfig, callbacks: Sequence[FLCallback], global_vector: torch.Tensor, server_optimizer,
                 client_state: ClientStateStore, forward_context: Callable[[], ContextManager] = nullcontext,
                 blocks: Optional[BlockPartition] = None, collective: Optional[Collective] = None,
                 train_logs: Optional[LoggedValues] = None, sampler: Optional[Sampler] = None,
                 runner: Callable[[LocalTrainer], ClientRunner] = SerialRunner,
                 schedule: Optional[RoundSchedule] = None, received: Callable[..., ReceivedSums] = ReceivedSums):
        self.flat = flat
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
        self.planner = RoundPlanner(flat, clients, blocks, client_state)
        self.sampler = sampler or UniformSampler(len(clients), config.clients_per_round)
        self.runner = runner(self.local_trainer)
        self.schedule = schedule or RoundSchedule()
        self.new_received = received

    def _call(self, hook: str, context) -> None:
        call_hook(self.callbacks, hook, context)

    # -- the parts -----------------------------------------------------------------------
    def parts(self) -> dict[str, Part]:
        return {"sampler": self.sampler, "runner": self.runner, "schedule": self.schedule}

    def metrics(self) -> dict[str, float]:
        """What the parts log this round."""
        return {key: value for part in self.parts().values() for key, value in part.metrics().items()}

    def state_dict(self) -> dict:
        """The parts' states (for an exact resume), those that keep any."""
        return {name: state for name, part in self.parts().items() if (state := part.state_dict())}

    def load_state_dict(self, state: dict) -> None:
        for name, part in self.parts().items():
            if name in state:
                part.load_state_dict(state[name])

    def close(self) -> None:
        for part in self.parts().values():
            part.close()

    # -- configure clients (server) -----------------------------------------------------
    def sample_clients(self, round_idx: int) -> list[int]:
        rng = np.random.default_rng(derive_seed(round_idx, Purpose.SAMPLING))
        return self.sampler.sample(round_idx, rng)

    def plan(self, round_idx: int, tasks: list[ClientTask], channels: Optional[dict[str, int]] = None) -> RoundContext:
        """The context of round ``round_idx`` over ``tasks`` at the round's lr (fl_lightning.federation.contexts)."""
        return self.planner.plan(round_idx, self.optimizer.param_groups[0]["lr"], tasks, channels,
                                 self.sampler.poisson_rate)

    def configure_round(self, round_idx: int) -> RoundContext:
        everything = [(0, self.flat.numel)]
        epochs = self.config.local_epochs
        tasks = [ClientTask(cid, pos, derive_seed(round_idx, cid), self.clients.num_samples(cid), list(everything),
                            epochs) for pos, cid in enumerate(self.sample_clients(round_idx))]
        plan = self.plan(round_idx, tasks)
        self._call("configure_round", plan)
        self.schedule.planned(plan)
        self.client_state.begin_round(round_idx, [client.client_id for client in plan.clients])
        return plan

    # -- one round ----------------------------------------------------------------------
    def run_round(self, round_idx: int) -> Optional[torch.Tensor]:
        """Runs round ``round_idx`` as the schedule says; returns the reporting clients' mean local training loss
        (a 0-dim tensor), or None if no client reported (then nothing changed)."""
        return self.schedule.run(self, round_idx)

    def synchronous_round(self, round_idx: int) -> Optional[torch.Tensor]:
        """Every planned client trains, then the server steps once on what arrived (the schedule may time the
        clients and drop some: ``RoundSchedule.arrived``)."""
        plan = self.configure_round(round_idx)
        positions = self.collective.share([c.num_samples * c.local_epochs for c in plan.clients])
        return self.finish_round(round_idx, plan, self.schedule.arrived(self.runner.run(positions, plan), plan))

    def finish_round(self, round_idx: int, plan: RoundContext, trained) -> Optional[torch.Tensor]:
        """The rest of a synchronous round once ``plan`` is configured: ``trained`` (position, (client, loss sum,
        logs)) in plan order are aggregated, the client state committed, the server steps (a server whose clients
        train elsewhere, e.g. in the user's own Trainer, calls ``configure_round`` and this itself)."""
        received = self.new_received(plan.channels, self.global_vector.device, ordered=self.collective.world_size > 1)
        tally = RoundTally(len(plan.clients), self.global_vector.device)
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
                self.runner.reported(client)
                tally.add_loss(position, loss_sum, client.steps)
            tally.upload_bytes[position] = 0 if task.pooled or task.lost else client.upload.nbytes
            tally.download_bytes[position] = 0 if task.pooled else client.download.nbytes
            del client, logs  # its upload and scratch go now, not while the next client trains
        committed = tally.combine(self.collective, received, plan, self.client_state.written())
        self.client_state.end_round(committed)
        lost, non_finite = int(tally.lost.sum()), int(tally.non_finite.sum())
        self.count_traffic(tally.upload_bytes.long().tolist(), tally.download_bytes.long().tolist(),
                           clients_dropped=lost + non_finite)
        self._report_drops(round_idx, len(plan.clients), lost, non_finite, self.sampler.releases_every_round)
        reported = len(plan.clients) - lost - non_finite
        if reported or self.sampler.releases_every_round:  # e.g. Poisson sampling under DP: the noise is released
            self.server_update(round_idx, received)
        self.flat.load(self.global_vector)
        self._call("on_round_end", plan)
        return tally.mean_loss() if reported else None

    @staticmethod
    def _report_drops(round_idx: int, sampled: int, lost: int, non_finite: int, steps_anyway: bool) -> None:
        if non_finite and non_finite == sampled - lost:
            raise DivergenceError(f"round {round_idx + 1}: every client's update was NaN/inf; lower model.lr or "
                                  "model.server_lr")
        if non_finite:
            rank_zero_warn(f"round {round_idx + 1}: dropped {non_finite} client update(s) with NaN/inf")
        if lost == sampled and not steps_anyway:  # (a release every round, e.g. DP's Poisson: the server steps)
            rank_zero_warn(f"round {round_idx + 1}: none of the {sampled} sampled clients reported; the global "
                           "model and the algorithm's state are unchanged this round")

    # -- what a schedule may call (fl_lightning.federation.seams.RoundSchedule) -------------
    def task(self, client_id: int, seed: int, ranges: Optional[list[tuple[int, int]]] = None) -> ClientTask:
        """One client's task outside a synchronous round: its upload ``ranges`` (default: the whole model)."""
        return ClientTask(client_id, 0, seed, self.clients.num_samples(client_id),
                          list(ranges or [(0, self.flat.numel)]), self.config.local_epochs)

    def plan_one(self, step_idx: int, task: ClientTask) -> RoundContext:
        """The plan of one task outside a synchronous round (the model update's channel only): the callbacks that
        size messages (``configures_messages``, a codec) configure it; no other hook runs."""
        plan = self.plan(step_idx, [task], {"delta": self.flat.numel})
        for callback in self.callbacks:
            if callback.configures_messages:
                callback.configure_round(plan)
        return plan

    def new_sums(self) -> ReceivedSums:
        """Empty sums of the model update's channel, where a schedule adds what arrived."""
        return self.new_received({"delta": self.flat.numel}, self.global_vector.device)

    def num_samples(self, client_id: int) -> int:
        return self.clients.num_samples(client_id)

    def restore_working_model(self) -> None:
        """The working model holds x^r again (after a schedule trained clients on it)."""
        self.flat.load(self.global_vector)

    def train(self, task: ClientTask, plan: RoundContext) -> tuple:
        """Trains one client on the loop's working model: (client, loss sum, logs)."""
        return self.local_trainer.run_client(task, plan)

    def count_traffic(self, upload_bytes: list[int], download_bytes: list[int], clients_dropped: int = 0) -> None:
        """The bytes of one server step's clients (fl_lightning.federation.messages.CommMeter)."""
        self.comm.add_round(upload_bytes, download_bytes, clients_dropped=clients_dropped)

    def step_server(self, round_idx: int, received: ReceivedSums) -> None:
        """The server update on ``received``, then the working model holds x^{r+1}."""
        self.server_update(round_idx, received)
        self.flat.load(self.global_vector)

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
        if self.sampler.releases_every_round:  # keeping them would tell that nobody joined
            unreported = torch.zeros_like(unreported)
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
