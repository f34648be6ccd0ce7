"""One deployment protocol (docs/deployment.md, "The protocol"): a client's job and its reply as Flower records, for
both transports — ``fl-lightning flower-local``'s ServerApp (``RemoteClients`` → a node's ``NodeSession``) and a
user's own app (``AlgorithmStrategy`` → ``fit_reply``).

A job: ``fl.x`` (ArrayRecord: x^r), ``fl.state`` (ArrayRecord: the server hooks' tensors, ``<hook>.<key>``) and
``fl.job`` (ConfigRecord: run id, round, lr, the position trained, the round's plan — every sampled client's task, so
the node rebuilds the same round —, the round of the client's last aggregated upload, the hooks' other state values;
for a user's ClientApp also ``setup``, what it builds the algorithm's hooks from). A reply: ``fl.upload`` (ArrayRecord:
each upload part's message tensors ``<part>.<field>``, the sums the node's ``on_client_reported`` derived
``sum.<k>``, the loss sum) and ``fl.reply`` (ConfigRecord: the parts' channels, ranges and message class, the counted
download, steps, weight, the network's logs, seconds). A node's one-line error: ``fl.error``. A codec's message is
a dataclass: its tensor fields travel as arrays, the others as config values, its class by its path.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Optional

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

from fl_lightning.class_paths import class_path, import_class
from fl_lightning.deploy.framing import ERROR
from fl_lightning.errors import ConfigError
from fl_lightning.federation.contexts import ClientContext, ClientTask, RoundContext
from fl_lightning.federation.local_training import call_hook
from fl_lightning.federation.messages import Part, Payload
from fl_lightning.federation.seams import ClientRunner
from fl_lightning.federation.user_module import RecordedLogs

X, STATE, JOB, UPLOAD, REPLY = "fl.x", "fl.state", "fl.job", "fl.upload", "fl.reply"
JOIN_REQUEST, JOIN_ANSWER = "fl.join", "fl.joined"  # flower-local's join (fl_lightning.deploy.join): ConfigRecords
TASK_FIELDS = ("client_id", "position", "seed", "num_samples", "upload_ranges", "local_epochs", "pooled", "lost",
               "max_steps")


# -- the job -----------------------------------------------------------------------------------------------------
@dataclass
class Job:
    """One client's round as its node reads it."""

    run_id: str
    round: int
    lr: float
    position: int
    plan_values: list  # every sampled client's task (``task_values``)
    aggregated_round: int
    global_vector: torch.Tensor
    callback_states: list[dict]
    setup: Optional[dict]

    def tasks(self) -> list[ClientTask]:
        """The round's tasks as the server's hooks left them: new objects each call (the node's hooks change theirs)."""
        return [task_from(values) for values in self.plan_values]

    @property
    def client_id(self) -> int:
        return int(self.plan_values[self.position][0])


def task_values(task: ClientTask) -> list:
    return [[list(r) for r in value] if name == "upload_ranges" else value
            for name, value in ((name, getattr(task, name)) for name in TASK_FIELDS)]


def task_from(values: list) -> ClientTask:
    fields = dict(zip(TASK_FIELDS, values))
    fields["upload_ranges"] = [tuple(r) for r in fields["upload_ranges"]]
    return ClientTask(**fields)


