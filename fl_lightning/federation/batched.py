"""A cohort of up to B clients trained as one batched model (``model.client_runner batched``).

The cohort's working models are the rows of one [B, numel] tensor Y (row i: client i's y), their
gradients the rows of G. Each local step runs forward and backward for every client still training
at once (``torch.func``: ``functional_call`` + ``grad_and_value`` + ``vmap`` over the stacked rows
and the clients' stacked minibatches), then the local SGD step on the stacked rows (lr, weight decay,
momentum as ``torch.optim.SGD``; each client's momentum starts at its first step). The algorithm's
hooks run per client exactly as in the serial runner (fl_lightning.federation.local_training), on a
``ClientContext`` whose ``vector``/``params``/``grad`` are row views of Y and G.

Each client draws its batch order and augmentation from its own streams (as serially), so a client
trains the same whatever B is. Clients with different sample counts take different numbers of steps:
a finished client's rows stop changing (no step, no hooks); at a step where minibatches differ in
size (a client's last, partial one) each size is one vmapped call, so every loss is the mean over its
real samples, as serially. The results equal the serial runner's to float rounding (vmap sums in
another order; tests/test_batched_runner.py: ≤ 1e-5 relative after two rounds).

What it cannot batch is refused before the run (``batched_refusal``, one ConfigError, read from the fit's traits).
"""
from __future__ import annotations

from typing import Callable, Iterator, Optional

import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from fl_lightning.errors import ConfigError
from fl_lightning.federation.contexts import ClientContext, ClientTask, RoundContext
from fl_lightning.federation.local_training import LocalTrainer, call_hook, clip_gradient_, overriding
from fl_lightning.federation.seams import RUNNERS, ClientRunner
from fl_lightning.federation.seeding import Stream, global_rng_state, isolated_rng, seed_global_rng, stream_seed
from fl_lightning.federation.stack import Stack
from fl_lightning.federation.user_module import RecordedLogs

FIELD = "model.client_runner"
BYTES_PER_FLOAT = 4
COPIES_PER_CLIENT = 8  # rows of Y, G, momentum, vmap's gathered rows and per-sample gradients, headroom


class _LossOf(nn.Module):
    """``loss_fn(net, x, y)`` as a module, so ``functional_call`` can swap the network's parameters."""

    def __init__(self, net: nn.Module, loss_fn: Callable):
        super().__init__()
        self.net, self.loss_fn = net, loss_fn

    def forward(self, x, y):
        return self.loss_fn(self.net, x, y)


def batched_refusal(fit, name: str) -> Optional[ConfigError]:
    """What the batched runner (``model.client_runner name``) cannot train as the serial one does, in one line
    naming the reason, read from the fit's traits (fl_lightning.assembly.fit)."""
    network = fit.network
    if network.is_lightning:
        reason = "the network is a LightningModule whose training_step may keep its own state"
    elif fit.local_trainer:
        reason = "model.local_trainer trains each client in its own pl.Trainer"
    elif fit.parallel_clients > 1:
        reason = "model.parallel_clients > 1 is the threads runner"
    elif fit.schedule_epoch != "round":
        reason = f"the schedule trains one client per {fit.schedule_epoch}, not a round's cohort"
    elif network.floating_buffers:
        reason = "the network has floating buffers (e.g. BatchNorm running statistics), which are not batched"
    elif fit.local_optimizer != "sgd":
        reason = "the local optimizer is the network's own, not SGD(model.lr, model.weight_decay, model.client_momentum)"
    elif network.global_rng_draw is not None:
        reason = "the network's forward draws from torch's global random generator (e.g. dropout)"
    else:
        return None
    return ConfigError(FIELD, f"{name} cannot train this run: {reason}; use model.client_runner serial")


