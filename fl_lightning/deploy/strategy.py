"""Any registered algorithm as a Flower strategy for the user's own ServerApp (docs/callbacks_outside_fl_lightning.md).

``AlgorithmStrategy`` takes the form of Flower 1.42's message-API strategies (``flwr.serverapp.strategy.Strategy``:
``configure_train`` / ``aggregate_train`` / ``configure_evaluate`` / ``aggregate_evaluate``, run by
``strategy.start(grid=..., initial_arrays=..., num_rounds=...)``). Its server side is ``InProcessServer``
(fl_lightning.assembly.outside), the same ``FederatedLoop`` as ``fl-lightning fit``: the seeded sampler, the algorithm's
``configure_round`` (FedBCGD's blocks), the received sums, the server hooks and the server optimizer. Only the
transport differs: each sampled client's job goes to the SuperNode holding that partition as Flower records
(fl_lightning.deploy.protocol: the same job and reply as ``fl-lightning flower-local``'s), the user's ClientApp trains it with ``fl_lightning.deploy.client_helper.fit_reply`` and
replies with the upload as sent (its parts: the block and the shared block, Δc, a codec's message), the derived sums
and the counted download. Per-client rows (c_i, h_i, residuals) stay on the node (``context.state``), as in a fit
they stay with the client; the server's state (x^r, c, h, momentum) stays here::

    strategy = AlgorithmStrategy(FedBCGD(num_blocks=5, server_momentum=0.5), model=Net(), num_clients=10,
                                 per_round=5, seed=0)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(Net().state_dict()), num_rounds=20)

Before the first round every node is asked (a ``query`` message, ``client_helper.answer_join``) which partition it
holds (its ``partition-id``): client i of the sampler is the node with partition i.

``checkpoint=PATH``: the strategy's state (``state_dict``: the server's x^r, momentum, c, the client-state store's
index, the counted bytes, which round of each client was aggregated, the traffic) is saved there after every round;
a ServerApp started again with the same options and PATH (a new ``flwr run``) loads it and runs the rounds left of
``num_rounds``, ending as an unbroken run would (per-client rows stay on the nodes: ``client_helper``'s
``state-dir``).
"""
from __future__ import annotations

import os
from logging import INFO, WARNING
from typing import Iterable, Optional

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy
from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords, sample_nodes
from flwr.supercore import log

from fl_lightning.assembly.outside import InProcessServer
from fl_lightning.class_paths import class_path
from fl_lightning.deploy import protocol
from fl_lightning.deploy.join import Membership
from fl_lightning.errors import ConfigError, FLUserError, refuse_in_one_line
from fl_lightning.runs.files import save_atomically

FIELD = "AlgorithmStrategy"
FORMAT = 1


def setup(server: InProcessServer, job) -> dict:
    """What a user's ClientApp builds the algorithm's hooks from (``fit_reply``): the job's ``setup``."""
    codec = server.codec
    return {"algorithm": server.algorithm.spec(), "algorithm_name": job.algorithm,
            "compression": "none" if codec is None else {"class_path": class_path(type(codec)),
                                                         "init_args": codec.options()},
            "num_clients": server.num_clients, "per_round": server.per_round, "seed": server.seed,
            "num_samples": server.num_samples, "weighted": job.weighted, "grad_clip": job.grad_clip,
            "local_epochs": server.local_epochs, "segments": [[name, list(shape)] for name, shape in job.segments]}


