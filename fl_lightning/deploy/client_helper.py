"""The client side of ``AlgorithmStrategy`` in the user's own Flower ClientApp (docs/callbacks_outside_fl_lightning.md)::

    app = ClientApp()
    app.query()(answer_join)                      # tells the strategy which partition this node holds

    @app.train()
    def train(message, context):
        shard = my_partition(context.node_config["partition-id"])
        trainer = pl.Trainer(max_epochs=1, ...)   # the user's own Trainer (either Lightning namespace)
        return fit_reply(message, context, MyLitModule(), trainer,
                         lambda job: DataLoader(shard, batch_size=32, sampler=job.sampler(shard)))

``fit_reply`` rebuilds the server's ``ClientJob`` from the message (x^r, the round's plan, the algorithm's server state:
c, h, ...), runs the user's ``Trainer.fit`` with the job's ``FederatedClient`` callback (the algorithm's client hooks
through trainer_path's ``ClientHooks``), then the algorithm's ``on_client_reported`` here, on the node, as the
deployment's nodes do (fl_lightning.deploy.node): its derived sums (Δc_i, ...) go back in the reply, its rows (c_i,
h_i, codec residuals, personal rows) stay in ``context.state`` and are committed once the strategy says it aggregated
that upload (the next message's ``aggregated_round``). The reply is the upload as sent (fl_lightning.deploy.wire).
With a node config ``state-dir="DIR"`` the rows are also written to a file there, so they outlive the Flower run: a
ServerApp resumed from its checkpoint is a new ``flwr run``, whose ``context.state`` starts empty.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Callable, Optional, Union

import torch
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict

from fl_lightning.assembly.outside import InProcessServer, accumulation_refusal, resolved, run_seed
from fl_lightning.deploy import messages, wire
from fl_lightning.deploy.node import DerivedSums
from fl_lightning.errors import ConfigError, refuse_in_one_line
from fl_lightning.federation.lightning_client import ClientJob, FederatedClient, check_module
from fl_lightning.federation.local_training import call_hook

FIELD = "fit_reply"
STATE = "fl-lightning.client"  # context.state's record: this node's client rows, committed and pending


def answer_join(message: Message, context: Context) -> Message:
    """The node's ``query`` answer to ``AlgorithmStrategy.join``: its ``partition-id`` (the client it trains)."""
    partition = context.node_config.get("partition-id")
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise refuse_in_one_line(ConfigError("partition-id", f"the node has {partition!r}; start each SuperNode with "
                                             "--node-config 'partition-id=N' (simulation sets it)"))
    return Message(RecordDict({messages.RECORD: ConfigRecord({"partition-id": partition})}), reply_to=message)


def read_request(message: Message) -> dict:
    if messages.RECORD not in message.content or messages.KEY not in message.content[messages.RECORD]:
        raise refuse_in_one_line(ConfigError(FIELD, "this message was not sent by AlgorithmStrategy (it has no "
                                             f"'{messages.RECORD}' record): use fit_reply with AlgorithmStrategy"))
    return wire.from_bytes(bytes(message.content[messages.RECORD][messages.KEY]))


def message_key(message: Message) -> str:
    """One train message, also when delivered twice; a round sent again by a resumed strategy is another."""
    meta = message.metadata
    return f"{meta.run_id}:{meta.message_id}:{meta.created_at}"


class NodeRows:
    """This node's client rows in ``context.state`` (and the ``state-dir`` file): {run_id, last round trained, its
    message, committed rows, pending rows}."""

    def __init__(self, context: Context, request: dict, message: Message):
        self.context = context
        directory = context.node_config.get("state-dir")
        self.path = os.path.join(str(directory), f"{STATE}.bin") if directory else None
        saved = context.state.get(STATE)
        data = bytes(saved[messages.KEY]) if saved is not None else None
        if data is None and self.path is not None and os.path.exists(self.path):
            with open(self.path, "rb") as f:  # a new Flower run of the same fl-lightning run: a resumed strategy
                data = f.read()
        state = wire.from_bytes(data) if data is not None else None
        if state is None or state["run_id"] != request["run_id"]:  # a new run: its rows start empty
            state = {"run_id": request["run_id"], "round": -1, "rows": {}, "pending": None}
        key = message_key(message)
        if request["round"] < state["round"] or (request["round"] == state["round"]
                                                 and state.get("message") == key):
            raise refuse_in_one_line(ConfigError(FIELD, f"this message is round {request['round'] + 1}'s of run "
                                                 f"{request['run_id'][:8]}, but this node trained round "
                                                 f"{state['round'] + 1} already: answer each new train message once"))
        pending = state["pending"]
        if pending is not None and pending["round"] == request["aggregated_round"]:
            state["rows"].update(pending["rows"])  # the strategy aggregated that upload
        state["pending"] = None
        state["message"] = key
        self.state = state

    def save(self, round_idx: int, rows: dict) -> None:
        self.state["round"] = round_idx
        self.state["pending"] = {"round": round_idx, "rows": rows} if rows else None
        data = wire.to_bytes(self.state)
        self.context.state[STATE] = ConfigRecord({messages.KEY: data})
        if self.path is not None:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(self.path + ".tmp", "wb") as f:
                f.write(data)
            os.replace(self.path + ".tmp", self.path)