def _form(value, key: str, arrays: dict):
    """A hook's state as JSON with its tensors in ``arrays`` (nested dicts, lists and tuples kept as they are)."""
    if isinstance(value, torch.Tensor):
        arrays[key] = value.detach().cpu()
        return {"@array": key}
    if isinstance(value, dict):
        return {"@dict": [[k, _form(v, f"{key}/{k}", arrays)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return {"@list": [_form(v, f"{key}/{i}", arrays) for i, v in enumerate(value)], "tuple": isinstance(value, tuple)}
    return value


def _value(form, arrays: dict):
    if isinstance(form, dict) and "@array" in form:
        return arrays[form["@array"]]
    if isinstance(form, dict) and "@dict" in form:
        return {k: _value(v, arrays) for k, v in form["@dict"]}
    if isinstance(form, dict) and "@list" in form:
        items = [_value(v, arrays) for v in form["@list"]]
        return tuple(items) if form["tuple"] else items
    return form


def value_records(value) -> tuple[ArrayRecord, ConfigRecord]:
    """Any state of tensors, numbers, strings, dicts, lists as two records (e.g. a node's rows in ``context.state``)."""
    arrays: dict = {}
    form = _form(value, "v", arrays)
    return ArrayRecord(arrays), ConfigRecord({"form": json.dumps(form)})


def value_of(arrays: ArrayRecord, form: ConfigRecord):
    return _value(json.loads(form["form"]), arrays.to_torch_state_dict())


def as_sent(value):
    """``value`` as a node reads it back from JSON (tuples as lists): for comparing a spec with the job's."""
    return json.loads(json.dumps(value))


def job_content(run_id: str, plan: RoundContext, position: int, global_vector: torch.Tensor, callbacks,
                aggregated_round: int, setup: Optional[dict] = None) -> RecordDict:
    arrays: dict = {}
    states = [_form(callback.state_dict(), str(index), arrays) for index, callback in enumerate(callbacks)]
    job = {"run_id": run_id, "round": plan.round, "lr": plan.lr, "position": position,
           "aggregated_round": aggregated_round, "plan": json.dumps([task_values(t) for t in plan.clients]),
           "states": json.dumps(states)}
    if setup is not None:
        job["setup"] = json.dumps(setup)
    return RecordDict({X: ArrayRecord({"x": global_vector.detach().cpu()}), STATE: ArrayRecord(arrays),
                       JOB: ConfigRecord(job)})


def is_job(content: RecordDict) -> bool:
    return JOB in content and X in content


def read_job(content: RecordDict) -> Job:
    job, arrays = content[JOB], content[STATE].to_torch_state_dict()
    states = [_value(form, arrays) for form in json.loads(job["states"])]
    return Job(str(job["run_id"]), int(job["round"]), float(job["lr"]), int(job["position"]),
               json.loads(job["plan"]), int(job["aggregated_round"]), content[X].to_torch_state_dict()["x"], states,
               json.loads(job["setup"]) if "setup" in job else None)


def replay_round(plan: RoundContext, callbacks, job: Job) -> RoundContext:
    """The round as the server planned it, on a node: the hooks' own ``configure_round`` (their tables, channels),
    then every task exactly as the server's hooks left it."""
    call_hook(callbacks, "configure_round", plan)
    for task, sent in zip(plan.clients, job.tasks()):
        for name in TASK_FIELDS:
            setattr(task, name, getattr(sent, name))
    return plan


def load_states(callbacks, job: Job) -> None:
    for callback, state in zip(callbacks, job.callback_states):
        if state:
            callback.load_state_dict(state)


# -- the reply ---------------------------------------------------------------------------------------------------
class DerivedSums:
    """Stands in for the server's sums in a node's ``on_client_reported``: records each ``add_sum``, which the
    server adds in plan order (``NodeClients.reported``)."""

    def __init__(self):
        self.records: list[tuple[str, torch.Tensor]] = []

    def add_sum(self, channel: str, values: torch.Tensor) -> None:
        self.records.append((channel, values.detach().to("cpu").reshape(-1).clone()))


def report_on_node(callbacks, client: ClientContext) -> Optional[DerivedSums]:
    """What the fit runs once an upload arrived, on the node right after training: the hooks' ``on_client_reported``
    (their rows: c_i, residuals), with the sums they derive for the server recorded; None if nothing is reported
    (lost, or not finite)."""
    if client.task.lost or not client.upload.is_finite():
        return None
    client.received = DerivedSums()
    call_hook(callbacks, "on_client_reported", client)
    return client.received


@dataclass
class Reply:
    """One client's reply as the server reads it."""

    run_id: str
    round: int
    client_id: int
    upload: Payload
    download_bytes: int
    loss_sum: torch.Tensor
    steps: int
    weight: float
    logs: list
    sums: list[tuple[str, torch.Tensor]]
    seconds: float


def _message_form(message, prefix: str, arrays: dict) -> dict:
    if isinstance(message, torch.Tensor):
        arrays[prefix] = message.detach().cpu()
        return {"class": None}
    cls, values = type(message), {}
    for field in dataclasses.fields(message):
        value = getattr(message, field.name)
        if isinstance(value, torch.Tensor):
            arrays[f"{prefix}.{field.name}"] = value.detach().cpu()
        else:
            values[field.name] = value
    return {"class": class_path(cls), "values": values}


def _message_from(form: dict, prefix: str, arrays: dict):
    if form["class"] is None:
        return arrays[prefix]
    cls = import_class(form["class"])
    if not dataclasses.is_dataclass(cls) or not hasattr(cls, "decode"):
        raise ConfigError("fl.reply", f"{form['class']} is not a codec's message (a dataclass with decode())")
    tensors = {f.name: arrays[f"{prefix}.{f.name}"] for f in dataclasses.fields(cls) if f.name not in form["values"]}
    return cls(**form["values"], **tensors)


def reply_content(job: Job, client: ClientContext, loss_sum: torch.Tensor, sums: Optional[DerivedSums],
                  logs: Optional[RecordedLogs] = None, seconds: float = 0.0) -> RecordDict:
    arrays, parts = {"loss_sum": loss_sum.detach().cpu().reshape(())}, []
    for index, part in enumerate(client.upload.parts):
        parts.append({"channel": part.channel, "ranges": [list(r) for r in part.ranges],
                      "message": _message_form(part.message, f"part{index}", arrays)})
    reply = {"run_id": job.run_id, "round": job.round, "client_id": job.client_id, "parts": json.dumps(parts),
             "download_bytes": int(client.download.nbytes), "steps": int(client.steps), "weight": float(client.weight),
             "logs": json.dumps(_form(list(logs.entries) if logs is not None else [], "log", arrays)),
             "sums": json.dumps(_form(sums.records if sums is not None else [], "sum", arrays)),
             "seconds": float(seconds)}
    return RecordDict({UPLOAD: ArrayRecord(arrays), REPLY: ConfigRecord(reply)})


def read_reply(content: RecordDict) -> Reply:
    reply, arrays = content[REPLY], content[UPLOAD].to_torch_state_dict()
    parts = [Part(p["channel"], [tuple(r) for r in p["ranges"]], _message_from(p["message"], f"part{i}", arrays))
             for i, p in enumerate(json.loads(reply["parts"]))]
    return Reply(str(reply["run_id"]), int(reply["round"]), int(reply["client_id"]), Payload(parts),
                 int(reply["download_bytes"]), arrays["loss_sum"], int(reply["steps"]), float(reply["weight"]),
                 _value(json.loads(reply["logs"]), arrays), _value(json.loads(reply["sums"]), arrays),
                 float(reply["seconds"]))


# -- errors and sizes --------------------------------------------------------------------------------------------
def failure(message: Message) -> Optional[str]:
    """The node's one-line error or Flower's, else None."""
    if message.has_error():
        return f"Flower error {message.error.code}: {message.error.reason}"
    return str(message.content[ERROR]["line"]) if ERROR in message.content else None


def wire_bytes(message: Message) -> int:
    """What Flower transfers for the message: every object of its tree, serialised (headers included)."""
    return sum(len(obj.deflate()) for obj in get_all_nested_objects(message).values())


# -- the server's side -------------------------------------------------------------------------------------------
@dataclass
class SentBytes:
    """What a client downloaded, as its node counted it (``Payload.nbytes``)."""

    nbytes: int


class NodeClients(ClientRunner):
    """The loop's runner when the clients train on Flower nodes: the job each is sent, and its reply rebuilt into the
    loop's client context (a reply missing: a client that failed to report, as a dropped one). ``reported`` adds
    the sums the node's ``on_client_reported`` derived, in plan order, and notes which round of each client was
    aggregated: its node commits the client's rows on that word (the next job's ``aggregated_round``)."""

    def __init__(self, trainer=None):
        super().__init__(trainer)
        self.aggregated: dict[int, int] = {}

    @classmethod
    def refuse(cls, fit) -> Optional[ConfigError]:
        """What clients on Flower nodes do not run (yet), asked before any node joins (``server_app.configured``,
        ``InProcessServer`` for AlgorithmStrategy) and again by the fit's connector."""
        if fit.population is not None:
            return ConfigError("model.system", "simulated devices are for simulation; on Flower the nodes are real: "
                               "unset it")
        if fit.private:
            return ConfigError("model.privacy", "client-level DP is not deployable on Flower yet; unset it")
        if fit.processes > 1:
            return ConfigError("trainer.devices", "the Flower server runs one process; set trainer.devices 1")
        if fit.codec_deployable is False:
            return ConfigError("model.compression", "the codec's messages are not deployable on Flower yet; use "
                               "topk, randk or qsgd")
        return None

    def job(self, run_id: str, plan: RoundContext, position: int, setup: Optional[dict] = None) -> RecordDict:
        trainer = self.trainer
        return job_content(run_id, plan, position, trainer.global_vector, trainer.callbacks,
                           self.aggregated.get(plan.clients[position].client_id, -1), setup)

    def client(self, plan: RoundContext, position: int, reply: Optional[Reply]) -> tuple:
        """(client, loss sum, logs) as the loop's ``run`` yields them."""
        trainer, task = self.trainer, plan.clients[position]
        device = trainer.global_vector.device
        logs, loss_sum = RecordedLogs(), torch.zeros((), device=device)
        if reply is None:
            return (ClientContext.lost(task, plan.round, trainer.flat.vector, trainer.flat.grad, trainer.global_vector),
                    loss_sum, logs)
        client = ClientContext.on_trainer(task, plan, trainer, reply.weight)
        client.upload = reply.upload
        for part in client.upload.parts:
            if isinstance(part.message, torch.Tensor):
                part.message = part.message.to(device)
        client.download = SentBytes(reply.download_bytes)
        client.steps, loss_sum = reply.steps, reply.loss_sum.to(device)
        logs.entries = list(reply.logs)
        client.scratch[self] = reply.sums
        return client, loss_sum, logs

    def traffic(self, plan: RoundContext, position: int, node: Optional[int], sent_bytes: int, received_bytes: int,
                reply: Optional[Reply], client: ClientContext) -> dict:
        """One sampled client's row of the round's traffic (flower.csv, ``AlgorithmStrategy.traffic``): the bytes in
        Flower's messages each way (``wire_bytes``) and the counted ones (``client`` as ``client(...)`` rebuilt it)."""
        task = plan.clients[position]
        reported = reply is not None and not task.lost
        return {"round": plan.round + 1, "partition": task.client_id, "node_id": node,
                "sent_message_bytes": sent_bytes, "received_message_bytes": received_bytes,
                "counted_download_bytes": client.download.nbytes,
                "counted_upload_bytes": client.upload.nbytes if reported else 0,
                "node_train_s": None if reply is None else round(reply.seconds, 4), "reported": int(reported)}

    def reported(self, client: ClientContext) -> None:
        self.aggregated[client.client_id] = client.round
        for channel, values in client.scratch.get(self, []):
            client.received.add_sum(channel, values.to(client.received.device))
