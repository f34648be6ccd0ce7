"""Up to K of a round's clients trained at the same time inside one process (``model.parallel_clients``).

Small models use two cores better as two clients side by side, one intra-op thread each, than as
one client on two threads. Each of K worker threads trains on its own ``LocalTrainer`` (the module's
working model, or one of K − 1 copies of it made once), with ``threads // K`` intra-op threads. The
clients' results are handed back in the plan's order, so the round's sums, the client-state writes
and the logged values are those of K = 1 bit for bit — at the same per-client thread count (a
convolution's result may depend on how many threads compute it).

What cannot be isolated per thread is torch's *global* generator: a network whose forward draws from
it (``nn.Dropout`` and the like) is refused for K > 1 (``check_own_randomness``). Integer buffers
(BatchNorm's ``num_batches_tracked``), which are not federated, advance on the module's network by
what every copy counted. On CUDA each worker runs on its own stream (not tested on this project's
CPU-only CI).
"""
from __future__ import annotations

import copy
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from queue import SimpleQueue
from typing import Callable, Iterator, Optional

import torch
from torch import nn

from fl_lightning.federation.contexts import ClientContext, ClientTask, RoundContext
from fl_lightning.errors import ConfigError
from fl_lightning.federation.flat import FlatModel
from fl_lightning.federation.user_module import RecordedLogs
from fl_lightning.federation.local_training import LocalTrainer
from fl_lightning.federation.seams import RUNNERS, ClientRunner, SerialRunner
from fl_lightning.federation.seeding import generator, global_rng_state, isolated_rng

Result = tuple[ClientContext, torch.Tensor, RecordedLogs]