def check_algorithm(algorithm, request: dict) -> None:
    """The algorithm the ClientApp expects (a name or an ``Algorithm``) is the strategy's."""
    if algorithm is None:
        return
    mine = resolved(algorithm, "none")[0]
    server = request["algorithm_name"]
    if mine.name != server or (not isinstance(algorithm, str) and mine.spec() != request["algorithm"]):
        described = mine.name if isinstance(algorithm, str) else repr(mine)
        raise refuse_in_one_line(ConfigError(f"{FIELD}(algorithm=...)", f"this client runs {described} but the "
                                             f"strategy runs {server} {request['algorithm']['init_args']}: give both "
                                             "the same algorithm and options"))


def rebuild(model, request: dict, rows: dict, directory: str) -> tuple[ClientJob, InProcessServer]:
    """The server's job for this client, on a mirror of its loop (the same hooks, loaded with the server's state)."""
    segments = tuple((name, tuple(shape)) for name, shape in request["segments"])
    check_module(model, segments)
    mirror = InProcessServer(model, algorithm=request["algorithm"], clients=request["num_clients"],
                             per_round=request["per_round"], seed=request["seed"],
                             compression=request["compression"], local_epochs=request["local_epochs"],
                             num_samples=request["num_samples"], weighted_aggregation=request["weighted"],
                             grad_clip=request["grad_clip"], directory=directory)
    mirror.global_vector.copy_(request["global_vector"])
    for callback, state in zip(mirror.callbacks, request["callback_states"]):
        if state:
            callback.load_state_dict(state)
    tasks = [wire.task_from(record) for record in request["plan"]]
    task = tasks[request["position"]]
    store = mirror.client_state
    for name, values in rows.items():  # the node's committed rows, as the fit's store holds them
        table = store.table(name, values.numel())
        table.begin_round(request["round"] - 1, [task.client_id])
        table.write(task.client_id, values)
        table.end_round([task.client_id])
    plan = mirror.loop.plan(request["round"], tasks)
    with run_seed(request["seed"]):
        call_hook(mirror.callbacks, "configure_round", plan)
    for planned, record in zip(plan.clients, request["plan"]):  # the tasks exactly as the server's hooks left them
        for name, value in vars(wire.task_from(record)).items():
            setattr(planned, name, value)
    store.begin_round(request["round"], [task.client_id])
    job = ClientJob(request["run_id"], request["round"], plan.clients[request["position"]], plan, mirror.callbacks,
                    mirror.global_vector, segments, request["algorithm_name"], request["grad_clip"],
                    request["weighted"], None if request["local_epochs"] is None else task.local_epochs,
                    accumulation_refusal(mirror.callbacks))
    return job, mirror


def fit_reply(message: Message, context: Context, model, trainer, data: Union[Callable, object],
              algorithm=None) -> Message:
    """Trains this node's client for the strategy's round with the user's ``model`` and ``trainer`` and returns the
    reply Message. ``data``: the training DataLoader, or a function of the job giving it (``job.sampler(shard)``
    draws fl-lightning fit's minibatch order); ``algorithm``: what this client expects (refused if not the
    strategy's)."""
    request = read_request(message)
    check_algorithm(algorithm, request)
    node = NodeRows(context, request, message)
    partition = context.node_config.get("partition-id")
    client_id = request["plan"][request["position"]][0]
    if isinstance(partition, int) and partition != client_id:
        raise refuse_in_one_line(ConfigError("partition-id", f"the strategy sent client {client_id}'s job to the "
                                             f"node holding partition {partition}"))
    directory = tempfile.mkdtemp(prefix="fl_lightning_node_")
    try:
        job, mirror = rebuild(model, request, node.state["rows"], directory)
        callback = FederatedClient(job, algorithm=request["algorithm_name"])
        trainer.callbacks.append(callback)
        try:
            trainer.fit(model, data(job) if callable(data) else data)
        finally:
            trainer.callbacks.remove(callback)
        client, loss_sum, _ = job.result
        derived = DerivedSums()
        if not job.task.lost and client.upload.is_finite():
            client.received = derived
            call_hook(mirror.callbacks, "on_client_reported", client)
        store = mirror.client_state
        written = {name: [client_id] for name, table in store.tables.items() if client_id in table.written}
        store.end_round(written)
        rows = {name: store.tables[name].read(client_id) for name in written}
        mirror.client_state.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    node.save(request["round"], rows)
    body = {"run_id": request["run_id"], "round": request["round"], "client_id": client_id,
            "upload": wire.payload_record(client.upload), "download_bytes": int(client.download.nbytes),
            "loss_sum": loss_sum.detach().cpu(), "steps": int(client.steps), "weight": float(client.weight),
            "sums": [list(r) for r in derived.records]}
    metrics = {"train_loss": float(loss_sum) / max(client.steps, 1), "num-examples": int(callback.num_samples),
               "upload-bytes": int(client.upload.nbytes)}
    return Message(RecordDict({messages.RECORD: ConfigRecord({messages.KEY: wire.to_bytes(body)}),
                               "metrics": MetricRecord(metrics)}), reply_to=message)


def global_model(message: Message, model: torch.nn.Module) -> torch.nn.Module:
    """For the user's ``@app.evaluate()``: ``model`` loaded with the global model the strategy sent."""
    model.load_state_dict(message.content["arrays"].to_torch_state_dict())
    return model
