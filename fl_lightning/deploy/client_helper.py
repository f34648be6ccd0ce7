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
that upload (the next message's ``aggregated_round``). The job and the reply are flower-local's (fl_lightning.deploy.protocol).
With a node config ``state-dir="DIR"`` the rows are also written to a file there, so they outlive the Flower run: a
ServerApp resumed from its checkpoint is a new ``flwr run``, whose ``context.state`` starts empty.
"""
from __future__ import annotations

import copy
import os
from typing import Callable, Union

import torch
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict

from fl_lightning.assembly.connector import accumulation_refusal, choose_algorithm, client_hooks
from fl_lightning.assembly.outside import ClientSizes
from fl_lightning.deploy import protocol
from fl_lightning.deploy.rows import NodeRows, client_store, written_rows
from fl_lightning.errors import ConfigError, refuse_in_one_line
from fl_lightning.federation.blocks import partition_for
from fl_lightning.federation.contexts import RoundPlanner
from fl_lightning.federation.flat import FlatModel
from fl_lightning.federation.seeding import run_seed_set
from fl_lightning.federation.lightning_client import ClientJob, FederatedClient, check_module

FIELD = "fit_reply"
STATE = "fl-lightning.client"  # context.state's record: this node's client rows, committed and pending


def answer_join(message: Message, context: Context) -> Message:
    """The node's ``query`` answer to ``AlgorithmStrategy.join``: its ``partition-id`` (the client it trains)."""
    partition = context.node_config.get("partition-id")
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise refuse_in_one_line(ConfigError("partition-id", f"the node has {partition!r}; start each SuperNode with "
                                             "--node-config 'partition-id=N' (simulation sets it)"))
    run = message.content[protocol.JOIN_REQUEST]["run_id"]  # a user's node holds no config of its own: the run's
    return Message(RecordDict({protocol.JOIN_ANSWER: ConfigRecord({"partition_id": partition, "run_id": run})}),
                   reply_to=message)


def read_job(message: Message) -> protocol.Job:
    job = protocol.read_job(message.content) if protocol.is_job(message.content) else None
    if job is None or job.setup is None:
        raise refuse_in_one_line(ConfigError(FIELD, "this message was not sent by AlgorithmStrategy (it has no "
                                             f"'{protocol.JOB}' record with a setup): use fit_reply with "
                                             "AlgorithmStrategy"))
    return job


def message_key(message: Message) -> str:
    """One train message, also when delivered twice; a round sent again by a resumed strategy is another."""
    meta = message.metadata
    return f"{meta.run_id}:{meta.message_id}:{meta.created_at}"


def saved_rows(context: Context, run_id: str) -> NodeRows:
    """This node's rows (fl_lightning.deploy.rows) from ``context.state``, else from the ``state-dir`` file (a new
    Flower run of the same fl-lightning run), kept in that file too."""
    directory = context.node_config.get("state-dir")
    path = os.path.join(str(directory), f"{STATE}.pt") if directory else None
    if STATE in context.state:
        return NodeRows(protocol.value_of(context.state[STATE], context.state[f"{STATE}.form"]), run_id, path)
    return NodeRows.load(path, run_id)


def check_algorithm(algorithm, setup: dict) -> None:
    """The algorithm the ClientApp expects (a name or an ``Algorithm``) is the strategy's."""
    if algorithm is None:
        return
    mine = choose_algorithm(algorithm, "none", FIELD)[0]
    server = setup["algorithm_name"]
    if mine.name != server or (not isinstance(algorithm, str) and protocol.as_sent(mine.spec()) != setup["algorithm"]):
        described = mine.name if isinstance(algorithm, str) else repr(mine)
        raise refuse_in_one_line(ConfigError(f"{FIELD}(algorithm=...)", f"this client runs {described} but the "
                                             f"strategy runs {server} {setup['algorithm']['init_args']}: give both "
                                             "the same algorithm and options"))


def rebuild(model, job: protocol.Job, store) -> tuple[ClientJob, list]:
    """The server's job for this client, with what a node needs of the run to train one client — the algorithm's
    hooks loaded with the server's state, the model's flat layout and block division, ``store`` (this node's rows:
    fl_lightning.deploy.rows), the round replayed — and no server (no loop, no server optimizer)."""
    setup = job.setup
    segments = tuple((name, tuple(shape)) for name, shape in setup["segments"])
    check_module(model, segments)
    algorithm, codec = choose_algorithm(setup["algorithm"], setup["compression"], FIELD)
    net = copy.deepcopy(model).cpu()
    algorithm.check_network(net)  # FedPer, FedBN find their layers here, before callbacks()
    callbacks = sum(client_hooks(algorithm, codec), [])
    protocol.load_states(callbacks, job)
    blocks = partition_for(net, algorithm)
    flat = FlatModel(net, order=blocks.order if blocks else None)
    planner = RoundPlanner(flat, ClientSizes(setup["num_clients"], setup["num_samples"]), blocks, store)
    with run_seed_set(setup["seed"]):
        plan = protocol.replay_round(planner.plan(job.round, job.lr, job.tasks()), callbacks, job)
    store.begin_round(job.round, [job.client_id])
    task = plan.clients[job.position]
    client_job = ClientJob(job.run_id, job.round, task, plan, callbacks, job.global_vector.to(flat.device), segments,
                           setup["algorithm_name"], setup["grad_clip"], setup["weighted"],
                           None if setup["local_epochs"] is None else task.local_epochs,
                           accumulation_refusal(algorithm, callbacks))
    return client_job, callbacks


def fit_reply(message: Message, context: Context, model, trainer, data: Union[Callable, object],
              algorithm=None) -> Message:
    """Trains this node's client for the strategy's round with the user's ``model`` and ``trainer`` and returns the
    reply Message. ``data``: the training DataLoader, or a function of the job giving it (``job.sampler(shard)``
    draws fl-lightning fit's minibatch order); ``algorithm``: what this client expects (refused if not the
    strategy's)."""
    job = read_job(message)
    check_algorithm(algorithm, job.setup)
    partition, client_id = context.node_config.get("partition-id"), job.client_id
    if isinstance(partition, int) and partition != client_id:
        raise refuse_in_one_line(ConfigError("partition-id", f"the strategy sent client {client_id}'s job to the "
                                             f"node holding partition {partition}"))
    rows, key = saved_rows(context, job.run_id), message_key(message)
    rows.refuse_replay(FIELD, job.round, key)
    with client_store(job.setup["num_clients"], client_id, job.round, rows.committed(job.aggregated_round)) as store:
        client_job, callbacks = rebuild(model, job, store)
        callback = FederatedClient(client_job, algorithm=job.setup["algorithm_name"])
        trainer.callbacks.append(callback)
        try:
            trainer.fit(model, data(client_job) if callable(data) else data)
        finally:
            trainer.callbacks.remove(callback)
        client, loss_sum, _ = client_job.result
        derived = protocol.report_on_node(callbacks, client)
        rows.trained(job.round, written_rows(store, client_id) if derived is not None else {}, key)
    context.state[STATE], context.state[f"{STATE}.form"] = protocol.value_records(rows.state)
    rows.save()
    content = protocol.reply_content(job, client, loss_sum, derived)
    content["metrics"] = MetricRecord({"train_loss": float(loss_sum) / max(client.steps, 1),
                                       "num-examples": int(callback.num_samples),
                                       "upload-bytes": int(client.upload.nbytes)})
    return Message(content, reply_to=message)


def global_model(message: Message, model: torch.nn.Module) -> torch.nn.Module:
    """For the user's ``@app.evaluate()``: ``model`` loaded with the global model the strategy sent."""
    model.load_state_dict(message.content["arrays"].to_torch_state_dict())
    return model