class AlgorithmStrategy(Strategy):
    """Args:
        algorithm: a registry name, an ``Algorithm`` or its options as a mapping with ``name`` (as InProcessServer).
        model: the network the ServerApp and the ClientApps train (its layout, blocks and floating buffers);
            ``start(initial_arrays=...)`` gives x^0.
        num_clients: M (node partitions 0..M-1); per_round: S (default M); seed: the run seed.
        compression, local_epochs, num_samples, weighted_aggregation, grad_clip, server_optimizer, directory,
            aggregator, attack, sampler, privacy: as ``InProcessServer`` (and ``fl-lightning fit``'s ``--model.*``; refused there, at
            construction, in one line).
        fraction_evaluate: the share of nodes sent the global model after each round (0: no federated evaluation).
        join_timeout: seconds ``start`` waits for M nodes to connect.
        checkpoint: a path: the state saved after every round, and resumed from in ``start`` if it exists.
    """

    def __init__(self, algorithm="fedavg", *, model: torch.nn.Module, num_clients: int,
                 per_round: Optional[int] = None, seed: int = 0, compression=None,
                 local_epochs: Optional[int] = None, num_samples=None, weighted_aggregation: bool = False,
                 grad_clip: Optional[float] = None, server_optimizer=None, directory: Optional[str] = None,
                 fraction_evaluate: float = 1.0, join_timeout: float = 120.0, checkpoint: Optional[str] = None,
                 aggregator=None, attack=None, sampler=None, privacy=None):
        self.server = InProcessServer(model, algorithm=algorithm, clients=num_clients, per_round=per_round, seed=seed,
                                      compression=compression, local_epochs=local_epochs, num_samples=num_samples,
                                      weighted_aggregation=weighted_aggregation, grad_clip=grad_clip,
                                      server_optimizer=server_optimizer, directory=directory, aggregator=aggregator,
                                      attack=attack, sampler=sampler, privacy=privacy, runner=protocol.NodeClients,
                                      field=FIELD)
        self.clients = self.server.runner
        self.fraction_evaluate, self.join_timeout, self.checkpoint = fraction_evaluate, join_timeout, checkpoint
        self.node_of: dict[int, int] = {}
        self.sent: dict[int, tuple] = {}  # client → (job, sent message bytes) of the open round
        self.traffic: list[dict] = []  # per round and client: the bytes in Flower's messages and the counted bytes

    # -- start: which node holds which partition ------------------------------------------------------
    def start(self, grid: Grid, initial_arrays: ArrayRecord, num_rounds: int = 3, timeout: float = 3600, **kwargs):
        """Loads x^0 from ``initial_arrays`` (or the state in ``checkpoint``), asks the nodes their partitions, then
        Flower's own round loop for the rounds left of ``num_rounds`` (Flower numbers them from 1 again)."""
        if self.checkpoint and os.path.exists(self.checkpoint) and self.server.round_idx == 0:
            self.load(self.checkpoint)
            log(INFO, "%s: resumed from %s after round %s of %s", FIELD, self.checkpoint, self.server.round_idx,
                num_rounds)
        self._load_initial(initial_arrays)
        self.join(grid)
        left = max(0, num_rounds - self.server.round_idx)
        result = super().start(grid, ArrayRecord(self.global_state()), num_rounds=left, timeout=timeout, **kwargs)
        result.arrays = ArrayRecord(self.global_state())
        return result

    def _load_initial(self, arrays: ArrayRecord) -> None:
        server = self.server
        if server.round_idx != 0:
            return  # a strategy started again goes on from its own x^r
        try:
            server.net.load_state_dict(arrays.to_torch_state_dict())
        except RuntimeError as err:
            raise refuse_in_one_line(ConfigError(f"{FIELD}.start(initial_arrays=...)", "is not the state dict of "
                                                 f"the strategy's model: {str(err).splitlines()[0]}; give "
                                                 "ArrayRecord(model.state_dict()) of the same network")) from None
        server.global_vector.copy_(server.flat.vector.detach())  # the parameters are views of flat.vector

    def join(self, grid: Grid) -> dict[int, int]:
        """{client: node id}: every node answers its ``partition-id`` (``client_helper.answer_join``;
        fl_lightning.deploy.join, as flower-local's nodes)."""
        membership = Membership(grid, self.server.run_id, None, None, fresh=True,
                                partitions=self.server.num_clients)
        try:
            membership.wait_for(self.server.num_clients, self.join_timeout)
        except FLUserError as err:
            raise refuse_in_one_line(err) from None
        self.node_of = membership.node_of
        return self.node_of

    # -- a round ---------------------------------------------------------------------------------------
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """The round's sampled clients (fl-lightning fit's sampler and plan), one message each to its node."""
        if not self.node_of:
            self.join(grid)
        jobs = self.server.start_round()
        out, self.sent = [], {}
        settings = setup(self.server, jobs[0]) if jobs else None  # the same for every job of the run
        for job in jobs:
            content = self.clients.job(self.server.run_id, job.plan, job.task.position, settings)
            content["config"] = ConfigRecord({**dict(config), "server-round": server_round})
            message = Message(content, dst_node_id=self.node_of[job.client_id], message_type=MessageType.TRAIN,
                              group_id=str(server_round))
            self.sent[job.client_id] = (job, protocol.wire_bytes(message))
            out.append(message)
        log(INFO, "configure_train: %s of %s clients (%s)", len(jobs), self.server.num_clients,
            self.server.algorithm.name)
        return out

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """The replies rebuilt into the loop's client contexts, then fl-lightning fit's server step."""
        server, received = self.server, {}
        for reply in replies:
            error = protocol.failure(reply)
            if error is not None:
                log(WARNING, "round %s: node %s did not report: %s", server_round, reply.metadata.src_node_id, error)
                continue
            result = protocol.read_reply(reply.content)
            if result.run_id != server.run_id or result.round != server.round_idx:
                raise refuse_in_one_line(ConfigError(FIELD, f"a reply for round {result.round + 1} of run "
                                                     f"{result.run_id[:8]} reached round {server.round_idx + 1} "
                                                     f"of run {server.run_id[:8]}: reply to each train message with "
                                                     "fit_reply(message, ...) of that message"))
            received[result.client_id] = (result, protocol.wire_bytes(reply))
        for client_id, (job, sent_bytes) in self.sent.items():
            result, reply_bytes = received.get(client_id, (None, 0))
            job.result = self.clients.client(job.plan, job.task.position, result)  # no reply: a lost client
            self.traffic.append(self.clients.traffic(job.plan, job.task.position, self.node_of[client_id], sent_bytes,
                                                     reply_bytes, result, job.result[0]))
        done = server.round_idx + 1
        loss = server.end_round()
        self.sent = {}
        if self.checkpoint:
            self.save(self.checkpoint)
        rows = [row for row in self.traffic if row["round"] == done]
        metrics = {"message-bytes-sent": sum(r["sent_message_bytes"] for r in rows),
                   "message-bytes-received": sum(r["received_message_bytes"] for r in rows),
                   "upload_d": server.comm.upload_d, "clients-reported": sum(r["reported"] for r in rows)}
        if loss is not None:
            metrics["train_loss"] = float(loss)
        return ArrayRecord(server.global_state()), MetricRecord(metrics)

    # -- federated evaluation: the global model to the nodes' own evaluate ----------------------------
    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        if self.fraction_evaluate <= 0.0:
            return []
        nodes = sorted(grid.get_node_ids())
        if self.fraction_evaluate < 1.0:
            nodes, _ = sample_nodes(grid, 1, max(1, int(len(nodes) * self.fraction_evaluate)))
        record = RecordDict({"arrays": arrays, "config": ConfigRecord({**dict(config), "server-round": server_round})})
        return [Message(record, dst_node_id=node, message_type=MessageType.EVALUATE, group_id=str(server_round))
                for node in nodes]

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> Optional[MetricRecord]:
        """The nodes' MetricRecords, averaged weighted by their ``num-examples`` (as Flower's FedAvg)."""
        contents = [reply.content for reply in replies if not reply.has_error()]
        return aggregate_metricrecords(contents, "num-examples") if contents else None

    def summary(self) -> None:
        server = self.server
        log(INFO, "\t├──> %s: %r, codec %r", FIELD, server.algorithm, server.codec)
        log(INFO, "\t└──> %s of %s clients a round, seed %s (fl-lightning fit's sampler and server step)",
            server.per_round, server.num_clients, server.seed)

    # -- the global model and the state --------------------------------------------------------------------
    def global_state(self) -> dict[str, torch.Tensor]:
        return self.server.global_state()

    @property
    def comm(self):
        """Counted bytes and floats each way (CommMeter: ``upload_d``, ...), as ``fl-lightning fit`` counts them."""
        return self.server.comm

    def state_dict(self) -> dict:
        """Between rounds: the server's state (``InProcessServer.state_dict``), the round of each client's last
        aggregated upload (the nodes commit their rows on it) and the traffic rows."""
        return {"format": FORMAT, "server": self.server.state_dict(), "aggregated": dict(self.clients.aggregated),
                "traffic": list(self.traffic)}

    def load_state_dict(self, state: dict) -> None:
        if state.get("format") != FORMAT or "server" not in state:
            raise refuse_in_one_line(ConfigError(f"{FIELD}(checkpoint=...)", "is not an AlgorithmStrategy "
                                                 "checkpoint: give the file its checkpoint= option wrote"))
        self.server.load_state_dict(state["server"])
        self.clients.aggregated = {int(k): int(v) for k, v in state["aggregated"].items()}
        self.traffic = list(state["traffic"])

    def save(self, path: str) -> None:
        """Written atomically: a ServerApp killed while saving leaves the previous round's file."""
        save_atomically(self.state_dict(), path)

    def load(self, path: str) -> "AlgorithmStrategy":
        self.load_state_dict(torch.load(path, weights_only=True))
        return self