def cohort_size(requested: Optional[int], clients: int, numel: int, device: torch.device) -> int:
    """B: as requested, else every client of the round on the CPU, else as many as a quarter of the
    device's free memory holds at ``COPIES_PER_CLIENT`` model copies each."""
    if requested is not None:
        return max(1, min(requested, clients))
    if device.type != "cuda":
        return max(1, clients)
    free, _ = torch.cuda.mem_get_info(device)
    return max(1, min(clients, free // 4 // (COPIES_PER_CLIENT * numel * BYTES_PER_FLOAT)))


@RUNNERS.register("batched")
class BatchedRunner(ClientRunner):
    """Trains the plan's clients B at a time on stacked weights; ``run`` yields each client's result
    (``LocalTrainer.run_client``'s) in plan order.

    Args:
        main: the loop's own trainer: its loss, data, config, callbacks, optimizer settings and, for
            ∇f_i(x^r) and ∇f_i(x^r; ζ), its working model (which holds x^r while clients train).
        cohort: B, or None (``cohort_size``).
        compile_options: ``torch.compile`` the batched forward/backward with these options (None: run it eagerly).
    """

    compile_options: Optional[dict] = None

    name = "batched"

    @classmethod
    def from_fit(cls, trainer: LocalTrainer, fit) -> ClientRunner:
        return cls(trainer, fit.cohort_size, cls.compile_options)

    @classmethod
    def refuse(cls, fit) -> Optional[ConfigError]:
        return batched_refusal(fit, cls.name)

    def __init__(self, main: LocalTrainer, cohort: Optional[int] = None, compile_options: Optional[dict] = None):
        super().__init__(main)
        self.requested = cohort
        self.callbacks = main.callbacks
        self._gradient_hooks = overriding(self.callbacks, "on_local_gradient")
        self._step_hooks = overriding(self.callbacks, "on_local_step_end")
        self._replays = any(cb.replays_minibatch for cb in self._gradient_hooks)
        flat = main.flat
        self._segments = [s for s in flat.segments if s.is_param]
        self._module = _LossOf(flat.net, main.loss_fn)
        gradients = vmap(grad_and_value(self._loss))
        self._vmapped = gradients if compile_options is None else torch.compile(gradients, **compile_options)
        self.cohort = 0  # B of the last round

    def _loss(self, params: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return functional_call(self._module, params, (x, y))

    def _gradients(self, rows: torch.Tensor, x: torch.Tensor, y: torch.Tensor, out: Optional[torch.Tensor] = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """∇ [k, d] (into ``out`` when given) and loss [k] of the k ``rows``. vmap differentiates each
        parameter's own [k, ...] view of the rows (not views of one row inside vmap: their backward would
        scatter every parameter's gradient into a zero row of d floats) and the gradients are concatenated
        once, in the flat layout's order."""
        k = rows.shape[0]
        params = {f"net.{s.name}": rows[:, s.start:s.stop].view(k, *s.shape) for s in self._segments}
        grads, loss = self._vmapped(params, x, y)
        flat = [grads[name].flatten(1) for name in params]
        return (torch.cat(flat, dim=1) if out is None else torch.cat(flat, dim=1, out=out)), loss

    # -- the ClientRunner interface --------------------------------------------------------
    def run(self, positions: list[int], plan: RoundContext) -> Iterator[tuple[int, tuple]]:
        flat = self.trainer.flat
        self.cohort = cohort_size(self.requested, len(positions), flat.numel, flat.device)
        for first in range(0, len(positions), self.cohort):
            cohort = positions[first:first + self.cohort]
            with isolated_rng(flat.device):
                results = self._train_cohort([plan.clients[p] for p in cohort], plan)
            yield from zip(cohort, results)
            del results

    def metrics(self) -> dict:
        return {"clients/cohort": float(self.cohort)}

    # -- one cohort -------------------------------------------------------------------------
    def _train_cohort(self, tasks: list[ClientTask], plan: RoundContext) -> list[tuple]:
        main = self.trainer
        group = main.optimizer.param_groups[0]
        lr, wd, momentum = group["lr"], group.get("weight_decay", 0.0), group.get("momentum", 0.0)
        stack = Stack(self._gradients, main.global_vector, len(tasks), main.flat.num_params, momentum,
                      self._replays, main.forward_context, main.flat.net, pad=self.compile_options is not None)
        clients = []
        for row, task in enumerate(tasks):
            weight = task.num_samples if main.config.weighted_aggregation else 1.0
            client = ClientContext.with_optimizer(
                task, plan.round, plan.lr, group, weight, stack.models[row], stack.grads[row], main.global_vector,
                full_gradient=lambda c, row=row: self._full_gradients(stack, clients)[row],
                gradient_at_global=lambda c, row=row: stack.at_global[row])
            client.download.add("model", 0, main.global_vector)
            clients.append(client)
        for client in clients:  # every client exists first: ∇f_i(x^r) is computed for all at once
            call_hook(self.callbacks, "on_client_start", client)
        batches = [main.minibatches(task) for task in tasks]
        active = list(range(len(tasks)))
        while True:
            drawn = [(row, next(batches[row], None)) for row in active]
            active = [row for row, batch in drawn if batch is not None]
            if not active:
                break
            for row, batch in drawn:
                if batch is not None:
                    clients[row].batch = batch
            stack.forward_backward([clients[row].batch for row in active], active)
            self._local_step(clients, active, stack, lr, wd)
        return [self._finish(client, stack.losses[row]) for row, client in enumerate(clients)]

    def _full_gradients(self, stack: "Stack", clients: list[ClientContext]) -> torch.Tensor:
        """∇f_i(x^r) of every client of the cohort (rows), computed once, batch by batch as
        ``LocalTrainer.full_gradient`` does, with each client's own augmentation stream."""
        if stack.full is None:
            main = self.trainer
            passes = []
            for client in clients:
                n = len(main.data_of(client.task)[1])
                passes.append([(xb, yb, n) for xb, yb in main.full_batches(client.task)])
            stack.full = torch.zeros_like(stack.grads)
            for k in range(max(len(p) for p in passes)):
                rows = [row for row, p in enumerate(passes) if k < len(p)]
                stack.add_full_gradient([passes[row][k] for row in rows], rows)
        return stack.full

    def _local_step(self, clients, active, stack: "Stack", lr: float, wd: float) -> None:
        """Clip, the gradient hooks, SGD on the active rows, the step hooks: the serial step's order."""
        clip = self.trainer.config.grad_clip
        if clip is not None:
            for row in active:
                clip_gradient_(stack.grads[row], clip)
        for row in active:
            client = clients[row]
            if self._replays:
                client.batch_rng_state = global_rng_state(stack.models.device)
            for cb in self._gradient_hooks:
                cb.on_local_gradient(client)
        stack.sgd_step(active, lr, wd, first=clients[active[0]].steps == 0)  # every client starts at step 0
        for row in active:
            client = clients[row]
            for cb in self._step_hooks:
                cb.on_local_step_end(client)
            client.steps += 1

    def _finish(self, client: ClientContext, loss_sum: torch.Tensor) -> tuple:
        """Upload Δ = y − x^r over the client's ranges, its end hooks, its y kept (Y is the next cohort's)."""
        client.batch, client.batch_rng_state = (), None
        seed_global_rng(stream_seed(client.task.seed, Stream.DROPOUT), client.vector.device)
        self.trainer.end_client(client)
        client.keep_final_model()
        return client, loss_sum, RecordedLogs()


@RUNNERS.register("batched_compiled")
class CompiledBatchedRunner(BatchedRunner):
    """``BatchedRunner`` with the cohort's forward/backward ``torch.compile``d: for a GPU, where a round is
    bound by kernel launches (docs/scale_out.md); compiling takes about a minute, once per minibatch size."""

    name = "batched_compiled"
    compile_options = {}
