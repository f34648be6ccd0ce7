"""``ToyFederation``: an algorithm's hooks on toy rounds without a Trainer (as FedJAX tests
``client_init``/``client_step``/``client_final`` and ``server_update`` directly).

    fed = ToyFederation(nn.Linear(3, 2), FedDyn(alpha=0.1), [(x0, y0), (x1, y1)], lr=0.1, directory=tmp_path)
    fed.run_round(0)                      # the same FederatedLoop a fit runs, over the given clients
    fed.global_params, fed.callbacks      # x^r and the algorithm's callbacks (their server state)
    fed.client_row("feddyn_gradient", 1)  # a client's state row

Every client takes part each round (clients_per_round = M unless given); the local optimizer is SGD
with a constant lr; the server optimizer is the algorithm's; ``loss_fn(network, x, y)`` (default cross
entropy); ``parallel_clients`` trains K clients at once (fl_lightning.federation.parallel), ``client_runner``
``batched`` B = ``cohort_size`` clients as one batched model (fl_lightning.federation.batched); ``sampler``,
``runner`` (a function of the loop's LocalTrainer) and ``schedule`` replace the round's parts
(fl_lightning.federation.seams, docs/architecture.md "The round's seams").
"""
from __future__ import annotations

import os
from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from fl_lightning.algorithms import Algorithm
from fl_lightning.federation.blocks import partition_for
from fl_lightning.callbacks import CompressedUpload, FLCallback
from fl_lightning.federation.client_state import ClientStateStore
from fl_lightning.compression.codecs import Codec
from fl_lightning.data.datamodule import ClientData
from fl_lightning.federation.flat import FlatModel
from fl_lightning.federation.loop import FederatedLoop, LocalConfig
from fl_lightning.federation.local_training import LocalTrainer
from fl_lightning.assembly.connector import runner_for
from fl_lightning.assembly.fit import Fit
from fl_lightning.federation.runners import RUNNERS
from fl_lightning.federation.seams import ClientRunner, RoundSchedule, Sampler, SerialRunner
from fl_lightning.resolve import Choice, resolve_choice


class ToyFederation:
    def __init__(self, network: nn.Module, algorithm: Algorithm, clients: list[tuple[torch.Tensor, torch.Tensor]],
                 directory: str, lr: float = 0.1, batch_size: int = 2, local_epochs: int = 1,
                 clients_per_round: Optional[int] = None, weight_decay: float = 0.0, momentum: float = 0.0,
                 weighted_aggregation: bool = False, codec: Optional[Codec] = None,
                 loss_fn: Optional[Callable] = None, extra_callbacks: Sequence[FLCallback] = (),
                 parallel_clients: int = 1, sampler: Optional[Sampler] = None,
                 runner: Optional[Callable[[LocalTrainer], ClientRunner]] = None,
                 schedule: Optional[RoundSchedule] = None, client_runner: str = "serial",
                 cohort_size: Optional[int] = None, grad_clip: Optional[float] = None):
        self.algorithm = algorithm
        algorithm.check_network(network)
        self.blocks = partition_for(network, algorithm)
        self.flat = FlatModel(network, order=self.blocks.order if self.blocks else None)
        x = torch.cat([cx for cx, _ in clients])
        y = torch.cat([cy for _, cy in clients])
        offsets = [0]
        for _, cy in clients:
            offsets.append(offsets[-1] + len(cy))
        self.global_vector = self.flat.vector.detach().clone()
        self.server_optimizer = algorithm.server_optimizer([self.global_vector[:self.flat.num_params]])
        local = torch.optim.SGD([self.flat.params], lr=lr, momentum=momentum, weight_decay=weight_decay)
        self.callbacks = algorithm.callbacks() + ([CompressedUpload(codec)] if codec is not None else [])
        self.callbacks += list(extra_callbacks)  # e.g. a recorder, after the algorithm's own
        os.makedirs(directory, exist_ok=True)
        self.client_state = ClientStateStore(len(clients), directory)
        config = LocalConfig(clients_per_round or len(clients), local_epochs, batch_size, weighted_aggregation,
                             grad_clip if grad_clip is not None else algorithm.default_grad_clip(),
                             parallel_clients=parallel_clients)
        fit = Fit(len(clients), config.clients_per_round, tuple(len(cy) for _, cy in clients), batch_size=batch_size,
                  local_epochs=local_epochs, parallel_clients=parallel_clients, cohort_size=cohort_size)
        chosen = resolve_choice(client_runner, RUNNERS, ClientRunner, "client_runner")
        if chosen.cls is SerialRunner and parallel_clients > 1:
            chosen = Choice(RUNNERS["threads"], label="threads")
        loss = loss_fn or (lambda net, xb, yb: F.cross_entropy(net(xb), yb))
        self.loop = FederatedLoop(self.flat, ClientData(x, y, offsets), loss, local, config, self.callbacks,
                                  self.global_vector, self.server_optimizer, self.client_state, blocks=self.blocks,
                                  sampler=sampler, runner=runner or runner_for(chosen, fit), schedule=schedule)

    def run_round(self, round_idx: int) -> Optional[torch.Tensor]:
        return self.loop.run_round(round_idx)

    @property
    def global_params(self) -> torch.Tensor:
        return self.global_vector[:self.flat.num_params]

    def client_row(self, table: str, client_id: int) -> torch.Tensor:
        return self.client_state.tables[table].read(client_id)