def split_threads(parallel_clients: int, threads: int) -> int:
    """T, the intra-op threads of each of K workers: K × T ≤ the process's threads (at least 1 each)."""
    return max(1, threads // parallel_clients)


def check_own_randomness(net: nn.Module, run_forward: Callable[[], object], device: torch.device) -> None:
    """Refuses K > 1 for a network whose training-mode forward draws from torch's global generator,
    naming the innermost module that does. ``run_forward`` runs on ``net`` as it is; the caller
    restores the network's state afterwards."""
    name_of = {id(module): name for name, module in net.named_modules()}
    states: dict[int, torch.Tensor] = {}
    drawing: list[tuple[str, str]] = []  # (name, class) of every module whose forward drew

    def before(module, args):
        states[id(module)] = global_rng_state(device)

    def after(module, args, output):
        if not torch.equal(states[id(module)], global_rng_state(device)):
            drawing.append((name_of[id(module)], type(module).__name__))

    handles = [h for module in net.modules() for h in (module.register_forward_pre_hook(before),
                                                       module.register_forward_hook(after))]
    try:
        with isolated_rng(device), torch.no_grad():
            start = global_rng_state(device)
            run_forward()
            drew = not torch.equal(start, global_rng_state(device))
    finally:
        for handle in handles:
            handle.remove()
    if drew:
        name, kind = max(drawing, key=lambda item: item[0].count(".") + bool(item[0])) if drawing else ("", "")
        raise DrawsGlobalRng(f"{kind} at '{name}'" if name else f"{kind or 'loss'} (its forward)")


class DrawsGlobalRng(Exception):
    """The network's training forward drew from torch's global generator; ``where``: the innermost layer that did."""

    def __init__(self, where: str):
        super().__init__(where)
        self.where = where


def global_rng_draw(flat: FlatModel, loss_fn: Callable, clients, batch_size: int) -> Optional[str]:
    """``check_own_randomness`` on one training minibatch of the first client: the layer that draws (as
    ``"Dropout at 'features.3'"``), or None; the network (vector, integer buffers, train/eval mode) is left exactly
    as it was. The fit's ``network.global_rng_draw`` trait (fl_lightning.assembly.fit)."""
    net, device = flat.net, flat.device
    x, y = clients.of(0)
    x, y = x[:batch_size].to(device), y[:batch_size].to(device)
    saved, counters = flat.vector.clone(), [b.clone() for b in net.buffers() if not b.is_floating_point()]
    was_training = net.training
    try:
        net.train()
        check_own_randomness(net, lambda: loss_fn(net, clients.prepare(x, generator(0, device)), y), device)
        return None
    except DrawsGlobalRng as drawn:
        return drawn.where
    finally:
        net.train(was_training)
        flat.load(saved)
        for buffer, value in zip([b for b in net.buffers() if not b.is_floating_point()], counters):
            buffer.copy_(value)


@RUNNERS.register("threads")
class ClientPool(ClientRunner):
    """K local trainers and the threads that run them; ``run`` yields each client's result in plan order.

    Args:
        main: the loop's own trainer (the module's working model); K − 1 copies of it are made here.
        parallel_clients: K ≥ 2.
        threads: the process's intra-op threads, split between the workers.
    """

    def __init__(self, main: LocalTrainer, parallel_clients: int, threads: int):
        super().__init__(main)
        self.main, self.parallel_clients = main, parallel_clients
        self.threads_each = split_threads(parallel_clients, threads)
        self.trainers = [main] + [self._copy(main) for _ in range(parallel_clients - 1)]
        self._free: SimpleQueue = SimpleQueue()
        for trainer in self.trainers:
            self._free.put(trainer)
        self._streams = ({id(t): torch.cuda.Stream(main.flat.device) for t in self.trainers}
                         if main.flat.device.type == "cuda" else {})
        self._executor: Optional[ThreadPoolExecutor] = None

    @classmethod
    def from_fit(cls, trainer: LocalTrainer, fit) -> ClientRunner:
        if fit.parallel_clients > 1:
            return cls(trainer, fit.parallel_clients, torch.get_num_threads())
        return SerialRunner(trainer)

    @classmethod
    def refuse(cls, fit) -> Optional[ConfigError]:
        """A network whose forward draws from torch's global generator (threads share it)."""
        where = fit.network.global_rng_draw if fit.parallel_clients > 1 else None
        if where is None:
            return None
        return ConfigError("model.parallel_clients", f"the network's {where} draws from torch's global random "
                           "generator, which threads share, so clients trained at once would not be reproducible; "
                           "set model.parallel_clients 1")

    @staticmethod
    def _copy(main: LocalTrainer) -> LocalTrainer:
        net = copy.deepcopy(main.flat.net)
        flat = FlatModel(net, order=[segment.name for segment in main.flat.segments])
        optimizer = type(main.optimizer)([flat.params], **main.optimizer.defaults)  # the round sets its group
        return LocalTrainer(flat, optimizer, main.loss_fn, main.clients, main.config, main.callbacks,
                            main.global_vector, main.forward_context)

    def _start_thread(self) -> None:
        torch.set_num_threads(self.threads_each)  # this worker thread's own OpenMP team

    def _train(self, task: ClientTask, plan: RoundContext) -> Result:
        trainer = self._free.get()
        try:
            stream = self._streams.get(id(trainer))
            with torch.cuda.stream(stream) if stream is not None else nullcontext():
                result = trainer.run_client(task, plan, isolate_rng=False)
                result[0].keep_final_model()  # the trainer goes on to another client
            if stream is not None:
                stream.synchronize()  # the upload is complete before the main thread sums it
            return result
        finally:
            self._free.put(trainer)

    def run(self, positions: list[int], plan: RoundContext) -> Iterator[tuple[int, Result]]:
        """Trains the clients at ``positions`` of the plan, K at a time; yields (position, result) in
        order. At most 2K results wait at once (each holds its upload)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.parallel_clients, "fl-client", initializer=self._start_thread)
        threads = torch.get_num_threads()
        main_group = self.main.optimizer.param_groups[0]
        counters = self._integer_buffers(self.main)
        for trainer in self.trainers[1:]:  # the round's lr and the module's counters, on every copy
            trainer.optimizer.param_groups[0].update({k: v for k, v in main_group.items() if k != "params"})
            for mine, main in zip(self._integer_buffers(trainer), counters):
                mine.copy_(main)
        before = [t.clone() for t in counters]
        pending, upcoming = deque(), iter(positions)

        def submit_next() -> None:
            position = next(upcoming, None)
            if position is not None:
                pending.append((position, self._executor.submit(self._train, plan.clients[position], plan)))

        torch.set_num_threads(self.threads_each)  # the main thread's own ops while the workers train (the uploads
        # summed as they arrive) take one worker's share of cores: at T > 1 they would wake a team of T threads
        try:
            with isolated_rng(self.main.flat.device):  # the workers seed the global generators; no one draws
                for _ in range(2 * self.parallel_clients):
                    submit_next()
                while pending:
                    position, future = pending.popleft()
                    result = future.result()
                    submit_next()
                    yield position, result
        finally:
            for position, future in pending:
                future.cancel()
            torch.set_num_threads(threads)  # the main thread's count, as it was
        for trainer in self.trainers[1:]:  # what each copy counted, on the module's network
            for main, mine, start in zip(counters, self._integer_buffers(trainer), before):
                main.add_(mine - start)

    @staticmethod
    def _integer_buffers(trainer: LocalTrainer) -> list[torch.Tensor]:
        return [b for b in trainer.flat.net.buffers() if b is not None and not b.is_floating_point()]

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


class ClientThreads:
    """Evaluation at a client's intra-op thread count (``threads // K`` with K clients at a time, else as it
    is), so that the global model's metrics are computed with the arithmetic of every other layout at one
    thread per client: a convolution's sums depend on its thread count. ``enter``/``exit`` bracket
    an evaluation that spans several Lightning hooks."""

    def __init__(self):
        self._saved = None

    def enter(self, runner: Optional[ClientRunner]) -> None:
        if runner is not None and runner.threads_each is not None and self._saved is None:
            self._saved = torch.get_num_threads()
            torch.set_num_threads(runner.threads_each)

    def exit(self) -> None:
        if self._saved is not None:
            torch.set_num_threads(self._saved)
            self._saved = None
